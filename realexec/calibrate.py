"""Calibration: measure this machine with microbenchmarks on the real engine -> asyncsim.Profile.

`calibrate(workers=None, quick=False, cache=True, progress=True, force=False)` runs the
microbenchmarks of `realexec.microbench` and `realexec.microbench_host` on `workers` CPU workers
(default: one per core, as `realexec.run`) and turns them into the Profile that
`asyncsim.simulate` prices a program with:

- `t1` and "frontend:<op>" costs: seconds per issued op ("frontend:broadcast": a binary op on
  operands of different shapes); `free`: seconds per dropped handle;
- `t3`: the blocker's wake-up after the op it waits for ends; "frontend:asnumpy|print|item":
  what those blockers add (a copy, formatting), latency + bytes / bandwidth of the array, each
  the first of its kind in a fresh session (cold code, as the chapters' once-per-region calls);
- `startup`: what a fresh engine's first op round trip takes beyond a warm one;
- `nogil`: what a trivial kernel compiled with nogil=True takes per call beyond the same kernel
  holding the GIL: the moment each kernel call leaves the GIL free for a thread waiting for it;
- `wake`: what waking a sleeping thread costs the thread that wakes it (a queue put that wakes a
  thread asleep in its get, against one that does not);
- `dispatch`: the rest of an idle engine's round trip (a sleeping worker waking up), from two
  round trips measured at the start and at the end, averaged;
- `gil`: Python seconds per op on a worker outside its kernel, holding the GIL; `release`: what
  a worker adds when an op it finishes was the last user of a buffer the frontend dropped;
  `recheck`: what it adds per op while the frontend sleeps in a blocker waiting for it;
- "cpu:<op|group>" costs: latency + bytes / bandwidth fits over sizes for create, elementwise,
  binary (and broadcasting binary: "cpu:broadcast"), copy and reduce ops and the compute-bound
  samplers (with bytes beyond a cache size at a second bandwidth, and beyond a larger one at a
  third, where that fits far better); latency + bytes / bandwidth + flops / peak for `dot`
  (square products and matrix-vector products); non-negative least squares on relative error,
  each point a low quantile of repeats, averaged over sweeps spread over seconds
  (`realexec.microbench.kernel_times`, `realexec.fits`);
- `crowd` of those costs: how much one more kernel running at once stretches a memory-bound
  kernel's bytes time, from the same op on W workers at once against one alone (compute-bound
  ops as a check); `cores`: this machine's cores; `spin`, `switch`: realexec's and CPython's.
The numbers behind each value (and the slowdowns that are only reported) are in `meta`;
`refit(profile)` derives a profile from them again.

On a machine with a real GPU (or with `gpu=True`), `realexec.calibrate_gpu` adds gpu(0)'s
costs: the "gpu:" kernel costs, the host-device links, `gpu_issue` and `gpu_wait`.

None of this runs a scenario of `asyncsim.scenarios`: they are what the profile predicts.
Results are cached as JSON under $XDG_CACHE_HOME/asyncsim (default ~/.cache/asyncsim), keyed by
machine, package versions, the measured code (realexec, the frontend), workers and settings: a
second call loads the file; `force=True` measures again. `quick=True` uses small sizes and few
repeats (seconds; for tests and CI). Python's garbage collector is paused while measuring. A
full calibration first keeps every core busy for a second and spreads its rounds over seconds with
busy pauses (`realexec.steady`: idle cores of a virtual machine run slower for a while).
Units: seconds, bytes, bytes per second, flops per second.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import hashlib
import inspect
import json
import os
import platform
import sys
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from asyncsim.profile import Cost, Profile, ProfileError
from realexec import fits, microbench, microbench_host
from realexec.engine import Engine, default_workers
from realexec.fits import FITTED, ROW, blocker_costs, fit, fit_bytes, kernel_costs, set_crowding
from realexec.frontend import machine, session
from realexec.microbench import BackgroundLoad  # noqa: F401 -- re-exported
from realexec.steady import busy

VERSION = 6  # bump when what is measured changes: older cache files are then ignored


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...]  # elements (float32) for the bandwidth fits
    dot_sides: tuple[int, ...]  # square products
    gemv_sides: tuple[int, ...]  # (1, n) x (n, n) products
    repeats: int  # ops per size in the fits, in each of `sweeps` sweeps over the sizes
    sweeps: int
    issue_ops: int  # ops per issue loop
    loops: int  # repeats of each issue loop, round trip, backlog
    roundtrips: int
    blocker_sizes: tuple[int, ...]
    crowd_sizes: tuple[int, ...]  # elements of the memory-bound ops run on W workers at once
    compute_size: int  # elements of the compute-bound op run on W workers at once
    fresh_rounds: int  # fresh sessions per blocker size (start-up, cold blockers)
    recheck_size: int  # elements of the ops of the backlog a blocked frontend waits for
    spread: float  # seconds between the rounds of a per-op microbenchmark (realexec.steady.central)


# 2**23: the scenarios' largest arrays (2000 x 2000, ~2**22) spill out of the cache; with 2**22
# the largest size, the bytes fit had one point past the cache and missed it by a third
FULL = Settings(sizes=(2**10, 2**13, 2**16, 2**18, 2**20, 2**21, 2**22, 2**23),
                dot_sides=(32, 64, 128, 256, 512, 1024), gemv_sides=(128, 512, 2048),
                repeats=5, sweeps=3, issue_ops=300, loops=15, roundtrips=200,
                blocker_sizes=(2**4, 2**12, 2**18, 2**21), crowd_sizes=(2**20, 2**22),
                compute_size=2**20, fresh_rounds=3, recheck_size=2**13, spread=0.2)
QUICK = Settings(sizes=(2**8, 2**12, 2**16, 2**18), dot_sides=(16, 64, 256), gemv_sides=(64, 256),
                 repeats=3, sweeps=1, issue_ops=100, loops=5, roundtrips=50,
                 blocker_sizes=(2**4, 2**14),
                 crowd_sizes=(2**18,), compute_size=2**14, fresh_rounds=1, recheck_size=2**12,
                 spread=0.0)

def kernels(nd, settings, ctx=None) -> list[tuple]:
    """(name in `realexec.fits.FITTED`, op name in the engine's log, maker(size) ->
    (() -> NDArray), sizes) for every fitted op, its arrays on `ctx` (default: the CPU);
    `settings` gives `sizes`, `dot_sides` and `gemv_sides`. realexec.calibrate_gpu times the
    same ops on a GPU."""
    def vec(n):
        return nd.random.uniform(shape=(n,), ctx=ctx)

    def unary(f):
        def make(n):
            x = vec(n)
            return lambda: f(x)
        return make

    def binary(n):
        x, y = vec(n), vec(n)
        return lambda: x + y

    def broadcast(n):
        x, row = nd.random.uniform(shape=(max(1, n // ROW), ROW), ctx=ctx), vec(ROW)
        return lambda: x + row

    def create(f):
        return lambda n: (lambda: f(n))

    def product(n):  # a negative side is a (1, |n|) x (|n|, |n|) product
        m = abs(n)
        a = nd.random.uniform(0, 2.0 / m, shape=(1 if n < 0 else m, m), ctx=ctx)
        b = nd.random.uniform(0, 2.0 / m, shape=(m, m), ctx=ctx)
        return lambda: nd.dot(a, b)

    sizes = settings.sizes
    return [
        ("ones", "ones", create(lambda n: nd.ones((n,), ctx=ctx)), sizes),
        ("normal", "normal", create(lambda n: nd.random.normal(shape=(n,), ctx=ctx)), sizes),
        ("uniform", "uniform", create(lambda n: nd.random.uniform(shape=(n,), ctx=ctx)), sizes),
        ("add_scalar", "add_scalar", unary(lambda x: x + 1.0), sizes),
        ("add", "add", binary, sizes),
        ("broadcast", "add", broadcast, sizes),
        ("copy", "copy", unary(lambda x: x.copy()), sizes),
        ("sum", "sum", unary(lambda x: x.sum()), sizes),
        ("dot", "dot", product, settings.dot_sides + tuple(-n for n in settings.gemv_sides)),
    ]


def _measure(workers: int, settings: Settings, progress: bool) -> dict:
    """Run every microbenchmark; everything measured (raw numbers, fitted by `_profile`)."""
    from tqdm.auto import tqdm

    raw: dict = {}
    s = settings
    bar = tqdm(total=9 + len(FITTED), desc="calibrating", disable=not progress, leave=False)
    # this kind of machine runs slower for seconds after its cores idled (realexec.steady)
    busy(1.0 if s.spread else 0.0)
    bar.set_postfix_str("fresh engines")
    raw["fresh"] = microbench_host.fresh(workers, s.blocker_sizes, s.fresh_rounds)
    bar.update()
    with session(workers=workers) as nd:
        bench = microbench._Bench(nd, workers)
        bar.set_postfix_str("frontend")
        front = microbench.frontend(bench, s.issue_ops, s.loops, s.spread)
        raw["issue"], raw["free"] = front["issue"], front["free"]
        bar.update()
        bar.set_postfix_str("round trip")
        trip = microbench.roundtrip(bench, s.roundtrips, s.loops, s.spread / 2)
        raw["roundtrip"] = trip
        raw["t3_after_sleep"] = microbench.long_wake(bench, s.loops)
        bar.update()
        bar.set_postfix_str("blockers")
        raw["blockers"] = microbench.blockers(bench, s.blocker_sizes, s.repeats)
        bar.update()
        bar.set_postfix_str("worker overhead")
        raw["worker"] = microbench.worker_overhead(bench, s.issue_ops, s.loops, s.spread / 2)
        bar.update()
        raw["wake"] = microbench_host.wake(s.roundtrips, bursts=s.loops, pause=s.spread / 2)
        raw["nogil"] = microbench_host.nogil(s.loops, pause=s.spread / 2)
        bar.set_postfix_str("blocked frontend")
        raw["blocked"] = microbench_host.blocked(bench, s.issue_ops, s.loops, s.recheck_size,
                                                 s.spread / 2)
        bar.update()
        fits = raw["kernels"] = {}
        for name, logged, make, sizes in kernels(nd, s):
            bar.set_postfix_str(name)
            times = microbench.kernel_times(bench, make, sizes, s.repeats, logged,
                                            s.sweeps, s.spread)
            fits[name] = {"sizes": list(sizes), "seconds": times}
            bar.update()
        bar.set_postfix_str("round trip")
        raw["roundtrip_late"] = microbench.roundtrip(bench, s.roundtrips, s.loops, s.spread / 2)
        bar.update()
        bar.set_postfix_str("concurrency")
        raw["concurrency"] = _concurrency(bench, s) if workers > 1 else {}
        bar.update()
    bar.close()
    return raw


def _concurrency(bench, s: Settings) -> dict:
    """Memory-bound ops (two sizes), a sampler and a product, one at a time and W at once; the
    frontend's issue period with workers asleep and with all of them running."""
    nd = bench.nd
    xs = [nd.random.uniform(shape=(n,)) for n in s.crowd_sizes]
    m = nd.random.uniform(0, 1 / 256, shape=(256, 256))
    nd.waitall()
    out = {}
    cases = [(f"elementwise {x.size}", lambda x=x: x + 1.0, "add_scalar") for x in xs]
    cases += [("normal", lambda: nd.random.normal(shape=(s.compute_size,)), "normal"),
              ("dot", lambda: nd.dot(m, m), "dot")]
    for label, make, name in cases:
        alone, together = microbench_host.concurrency(bench, make, 4, name)
        out[label] = {"alone": alone, "together": together}
    alone_period, busy_period = microbench_host.busy_frontend(bench, s.issue_ops // 2,
                                                              s.loops, 40 * s.issue_ops)
    out["frontend"] = {"alone": alone_period, "busy": busy_period}
    return out


