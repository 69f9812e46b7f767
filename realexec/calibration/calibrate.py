"""Calibration: measure this machine with microbenchmarks on the real engine -> asyncsim.Profile.

`calibrate(workers=None, quick=False, cache=True, progress=True, force=False)` runs the
microbenchmarks of `realexec.calibration.microbench`, `realexec.calibration.host`,
`realexec.calibration.frees` and `realexec.calibration.gil` on `workers` CPU workers (default:
one per core, as `realexec.run`) and turns them into the Profile that `asyncsim.simulate` prices
a program with:

- `t1` and "frontend:<op>" costs: seconds per issued op ("frontend:broadcast": a binary op on
  operands of different shapes), timed at the start and at the end, the lower of the two;
  `free`: seconds per dropped last handle of a small result whose op is done, timed on its
  own, right after the results were made, as a loop drops them (`microbench.frontend`);
  `free_pending` and `free_large` (compiled engine) the same for a small result whose op is
  still running and for a result too large to wait for a run of drops; each the lower of the
  two as well;
- `t3`: what a blocker costs once its wait is over: its wake-up after the op it waits for ends,
  or, for an op that had ended before the call, the call itself; "frontend:asnumpy|print|item":
  what those blockers add (a copy, formatting), latency + bytes / bandwidth of the array, each
  the first of its kind in a fresh session (cold code, as the chapters' once-per-region calls),
  and "frontend:<kind>:again" the same called again after a few ops (a program's later ones);
  `t3_asleep`: the same wake-up for a blocker that waited past its spin and fell asleep;
- `startup`: what a fresh engine's first op round trip takes beyond a warm one; `first_kind`,
  what the first issue of a later op kind takes beyond the next (`host.fresh`);
- `handover`: how long a thread asleep on the GIL takes to run once it is let go
  (`realexec.calibration.gil`);
- `wake`: what waking a sleeping thread costs the thread that wakes it (a queue put that wakes a
  thread asleep in its get, against one that does not);
- `dispatch`: the rest of an idle engine's round trip (a sleeping worker waking up), from two
  round trips measured at the start and at the end, averaged;
- `gil`: Python seconds per op on a worker outside its kernel, holding the GIL; `release`: what
  a worker adds when an op it finishes was the last user of a buffer the frontend dropped;
  `recheck`: what it adds per op while the frontend sleeps in a blocker waiting for it;
- "cpu:<op>" and "frontend:<op>" costs of the ops training adds (convolutions, pooling, the
  softmaxes, cross-entropy, batch norm, activations, their gradients, `sgd_update`, ...): each
  kernel fitted over sizes on the bytes and flops the model counts for it (latency + bytes /
  bandwidth + flops / peak for the convolutions, over LeNet's and ResNet's layers, and each of
  those layers' geometries priced on its own timing, "cpu:conv2d@<geometry>", crowded by the
  median of every geometry's pairs run at once: `fits.set_crowding`), each
  issue measured as the other ops' (`realexec.calibration.training`,
  `realexec.calibration.issuing`); "cpu:graph", what a hybridized graph's kernel adds per member;
  "cpu:dot" over the square products below and rectangular ones with an operand transposed, as
  a dense layer's forward and backward call them, and the products of the scenarios' MLP layers
  priced on their own timing, "cpu:dot@<m>x<k>x<n>[-ta|-tb]"; "frontend:backward" and
  "frontend:kvstore", per op that backward and a Trainer issue (their Python around each op),
  "frontend:graph", per hybridized block call; "frontend:init" per parameter a block's first
  call makes and "frontend:trace" per op its first call after hybridize() traces, each beyond
  its ops' issue prices (`realexec.calibration.firsts`); reshape, cast and assign fall to
  "cpu:copy", any op without a cost of its own to "cpu:*" (the elementwise cost);
- "cpu:<op|group>" costs: latency + bytes / bandwidth fits over sizes for create, elementwise,
  binary (and broadcasting binary: "cpu:broadcast"), copy and reduce ops and the compute-bound
  samplers (with bytes beyond a cache size at a second bandwidth, and beyond a larger one at a
  third, where that fits far better); latency + bytes / bandwidth + flops / peak for `dot`
  (square products and matrix-vector products); non-negative least squares on relative error,
  each point a low quantile of repeats, averaged over sweeps spread over seconds
  (`realexec.calibration.microbench.kernel_times`, `realexec.calibration.fits`);
- `reclaim`: what a push adds when it gives back a buffer whose op finished after the drop (the
  compiled engine does that there), from a chain of ops that each drop the result before
  against the same ops on a fixed input (`realexec.calibration.frees`);
- `take`: what an issue saves when its output takes a result that a run of drops kept, from
  bursts of issues whose outputs take kept results against bursts whose outputs come from the
  pool (`realexec.calibration.frees`), at t1's pace: a burst of 64 right after a blocker runs
  slower than t1's hot loop of the same op (3.4 us an op from the pool against 2.9 here), and
  the saving taken off t1 in seconds must be the loop's, so it is scaled by t1 over the
  pool burst's time (unscaled, the model priced 12.2.3's `y = x + 1` loop without a blocker
  at 2.06 us an op where 2.50 was measured, which the kept burst's 2.0 and the drop's 0.49 add
  up to; 2-core AMD EPYC VM);
- `after_gemm`: how much slower streaming ops run right after a product on their worker, from a
  chain of elementwise ops behind a product against the same chain behind an elementwise op,
  the median of three rounds (`realexec.calibration.aftergemm`);
- `mix`: what issuing ops of several kinds in turn adds to each one's issue cost, which is
  timed in a loop of its kind alone (`realexec.calibration.issuing.mixed_issue`);
- `llc` and `dram`: the last-level cache's size and main memory's bandwidth, from an op whose
  output cycles through more and more buffers (`realexec.calibration.caches`);
- `dram_crowd`: how much a second core streaming from main memory slows the first, from that op
  on cold outputs on one thread and on two at once (`realexec.calibration.caches.crowding`);
- `forget`: how long the caches keep a buffer no op touches, from an op timed after idle spells
  of 0-80 ms (`realexec.calibration.caches.forgetting`);
- `foreign`, `foreign_gemm`: what data another core wrote last adds per byte to a streaming op
  and to a product, from each timed after its buffers were written on its own core and on
  another (`realexec.calibration.places`; with two workers or more);
- `crowd` of those costs: how much one more kernel running at once stretches a memory-bound
  kernel's bytes time, from the same op on W workers at once against one alone, each op
  writing a buffer of its own both ways (compute-bound ops as a check); `cores`: this
  machine's cores; `spin`, `switch`: realexec's and CPython's.
The numbers behind each value (and the slowdowns that are only reported) are in `meta`;
`refit(profile)` derives a profile from them again. The settings and the run of the
microbenchmarks live in `realexec.calibration.measure` (re-exported here); this module derives the
profile, caches it and is the entry point.

On a machine with a real GPU (or with `gpu=True`), `realexec.calibration.gpu` adds gpu(0)'s
costs: the "gpu:" kernel costs, the host-device links, `gpu_issue` and `gpu_wait`.

None of this runs a scenario of `asyncsim.lab.scenarios`: they are what the profile predicts.
Results are cached as JSON under $XDG_CACHE_HOME/asyncsim (default ~/.cache/asyncsim), keyed by
machine, package versions, the measured code (realexec, the frontend), workers and settings: a
second call loads the file; `force=True` measures again. A full calibration that ran slower than
the machine's usual state (the median of its last calibrations, `realexec.calibration.usual`)
warns, and is used by the process that measured it but not cached. `quick=True` uses small
sizes and few repeats (seconds; for tests and CI). Python's garbage collector is paused while
measuring. A full calibration first keeps every core busy for a second and spreads its rounds
over seconds with busy pauses (`realexec.calibration.steady`: idle cores of a virtual machine
run slower for a while).
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
from dataclasses import asdict
from pathlib import Path

import numpy as np

from asyncsim.model.issue import DROP_BATCH
from asyncsim.model.prices import mix_factor
from asyncsim.model.profile import Cost, Profile, ProfileError
from asyncsim.nd.ops import OPS
from realexec.calibration import caches, fits, issuing, microbench, usual
from realexec.calibration.fits import (
    blocker_costs,
    fit,
    fit_bytes,
    kernel_costs,
    op_costs,
    set_crowding,
)
from realexec.calibration.measure import (
    FULL,
    QUICK,
    Settings,
    _measure,
    kernels,  # noqa: F401 -- realexec.calibration.gpu imports it from here
)
from realexec.calibration.steady import BackgroundLoad
from realexec.engine.core import Engine
from realexec.engine.lanes import default_workers
from realexec.engine.native import CAPACITY, IDLE_SPIN_S
from realexec.frontend import machine

VERSION = 24  # bump when what is measured changes: older cache files are then ignored


def _issue_price(costs: dict, t1: float, name: str) -> float:
    """The frontend seconds the model prices an issue of op `name` at (as Profile.issue_rule
    picks its cost: by name, then by group, else t1)."""
    for key in (f"frontend:{name}", f"frontend:{OPS[name].group}"):
        if key in costs:
            return costs[key].latency
    return t1


def _block_prices(phases: dict, costs: dict, mix: float) -> dict:
    """A Gluon block call's own Python beyond the ops it issues (program.Call "block"), by the
    block's class and for any other ("frontend:block:Dense", ..., "frontend:block"): each layer
    call timed (a Dense, an Activation, a HybridSequential of both: `issuing.LAYER_OPS`) less
    what the model charges for the ops it issues (their issue prices, times the `mix` of their
    kinds in turn) and for the blocks priced before it; a class it calls for the first time
    gets the rest. Any other class: the calls' whole rest per block call. Everything between a
    call's ops is its block's: parameter look-up, shape inference and the `nd` function it calls
    (FullyConnected's checks), which no op's price holds. The calibrations before priced every
    block at the mean of a Dense against `nd.FullyConnected` timed whole, an Activation against
    `nd.relu` and a sequence against its layers: 5.2-5.5 us, where by this rule a Dense's own
    Python is 18-23 us and an Activation's 3-5 (six calibrations, 2-core AMD EPYC VM)."""
    prices: dict = {}
    rest = calls = 0.0
    for call, (ops, blocks) in issuing.LAYER_OPS.items():
        charged = sum(costs[f"frontend:{op}"].latency for op in ops)
        left = phases[call] - charged * mix_factor(mix, len(set(ops)))
        rest, calls = rest + left, calls + len(blocks)
        new = [block for block in blocks if block not in prices]
        left -= sum(prices[block] for block in blocks if block in prices)
        for block in new:
            prices[block] = max(0.0, left / len(new))
    return {**{f"frontend:block:{block}": Cost(latency=secs) for block, secs in prices.items()},
            "frontend:block": Cost(latency=max(0.0, rest / calls))}


def _profile(name: str, workers: int, raw: dict, meta: dict) -> Profile:
    """The Profile from everything measured (`raw`, as `_measure` returns it)."""
    costs = kernel_costs(raw["kernels"])
    # the frontend timed early and late in the calibration, the lower of the two: a slow minute
    # of this kind of machine gave t1 10.6 us where the calibrations minutes before gave 6.2
    # and 7.6, and the scenarios' own loop of tiny ops took 6.0 us an op through all three
    late = raw.get("issue_late", raw["issue"])
    issue = {name: min(secs, late.get(name, secs)) for name, secs in raw["issue"].items()}
    free = min(raw["free"], raw.get("free_late", raw["free"]))
    # the drops realexec's compiled engine handles apart from a run of small done ones (0: not
    # measured, a profile from before)
    early = {kind: raw.get("frees", {}).get(kind, 0.0) for kind in ("free pending", "free large")}
    late = {kind: raw.get("frees_late", {}).get(kind, secs) for kind, secs in early.items()}
    free_pending, free_large = (min(early[kind], late[kind]) for kind in early)
    t1 = issue["add_scalar"]
    frontend = {"frontend:elementwise": t1, "frontend:create": issue["ones"],
                "frontend:reduce": issue["sum"], "frontend:dot": issue["dot"],
                "frontend:copy": issue["copy"], "frontend:add": issue["add"],
                "frontend:sub": issue["add"], "frontend:mul": issue["add"],
                "frontend:div": issue["add"], "frontend:broadcast": issue["broadcast"],
                "frontend:relu": issue["relu"], "frontend:normal": issue["normal"],
                "frontend:uniform": issue["normal"], "frontend:slice": issue["slice"]}
    costs.update({key: Cost(latency=secs) for key, secs in frontend.items()})
    # the training ops: each priced by name (reshape, cast and assign by "cpu:copy")
    square = raw["kernels"].get("dot")
    costs.update(op_costs(raw.get("ops", {}),
                          extra={"dot": fits.dot_geometries(square)} if square else None))
    costs.update({f"frontend:{name}": Cost(latency=secs)
                  for name, secs in raw.get("op_issue", {}).items()})
    mix = issuing.fit_mix(raw["mixed"]["ratios"]) if "mixed" in raw else 0.0
    phases = raw.get("phases")
    if phases:  # per op that backward and a Trainer issue; per hybridized call (two blocks:
        # its cost grows with the block's parameters, which a Cost cannot see)
        costs["frontend:backward"] = Cost(latency=phases["backward"])
        costs["frontend:kvstore"] = Cost(latency=phases["kvstore"])
        costs["frontend:graph"] = Cost(latency=0.5 * (phases["graph"] + phases["graph_mlp"]))
        costs.update(_block_prices(phases, costs, mix))
    firsts = raw.get("firsts")
    if firsts:  # a block's first call and first trace, beyond what their ops' issue costs
        for phase, key, per in (("init", "frontend:init", "params"),
                                ("trace", "frontend:trace", "traced")):
            case = firsts[phase]
            issued = sum(count * _issue_price(costs, t1, name)
                         for name, count in case["ops"].items())
            costs[key] = Cost(latency=max(0.0, (case["extra"] - issued) / case[per]))
    steps = raw.get("graph_step")
    if steps:  # a hybridized graph's own work per member op, beyond its members' kernels
        per_member = [max(0.0, case["per_member"]) for case in steps.values()]
        costs["cpu:graph"] = Cost(latency=sum(per_member) / len(per_member))
    fresh = raw["fresh"]
    # a program's first asnumpy, print or item is priced cold, a later one of its kind
    # ("frontend:<kind>:again") as it costs after a few ops (see host.fresh)
    # (a print by the values it formats: a first one formats them at a later one's pace, so it
    # keeps that pace and fits only its latency, its few points being all of one or two sizes)
    ready = raw["blockers"]["wait_to_read"]
    later = blocker_costs({**fresh["again"], "wait_to_read": ready}) if "again" in fresh else {}
    pace = {"print": later["frontend:print"].bandwidth} if later else {}
    costs.update(blocker_costs({**fresh["blockers"], "wait_to_read": ready}, pace))
    costs.update({f"{key}:again": cost for key, cost in later.items()})
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
    dispatch = max(0.0, trip["period"] - t1 - wake - free - exec_s - t3)
    set_crowding(costs, raw["concurrency"], workers)
    native = meta.get("engine", "native").startswith("native")
    cache = caches.fit(raw["caches"]) if "caches" in raw else {"llc": 0.0, "dram": 0.0}
    return Profile(name=name, t1=t1, t3=t3, workers=workers, cores=default_workers(), gpus=0,
                   costs=costs, free=free, free_pending=free_pending if native else 0.0,
                   free_large=free_large if native else 0.0, dispatch=dispatch, wake=wake,
                   gil=gil,
                   release=release,
                   switch=sys.getswitchinterval(), spin=_engine_spin(),
                   recheck=raw["blocked"]["recheck"], startup=fresh["startup"],
                   first_kind=fresh.get("first_kind", 0.0),
                   handover=raw.get("handover", {}).get("handover", 0.0),
                   native=int(native), idle_spin=IDLE_SPIN_S if native else 0.0,
                   table=CAPACITY if native else 0, llc=cache["llc"], dram=cache["dram"],
                   dram_crowd=(caches.fit_crowding(raw["dram_crowding"], cache["dram"])
                               if cache["dram"] and "dram_crowding" in raw else 0.0),
                   mix=mix,
                   reclaim=raw["reclaim"]["reclaim"] if native and "reclaim" in raw else 0.0,
                   drop_batch=DROP_BATCH if native else 0,
                   take=_take(raw, t1) if native and "take" in raw else 0.0,
                   after_gemm=raw.get("after_gemm", {}).get("after_gemm", 0.0),
                   t3_asleep=raw.get("t3_after_sleep", 0.0),
                   forget=caches.fit_forget(raw["forget"]) if "forget" in raw else 0.0,
                   **_light_prices(raw, meta),
                   foreign=raw.get("places", {}).get("foreign", 0.0),
                   foreign_gemm=raw.get("places", {}).get("foreign_gemm", 0.0),
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
    """A digest of the code whose speed is measured (the engine, its kernels, the frontend and
    the ops it infers, the microbenchmarks themselves), so that a changed engine is measured
    again rather than predicted from an old profile."""
    import asyncsim
    import realexec

    digest = hashlib.sha1()
    for package, names in ((realexec, ("*.py", "engine/*.py", "cpu/*.py", "gpu/*.py",
                                       "calibration/*.py")),
                           (asyncsim, ("nd/*.py", "nd/ops/*.py", "gluon/*.py"))):
        root = Path(package.__file__).parent
        for name in names:
            for path in sorted(root.glob(name)):
                digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def cache_path(workers: int, quick: bool, gpu: bool = False,
               engine: str = "native-light") -> Path:
    """Where the profile for this machine, these versions, this code, these settings and this
    engine is cached."""
    settings = QUICK if quick else FULL
    key = json.dumps([VERSION, platform.node(), machine(), _versions(), _code_digest(), workers,
                      asdict(settings), _gpu_name() if gpu else None]
                     + ([engine] if engine != "native" else []), sort_keys=True)
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    return cache_dir() / f"profile-{_host()}-w{workers}{'-quick' if quick else ''}-{digest}.json"


def _host() -> str:
    """This machine's name as a file name's part."""
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in platform.node()) or "here"


def _real_gpu() -> bool:
    from realexec.gpu import kernels as gpu

    return gpu.available() and not gpu.on_simulator()


def _gpu_name() -> str:
    from realexec.gpu import kernels as gpu
    from realexec.gpu.device import _device_name

    return "CUDA simulator" if gpu.on_simulator() else _device_name(0)


def _light_prices(raw: dict, meta: dict) -> dict:
    """A light engine's prices (`realexec.calibration.light`); none on the shipped engine."""
    if meta.get("engine") != "native-light" or "light" not in raw:
        return {}
    return {key: raw["light"][key] for key in ("light", "light_flush")}


def _take(raw: dict, t1: float) -> float:
    """`take` at t1's pace (see the module docstring)."""
    take = raw["take"]
    return take["take"] * min(1.0, t1 / take["pool"]) if take["pool"] > 0 else take["take"]


_UNCACHED: dict = {}  # cache path -> a profile measured in a slow phase: this process's only


def calibrate(workers: int | None = None, quick: bool = False, cache: bool = True,
              progress: bool = True, force: bool = False, gpu: bool | None = None,
              engine: str = "native-light") -> Profile:
    """This machine's Profile for `workers` CPU workers on `engine` ("native-light", the
    default engine, with the light results' prices, or "native"), measured (or loaded from
    the cache);
    with `gpu` (default: when a real GPU is here, not the simulator) gpu(0)'s costs and links
    too (`realexec.calibration.gpu`), for every GPU of the machine."""
    if engine not in ("native", "native-light"):
        raise ValueError(f"calibrate: engine must be 'native' or 'native-light', got {engine!r}")
    gpu = _real_gpu() if gpu is None else bool(gpu)
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    path = cache_path(workers, quick, gpu, engine)
    if cache and not force and path in _UNCACHED:
        return _UNCACHED[path]
    if cache and not force and path.exists():
        with contextlib.suppress(ProfileError, OSError, ValueError, KeyError):
            return Profile.load(path)
    settings = QUICK if quick else FULL
    enabled = gc.isenabled()
    gc.disable()  # a collection pauses every thread for up to ~100 ms: no part of a cost
    load = BackgroundLoad()
    try:
        raw = _measure(workers, settings, progress, engine)
        behind = raw.get("gate", {}).get("behind", 0)
        if behind:  # steps taken before the machine showed its usual speed: all taken again,
            # waiting for it (`realexec.calibration.steady.Gate.behind`)
            gates = raw["gate"]
            raw = _measure(workers, settings, progress, engine, gates["fastest"],
                           gates["products"]["fastest"], gates["issues"]["fastest"])
            raw["gate"]["retaken"] = behind
    finally:
        if enabled:
            gc.enable()
    raw["background load"] = busy = load.cores()
    raw["stolen"] = load.stolen()  # a VM's cores lost to other machines: recorded, not warned
    if busy > 0.1:
        warnings.warn(f"calibrate: other processes kept {busy:.2f} cores busy while measuring; "
                      f"the profile may be off (calibrate(force=True) on a quiet machine)",
                      stacklevel=2)
    kept = cache_dir() / f"usual-{_host()}.json"  # this machine's usual state
    raw["usual"] = judged = usual.judge(raw, usual.load(kept))
    slow = usual.slow(judged)
    if cache:
        usual.record(kept, raw)
    if slow:  # a slow phase held through the whole calibration, which its gates could not see
        warnings.warn("calibrate: measured while the machine ran slower than usual ("
                      + ", ".join(f"{p} probe {judged[p]:.2f}x" for p in slow)
                      + f" of the median of its last {judged['calibrations']} calibrations)"
                      + ("; the profile is used but not cached" if cache else ""), stacklevel=2)
    here_only = bool(slow) and cache  # used by this process, not by later ones
    cache = cache and not slow
    meta = {"source": "realexec.calibrate microbenchmarks", "machine": machine(),
            "platform": platform.platform(), "hostname": platform.node(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "versions": _versions(), "workers": workers, "quick": quick,
            "settings": asdict(settings), "calibration_version": VERSION,
            "code": _code_digest(), "engine": engine}
    profile = _profile(platform.node() or "here", workers, raw, meta)
    if gpu:
        from realexec.calibration.gpu import with_gpu

        profile = with_gpu(profile, quick=quick, progress=progress)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        profile.save(path)
    elif here_only:
        _UNCACHED[path] = profile
    return profile


__all__ = ["BackgroundLoad", "FULL", "QUICK", "Settings", "cache_dir", "cache_path", "calibrate",
           "fit", "fit_bytes", "refit"]
