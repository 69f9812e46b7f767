"""Calibration: measure this machine with microbenchmarks on the real engine -> asyncsim.Profile.

`calibrate(workers=None, quick=False, cache=True, progress=True, force=False)` runs the
microbenchmarks of `realexec.microbench` on `workers` CPU workers (default: one per core, as
`realexec.run`) and turns them into the Profile that `asyncsim.simulate` prices a program with:

- `t1` and "frontend:<op>" costs: seconds per issued op; `free`: seconds per dropped handle;
- `t3`: the blocker's wake-up after the op it waits for ends; "frontend:asnumpy|print|item":
  what those blockers add (a copy, formatting), latency + bytes / bandwidth of the array;
- `dispatch`: the rest of an idle engine's round trip (a sleeping worker waking up);
- `gil`: Python seconds per op on a worker outside its kernel, holding the GIL; `release`: what
  a worker adds when an op it finishes was the last user of a buffer the frontend dropped;
- "cpu:<op|group>" costs: latency + bytes / bandwidth fits over sizes for create, elementwise,
  binary, copy and reduce ops and the compute-bound samplers (with bytes beyond a cache size at a
  second bandwidth where that fits far better); latency + bytes / bandwidth + flops / peak for
  `dot` (square products and matrix-vector products); non-negative least squares on relative
  error, each point the median of repeats;
- `crowd` of those costs: how much one more kernel running at once stretches a memory-bound
  kernel's bytes time, from the same op on W workers at once against one alone (compute-bound
  ops as a check); `cores`: this machine's cores; `spin`, `switch`: realexec's and CPython's.
The numbers behind each value (and the slowdowns that are only reported) are in `meta`.

None of this runs a scenario of `asyncsim.scenarios`: they are what the profile predicts.
Results are cached as JSON under $XDG_CACHE_HOME/asyncsim (default ~/.cache/asyncsim), keyed by
machine, package versions, the measured code (realexec, the frontend), workers and settings: a
second call loads the file; `force=True` measures again. `quick=True` uses small sizes and few
repeats (seconds; for tests and CI). Python's garbage collector is paused while measuring.
Units: seconds, bytes, bytes per second, flops per second.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from realexec import microbench
from realexec.engine import Engine, default_workers
from realexec.fits import blocker_costs, cost_of, fit, fit_bytes, set_crowding
from realexec.frontend import machine, session
from realexec.microbench import BackgroundLoad  # noqa: F401 -- re-exported

VERSION = 1  # bump when what is measured changes: older cache files are then ignored


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...]  # elements (float32) for the bandwidth fits
    dot_sides: tuple[int, ...]  # square products
    gemv_sides: tuple[int, ...]  # (1, n) x (n, n) products
    repeats: int  # ops per size in the fits
    issue_ops: int  # ops per issue loop
    loops: int  # repeats of each issue loop, round trip, backlog
    roundtrips: int
    blocker_sizes: tuple[int, ...]
    crowd_sizes: tuple[int, ...]  # elements of the memory-bound ops run on W workers at once
    compute_size: int  # elements of the compute-bound op run on W workers at once


# 2**23: the scenarios' largest arrays (2000 x 2000, ~2**22) spill out of the cache; with 2**22
# the largest size, the bytes fit had one point past the cache and missed it by a third
FULL = Settings(sizes=(2**10, 2**13, 2**16, 2**18, 2**20, 2**21, 2**22, 2**23),
                dot_sides=(32, 64, 128, 256, 512, 1024), gemv_sides=(128, 512, 2048),
                repeats=7, issue_ops=300, loops=15, roundtrips=200,
                blocker_sizes=(2**4, 2**12, 2**18, 2**21), crowd_sizes=(2**20, 2**22),
                compute_size=2**20)
QUICK = Settings(sizes=(2**8, 2**12, 2**16, 2**18), dot_sides=(16, 64, 256), gemv_sides=(64, 256),
                 repeats=3, issue_ops=100, loops=5, roundtrips=50, blocker_sizes=(2**4, 2**14),
                 crowd_sizes=(2**18,), compute_size=2**14)

F32 = 4


def _kernels(nd, settings: Settings) -> list[tuple]:
    """(op name, profile keys it prices, maker(size) -> (() -> NDArray), bytes(size),
    flops(size), sizes) for every fitted op."""
    def vec(n):
        return nd.random.uniform(shape=(n,))

    def unary(f):
        def make(n):
            x = vec(n)
            return lambda: f(x)
        return make

    def binary(n):
        x, y = vec(n), vec(n)
        return lambda: x + y

    def create(f):
        return lambda n: (lambda: f(n))

    def product(n):
        a = nd.random.uniform(0, 2.0 / abs(n), shape=(1 if n < 0 else n, abs(n)))
        b = nd.random.uniform(0, 2.0 / abs(n), shape=(abs(n), abs(n)))
        return lambda: nd.dot(a, b)

    def dot_bytes(n):  # a negative side is a (1, |n|) x (|n|, |n|) product
        m = abs(n)
        return F32 * ((1 if n < 0 else m) * m * 2 + m * m)

    def dot_flops(n):
        m = abs(n)
        return 2.0 * (1 if n < 0 else m) * m * m

    sizes = settings.sizes
    binary_ops = ("cpu:add", "cpu:sub", "cpu:mul", "cpu:div")
    return [
        ("ones", ("cpu:create",), create(lambda n: nd.ones((n,))), lambda n: F32 * n, None,
         sizes),
        ("normal", ("cpu:normal",), create(lambda n: nd.random.normal(shape=(n,))),
         lambda n: F32 * n, None, sizes),
        ("uniform", ("cpu:uniform",), create(lambda n: nd.random.uniform(shape=(n,))),
         lambda n: F32 * n, None, sizes),
        ("add_scalar", ("cpu:*", "cpu:elementwise"), unary(lambda x: x + 1.0),
         lambda n: 2 * F32 * n, None, sizes),
        ("add", binary_ops, binary, lambda n: 3 * F32 * n, None, sizes),
        ("copy", ("cpu:copy",), unary(lambda x: x.copy()), lambda n: 2 * F32 * n, None, sizes),
        ("sum", ("cpu:reduce",), unary(lambda x: x.sum()), lambda n: F32 * (n + 1), None,
         sizes),
        ("dot", ("cpu:dot",), product, dot_bytes, dot_flops,
         settings.dot_sides + tuple(-n for n in settings.gemv_sides)),
    ]


def _measure(workers: int, settings: Settings, progress: bool) -> tuple[dict, dict]:
    """Run every microbenchmark: the fitted CPU costs, and everything measured (raw numbers)."""
    from tqdm.auto import tqdm

    raw: dict = {}
    costs: dict[str, Cost] = {}
    s = settings
    with session(workers=workers) as nd:
        bench = microbench._Bench(nd, workers)
        kernels = _kernels(nd, s)
        bar = tqdm(total=5 + len(kernels), desc="calibrating", disable=not progress,
                   leave=False)
        bar.set_postfix_str("frontend")
        front = microbench.frontend(bench, s.issue_ops, s.loops)
        raw["issue"], raw["free"] = front["issue"], front["free"]
        bar.update()
        bar.set_postfix_str("round trip")
        trip = microbench.roundtrip(bench, s.roundtrips, s.loops)
        raw["roundtrip"] = trip
        raw["t3_after_sleep"] = microbench.long_wake(bench, s.loops)
        bar.update()
        bar.set_postfix_str("blockers")
        raw["blockers"] = microbench.blockers(bench, s.blocker_sizes, s.repeats)
        bar.update()
        bar.set_postfix_str("worker overhead")
        raw["worker"] = microbench.worker_overhead(bench, s.issue_ops, max(3, s.loops // 3))
        bar.update()
        fits = raw["kernels"] = {}
        for name, keys, make, nbytes, flops, sizes in kernels:
            bar.set_postfix_str(name)
            times = np.array(microbench.kernel_times(bench, make, sizes, s.repeats, name))
            moved = np.array([nbytes(n) for n in sizes], float)
            if flops is None:
                cost, coef = fit_bytes(moved, times)
            else:
                columns = [np.ones(len(sizes)), moved, np.array([flops(n) for n in sizes], float)]
                coef = fit(np.stack(columns, axis=1), times).tolist()
                cost = cost_of(coef)
            for key in keys:
                costs[key] = dataclasses.replace(cost)
            fits[name] = {"sizes": list(sizes), "seconds": times.tolist(), "coefficients": coef}
            bar.update()
        bar.set_postfix_str("concurrency")
        raw["concurrency"] = _concurrency(bench, s) if workers > 1 else {}
        bar.update()
    bar.close()
    return costs, raw


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
        alone, together = microbench.concurrency(bench, make, 4, name)
        out[label] = {"alone": alone, "together": together}
    alone_period, busy_period = microbench.busy_frontend(bench, s.issue_ops // 2, s.loops,
                                                         40 * s.issue_ops)
    out["frontend"] = {"alone": alone_period, "busy": busy_period}
    return out


def _profile(name: str, workers: int, costs: dict[str, Cost], raw: dict, meta: dict) -> Profile:
    issue = raw["issue"]
    t1 = issue["add_scalar"]
    frontend = {"frontend:elementwise": t1, "frontend:create": issue["ones"],
                "frontend:reduce": issue["sum"], "frontend:dot": issue["dot"],
                "frontend:copy": issue["copy"], "frontend:add": issue["add"],
                "frontend:sub": issue["add"], "frontend:mul": issue["add"],
                "frontend:div": issue["add"], "frontend:relu": issue["relu"],
                "frontend:normal": issue["normal"], "frontend:uniform": issue["normal"],
                "frontend:slice": issue["slice"]}
    costs = dict(costs)
    costs.update({key: Cost(latency=secs) for key, secs in frontend.items()})
    costs.update(blocker_costs(raw["blockers"]))
    trip, gil = raw["roundtrip"], raw["worker"]["independent"]
    release = max(0.0, raw["worker"]["chain_dropped"] - raw["worker"]["chain"])
    t3 = trip["t3"]
    # the idle round trip's remainder: the worker waking up, the call into the blocker
    dispatch = max(0.0, trip["period"] - t1 - raw["free"] - gil - trip["exec"] - t3)
    set_crowding(costs, raw["concurrency"], workers)
    return Profile(name=name, t1=t1, t3=t3, workers=workers, cores=default_workers(), gpus=0,
                   costs=costs, free=raw["free"], dispatch=dispatch, gil=gil, release=release,
                   switch=sys.getswitchinterval(), spin=_engine_spin(),
                   meta=json.loads(json.dumps({**meta, "measurements": raw})))  # as saved


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
    for package, names in ((realexec, ("*.py", "kernels/cpu.py")),
                           (asyncsim, ("frontend.py", "ops.py"))):
        root = Path(package.__file__).parent
        for name in names:
            for path in sorted(root.glob(name)):
                digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def cache_path(workers: int, quick: bool) -> Path:
    """Where the profile for this machine, these versions, this code and these settings is
    cached."""
    settings = QUICK if quick else FULL
    key = json.dumps([VERSION, platform.node(), machine(), _versions(), _code_digest(), workers,
                      asdict(settings)], sort_keys=True)
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    host = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in platform.node()) or "here"
    return cache_dir() / f"profile-{host}-w{workers}{'-quick' if quick else ''}-{digest}.json"


def calibrate(workers: int | None = None, quick: bool = False, cache: bool = True,
              progress: bool = True, force: bool = False) -> Profile:
    """This machine's Profile for `workers` CPU workers, measured (or loaded from the cache)."""
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    path = cache_path(workers, quick)
    if cache and not force and path.exists():
        with contextlib.suppress(ProfileError, OSError, ValueError, KeyError):
            return Profile.load(path)
    settings = QUICK if quick else FULL
    enabled = gc.isenabled()
    gc.disable()  # a collection pauses every thread for up to ~100 ms: no part of a cost
    load = microbench.BackgroundLoad()
    try:
        costs, raw = _measure(workers, settings, progress)
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
    profile = _profile(platform.node() or "here", workers, costs, raw, meta)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        profile.save(path)
    return profile


__all__ = ["BackgroundLoad", "FULL", "QUICK", "Settings", "cache_dir", "cache_path", "calibrate",
           "fit", "fit_bytes"]