def _profile(name: str, workers: int, raw: dict, meta: dict) -> Profile:
    """The Profile from everything measured (`raw`, as `_measure` returns it)."""
    costs = kernel_costs(raw["kernels"])
    issue = raw["issue"]
    t1 = issue["add_scalar"]
    frontend = {"frontend:elementwise": t1, "frontend:create": issue["ones"],
                "frontend:reduce": issue["sum"], "frontend:dot": issue["dot"],
                "frontend:copy": issue["copy"], "frontend:add": issue["add"],
                "frontend:sub": issue["add"], "frontend:mul": issue["add"],
                "frontend:div": issue["add"], "frontend:broadcast": issue["broadcast"],
                "frontend:relu": issue["relu"], "frontend:normal": issue["normal"],
                "frontend:uniform": issue["normal"], "frontend:slice": issue["slice"]}
    costs.update({key: Cost(latency=secs) for key, secs in frontend.items()})
    fresh = raw["fresh"]
    # the chapters' asnumpy, print and item run once per region: priced cold (see fresh)
    costs.update(blocker_costs({**fresh["blockers"],
                                "wait_to_read": raw["blockers"]["wait_to_read"]}))
    # the round trip, measured early and late and averaged: this machine's wake-ups and cores
    # speed up and slow down for seconds at a time, and one measurement may catch either
    late = raw.get("roundtrip_late", raw["roundtrip"])
    trip = {k: 0.5 * (v + late[k]) for k, v in raw["roundtrip"].items()}
    gil = raw["worker"]["independent"]
    release = max(0.0, raw["worker"]["chain_dropped"] - raw["worker"]["chain"])
    t3 = trip["t3"]
    # the idle round trip's remainder: the worker waking up, the call into the blocker (the
    # worker's own Python work after the op runs while the frontend wakes: inside t3); with the
    # op priced as the model prices it, so that the model's round trip is the measured one
    # (its push wakes the worker: `wake`, which the model adds to the frontend's issue)
    elements = microbench.ROUND_TRIP
    exec_s = costs["cpu:elementwise"].time(2 * fits.F32 * elements, elements)
    wake = raw.get("wake", {}).get("wake", 0.0)  # a profile measured before it was
    dispatch = max(0.0, trip["period"] - t1 - wake - raw["free"] - exec_s - t3)
    set_crowding(costs, raw["concurrency"], workers)
    return Profile(name=name, t1=t1, t3=t3, workers=workers, cores=default_workers(), gpus=0,
                   costs=costs, free=raw["free"], dispatch=dispatch, wake=wake, gil=gil,
                   release=release,
                   switch=sys.getswitchinterval(), spin=_engine_spin(),
                   recheck=raw["blocked"]["recheck"], startup=fresh["startup"],
                   nogil=raw.get("nogil", {}).get("nogil", 0.0),  # 0: measured before it was
                   meta=json.loads(json.dumps({**meta, "measurements": raw})))  # as saved


def refit(profile: Profile) -> Profile:
    """`profile` computed again from the measurements it keeps in its meta (after a change of
    the fits or of how a value is derived; the measurements themselves are not taken again)."""
    meta = {k: v for k, v in profile.meta.items() if k != "measurements"}
    raw = json.loads(json.dumps(profile.meta["measurements"]))
    return _profile(profile.name, profile.workers, raw, meta)


def _engine_spin() -> float:
    """How long realexec's blockers spin before they sleep (the engine's default)."""
    spin = inspect.signature(Engine).parameters.get("spin_s")
    return float(spin.default) if spin is not None else 0.0


# -- the cache and the entry point ---------------------------------------------------------------
def _versions() -> dict:
    import numba
    import simpy

    return {"python": platform.python_version(), "numpy": np.__version__,
            "numba": numba.__version__, "simpy": simpy.__version__}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "asyncsim"


def _code_digest() -> str:
    """A digest of the code whose speed is measured (the engine, its kernels, the frontend), so
    that a changed engine is measured again rather than predicted from an old profile."""
    import asyncsim
    import realexec

    digest = hashlib.sha1()
    for package, names in ((realexec, ("*.py", "kernels/*.py")),
                           (asyncsim, ("frontend.py", "ops.py"))):
        root = Path(package.__file__).parent
        for name in names:
            for path in sorted(root.glob(name)):
                digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def cache_path(workers: int, quick: bool, gpu: bool = False) -> Path:
    """Where the profile for this machine, these versions, this code and these settings is
    cached."""
    settings = QUICK if quick else FULL
    key = json.dumps([VERSION, platform.node(), machine(), _versions(), _code_digest(), workers,
                      asdict(settings), _gpu_name() if gpu else None], sort_keys=True)
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    host = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in platform.node()) or "here"
    return cache_dir() / f"profile-{host}-w{workers}{'-quick' if quick else ''}-{digest}.json"


def _real_gpu() -> bool:
    from realexec.kernels import gpu

    return gpu.available() and not gpu.on_simulator()


def _gpu_name() -> str:
    from realexec.gpu_device import _device_name
    from realexec.kernels import gpu

    return "CUDA simulator" if gpu.on_simulator() else _device_name(0)


def calibrate(workers: int | None = None, quick: bool = False, cache: bool = True,
              progress: bool = True, force: bool = False, gpu: bool | None = None) -> Profile:
    """This machine's Profile for `workers` CPU workers, measured (or loaded from the cache);
    with `gpu` (default: when a real GPU is here, not the simulator) gpu(0)'s costs and links
    too (`realexec.calibrate_gpu`), for every GPU of the machine."""
    gpu = _real_gpu() if gpu is None else bool(gpu)
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    path = cache_path(workers, quick, gpu)
    if cache and not force and path.exists():
        with contextlib.suppress(ProfileError, OSError, ValueError, KeyError):
            return Profile.load(path)
    settings = QUICK if quick else FULL
    enabled = gc.isenabled()
    gc.disable()  # a collection pauses every thread for up to ~100 ms: no part of a cost
    load = microbench.BackgroundLoad()
    try:
        raw = _measure(workers, settings, progress)
    finally:
        if enabled:
            gc.enable()
    raw["background load"] = busy = load.cores()
    if busy > 0.1:
        warnings.warn(f"calibrate: other processes kept {busy:.2f} cores busy while measuring; "
                      f"the profile may be off (calibrate(force=True) on a quiet machine)",
                      stacklevel=2)
    meta = {"source": "realexec.calibrate microbenchmarks", "machine": machine(),
            "platform": platform.platform(), "hostname": platform.node(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "versions": _versions(), "workers": workers, "quick": quick,
            "settings": asdict(settings), "calibration_version": VERSION,
            "code": _code_digest()}
    profile = _profile(platform.node() or "here", workers, raw, meta)
    if gpu:
        from realexec.calibrate_gpu import with_gpu

        profile = with_gpu(profile, quick=quick, progress=progress)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        profile.save(path)
    return profile


__all__ = ["BackgroundLoad", "FULL", "QUICK", "Settings", "cache_dir", "cache_path", "calibrate",
           "fit", "fit_bytes", "refit"]
