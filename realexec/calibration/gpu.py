"""GPU calibration: the "gpu:" costs and host-device links of a Profile, measured on gpu(index).

`measure_gpu(nd, settings, index)` runs microbenchmarks on the real engine (an `nd` of a live
`realexec.session`), never a scenario, and returns (costs, links, raw numbers):

- "gpu:<op|group>": seconds an op holds its compute lane, from a *backlog*: N ops of one kind and
  size issued at once, their device spans timed by CUDA events, cost = the steady period between
  consecutive starts, (start of the last - start of the first) / (N - 1). A lane is in order, so
  the period is the larger of the device's time and the host's launch (numba.cuda's launch of
  tens of microseconds, which the lane's thread pays): the lane's throughput, which is what the
  model's lane needs. The ops and the fits are the CPU's (`realexec.calibration.calibrate.kernels`,
  `realexec.calibration.fits.kernel_costs`): latency + bytes / bandwidth (with more bandwidths past
  cache sizes where that fits far better), "gpu:broadcast" for operands of different shapes, and
  latency + bytes / bandwidth + flops / peak for `dot` (square and (1, n) x (n, n) products);
- the training ops (convolutions and their gradients, batch norm, pooling, the softmaxes, the
  SGD update...): the CPU's calls (`realexec.calibration.training.cases`) made on the GPU, each
  priced by its backlog period and fitted as the CPU's (`fits.op_costs`), every convolution
  geometry of LeNet and ResNet-18 on its own ("gpu:conv2d@<geometry>"), timed at the
  chapters' batch per GPU;
- links "cpu->gpu" and "gpu->cpu": `copyto` between the devices on the copy lane, the same way,
  as latency + bytes / bandwidth of the bytes copied (pinned host buffers, as realexec copies);
  "gpu->gpu" is taken as gpu:copy measured on this one device (a peer copy is that kernel run on
  the destination's copy stream; the traffic between two devices is not measured here);
- the host's side: the frontend's seconds per issued GPU op (with the lanes idle, as t1 is
  measured), the round trip of a tiny GPU op and its `wait_to_read` (and the wake-up within it,
  wait end - device end), `asnumpy`'s readback into fresh (pageable) host memory: the link
  "gpu->host", and (`host_costs`) the profile's `gpu_issue`, `gpu_wait` and `gpu_settle`.

`with_gpu(profile)` adds all of it to a CPU calibration.

Under the CUDA simulator the same code runs (kernels run inside the launch, spans are host
times), so the tests exercise it; only a real GPU gives numbers worth keeping, and
`realexec.calibrate` adds this part only there. Units: seconds, bytes, bytes per second,
flops per second.
"""

from __future__ import annotations

import dataclasses
import gc
import json
from dataclasses import dataclass
from time import perf_counter_ns

import numpy as np

from asyncsim.model.profile import READBACK, Cost
from asyncsim.nd import ops
from realexec.calibration import training
from realexec.calibration.calibrate import kernels
from realexec.calibration.fits import FITTED, fit_bytes, kernel_costs, op_costs
from realexec.calibration.measure import FULL
from realexec.calibration.steady import busy, central
from realexec.gpu.vars import kernels as gpu_kernels

F32 = 4


@dataclass(frozen=True)
class GpuSettings:
    sizes: tuple[int, ...]  # float32 elements, for the elementwise/create/reduce fits
    dot_sides: tuple[int, ...]  # square products
    gemv_sides: tuple[int, ...]  # (1, n) x (n, n) products
    copy_sizes: tuple[int, ...]  # float32 elements per host-device copy
    backlog: int  # ops per backlog (fewer for big ones, see `_count`)
    repeats: int  # backlogs per point, after one warm-up backlog
    budget: int  # bytes of fresh outputs per backlog at most
    # the training ops (`realexec.calibration.training.cases`, as the CPU's): elements of the
    # memory-bound ones' arrays, and the convolutions' (batch, channels, side, filters, kernel,
    # stride, pad)
    op_sizes: tuple[int, ...] = ()
    conv_shapes: tuple[tuple[int, ...], ...] = ()


FULL_GPU = GpuSettings(sizes=(2**10, 2**14, 2**18, 2**20, 2**22, 2**24, 2**26),
                       dot_sides=(128, 512, 1024, 2048, 4096), gemv_sides=(1024, 4096),
                       copy_sizes=(2**10, 2**16, 2**20, 2**22, 2**24),
                       backlog=40, repeats=3, budget=2**31,
                       # up to 8.5's ResNet-18 activations at batch 256 (2**23.6 elements)
                       op_sizes=(2**12, 2**16, 2**20, 2**22, 2**24),
                       # every layer of 8.4's LeNet and 8.5's ResNet-18 (the CPU's list) at
                       # the chapters' batch per GPU: a GPU's rate grows with the batch until
                       # its cores are full, so each geometry is timed at the batch that prices it
                       conv_shapes=tuple(dict.fromkeys((256, *shape[1:])
                                                       for shape in FULL.conv_shapes)))
QUICK_GPU = GpuSettings(sizes=(2**5, 2**7), dot_sides=(8, 16), gemv_sides=(),
                        copy_sizes=(2**6, 2**10), backlog=4, repeats=1, budget=2**24,
                        # one convolution of N*Ho*Wo under a block's threads: its weight
                        # gradient takes the thread-per-element path; the simulator runs a
                        # block's shared-memory tree (and batch norm's) at seconds a launch
                        conv_shapes=((1, 1, 4, 2, 3, 1, 0),))


def _count(settings: GpuSettings, nbytes: int) -> int:
    return int(max(4, min(settings.backlog, settings.budget // max(nbytes, 1))))


class _GpuClock:
    """Device spans of the ops a backlog issues, on the host's clock: CUDA events on a real GPU,
    the engine's log under the simulator."""

    def __init__(self, nd, index: int):
        self.nd = nd
        self.engine = nd._backend.engine
        self.gpu = nd._backend.gpus[f"gpu{index}"]

    def mark(self) -> tuple[int, int]:
        self.engine.flush()
        return len(self.engine.log), len(self.gpu.timed)

    def spans(self, since: tuple[int, int], name: str) -> list[tuple[float, float]]:
        """(start_s, end_s) of the ops called `name` on this GPU's lanes since `since`."""
        gpu = self.gpu
        if gpu.sim:
            lanes = (gpu.compute_lane, gpu.copy_lane)
            self.engine.flush()
            rows = [(a, b) for lane, _, nm, _, a, b in self.engine.log[since[0]:]
                    if lane in lanes and nm == name]
        else:
            rows = [(a, b) for _, _, nm, _, a, b in gpu.timed_spans(since[1]) if nm == name]
        return sorted((a * 1e-9, b * 1e-9) for a, b in rows)


def backlog_period(clock: _GpuClock, make, count: int, repeats: int, name: str) -> float:
    """Median over `repeats` backlogs (after a warm-up one) of the steady period between the
    device starts of `count` ops `make()` issued at once; each result is dropped at once."""
    nd = clock.nd
    periods = []
    for r in range(repeats + 1):
        nd.waitall()
        since = clock.mark()
        for _ in range(count):
            y = make()
        del y
        nd.waitall()
        spans = clock.spans(since, name)
        if r and len(spans) >= 2:
            periods.append((spans[-1][0] - spans[0][0]) / (len(spans) - 1))
    return float(np.median(periods))


def _training_ops(nd, ctx, clock, s: GpuSettings) -> dict:
    """op name -> {"points": [[bytes, flops, seconds], ...]} (and "geometries" for the
    convolutions), as `realexec.calibration.training.kernel_times` gives the CPU's: the same
    calls on the GPU, each priced by its backlog period."""
    calls = training.cases(nd, s.op_sizes, s.conv_shapes, ctx=ctx)
    out: dict = {}
    for name, inputs, attrs in calls:
        nbytes, flops = training.features(name, inputs, attrs)
        seconds = backlog_period(
            clock, lambda name=name, inputs=inputs, attrs=attrs: nd.invoke(name, *inputs, **attrs),
            _count(s, nbytes), s.repeats, name)
        point = [float(nbytes), float(flops), seconds]
        entry = out.setdefault(name, {"points": []})
        entry["points"].append(point)
        geometry = ops.geometry(name, tuple(a.shape for a in inputs), attrs)
        if geometry:
            entry.setdefault("geometries", {})[geometry] = point
    return out


def _fit(sizes, times, nbytes) -> tuple[Cost, list]:
    moved = np.array([nbytes(n) for n in sizes], float)
    return fit_bytes(moved, np.array(times, float))


def _links(nd, ctx, clock, s: GpuSettings) -> tuple[dict, dict]:
    """The cpu->gpu and gpu->cpu copies on the copy lane, fitted on the bytes copied."""
    cpu = nd.cpu()
    links, raw = {}, {}
    for key, home, target in (("cpu->gpu", cpu, ctx), ("gpu->cpu", ctx, cpu)):
        times = []
        for n in s.copy_sizes:
            x = nd.random.uniform(shape=(n,), ctx=home)
            count = _count(s, F32 * n)
            times.append(backlog_period(clock, lambda x=x, to=target: x.copyto(to), count,
                                        s.repeats, "copyto"))
        cost, coef = _fit(s.copy_sizes, times, lambda n: F32 * n)
        links[key] = cost
        raw[key] = {"sizes": list(s.copy_sizes), "seconds": times, "coefficients": coef}
    return links, raw


def _host_side(nd, ctx, clock, s: GpuSettings) -> tuple[dict, Cost]:
    """A blocker's round trip and wake-up after a GPU op, the frontend's issue cost, and
    asnumpy's readback (returned as a Cost too: the "gpu->host" link)."""
    x = nd.ones((8,), ctx=ctx)
    nd.waitall()
    wakes, trips = [], []
    for _ in range(max(5, 4 * s.backlog)):
        since = clock.mark()
        start = perf_counter_ns()
        y = x + 1.0
        y.wait_to_read()
        woke = perf_counter_ns()
        trips.append((woke - start) * 1e-9)
        spans = clock.spans(since, "add_scalar")
        if spans:
            wakes.append(woke * 1e-9 - spans[-1][1])
    readback = []
    for n in s.copy_sizes:
        y = nd.random.uniform(shape=(n,), ctx=ctx)
        y.wait_to_read()
        times = []
        for _ in range(max(5, s.repeats)):
            start = perf_counter_ns()
            y.asnumpy()
            times.append((perf_counter_ns() - start) * 1e-9)
        readback.append(central(times))  # as a run meets it, not at its fastest
    cost, coef = _fit(s.copy_sizes, readback, lambda n: F32 * n)
    settles = []
    for _ in range(max(5, 4 * s.backlog)):  # the same with waitall: every stream synchronised
        start = perf_counter_ns()
        y = x + 1.0
        nd.waitall()
        settles.append((perf_counter_ns() - start) * 1e-9)
    raw = {"t3_gpu": float(np.median(wakes)), "roundtrip": float(np.median(trips)),
           "roundtrip_waitall": float(np.median(settles)),
           "issue_gpu_op": _issue(nd, ctx, s),
           "readback": {"sizes": list(s.copy_sizes), "seconds": readback,
                        "coefficients": coef, "bandwidth": cost.bandwidth}}
    return raw, cost


def _issue(nd, ctx, s: GpuSettings) -> float:
    """The frontend's seconds per GPU op with the lanes idle: the ops read the GPU copy of an
    array that a sleeping CPU op holds, so none is ready while they are issued (as the CPU's t1
    is measured with every worker held)."""
    from realexec.calibration.microbench import _Bench

    bench = _Bench(nd, nd._backend.engine.workers)
    x = nd.ones((8,))
    nd.waitall()
    count = max(20, 5 * s.backlog)
    periods = []
    for _ in range(max(9, 3 * s.repeats)):
        bench.hold((x,), max(0.02, 200e-6 * count), all_workers=False)
        held = x.copyto(ctx)
        start = perf_counter_ns()
        kept = [held + 1.0 for _ in range(count)]
        periods.append((perf_counter_ns() - start) * 1e-9 / count)
        nd.waitall()
        del kept, held
    return central(periods)  # as for the CPU's t1: not the machine at its fastest


def measure_gpu(nd, settings: GpuSettings = FULL_GPU, index: int = 0, progress=None):
    """(costs, links, raw) of gpu(index), measured through the live session `nd`."""
    ctx = nd.gpu(index)  # sets the device up in the engine (kernels compiled first)
    clock = _GpuClock(nd, index)
    costs: dict[str, Cost] = {}
    raw: dict = {"device": clock.gpu.description, "kernels": {}}
    for name, logged, make, sizes in kernels(nd, settings, ctx):  # the CPU's, on the GPU
        if progress is not None:
            progress(f"gpu {name}")
        nbytes = FITTED[name][1]
        times = [backlog_period(clock, make(n), _count(settings, nbytes(n)), settings.repeats,
                                logged) for n in sizes]
        raw["kernels"][name] = {"sizes": list(sizes), "seconds": times}
    costs.update(kernel_costs(raw["kernels"], device="gpu"))
    if settings.op_sizes or settings.conv_shapes:
        if progress is not None:
            progress("gpu training ops")
        raw["ops"] = _training_ops(nd, ctx, clock, settings)
        costs.update(op_costs(raw["ops"], device="gpu"))
    if progress is not None:
        progress("gpu copies")
    links, raw["links"] = _links(nd, ctx, clock, settings)
    copy = costs["gpu:copy"]  # fitted on bytes read + written; a link is priced on bytes copied
    links["gpu->gpu"] = dataclasses.replace(
        copy, **{f: getattr(copy, f) / 2 for f in ("bandwidth", "cache", "spill", "cache2",
                                                    "spill2")})
    raw["host"], links[READBACK] = _host_side(nd, ctx, clock, settings)
    return costs, links, raw


def host_costs(profile, host: dict) -> dict:
    """`gpu_issue`, `gpu_wait` and `gpu_settle` of a profile whose CPU part and "gpu:" costs
    are known, from the host-side measurements: the GPU op's issue beyond t1; what the round
    trip of a tiny GPU op and its wait_to_read takes beyond what the model already prices
    (issue, the lane's period, the blocker's t3 and own cost); and what the same round trip
    closed by a waitall takes beyond that."""
    gpu_issue = max(0.0, host["issue_gpu_op"] - profile.t1)
    tiny = profile.costs["gpu:elementwise"].time(2 * F32 * 8, 0.0)  # x + 1 on 8 floats
    issued = profile.t1 + gpu_issue + tiny
    gpu_wait = max(0.0, host["roundtrip"] - issued - profile.blocker("wait_to_read"))
    settled = issued + profile.blocker("waitall") + gpu_wait
    return {"gpu_issue": gpu_issue, "gpu_wait": gpu_wait,
            "gpu_settle": max(0.0, host["roundtrip_waitall"] - settled)}


def with_gpu(profile, quick: bool = False, index: int = 0, progress: bool = False):
    """`profile` (a CPU calibration) with gpu(index)'s costs and links measured and added, in a
    fresh session with the profile's workers; the raw numbers go to meta["gpu"]."""
    from tqdm.auto import tqdm

    from realexec.sessions import session

    settings = QUICK_GPU if quick else FULL_GPU
    enabled = gc.isenabled()
    gc.disable()  # as for the CPU: a collection is no part of a cost
    bar = tqdm(total=11, desc="calibrating the GPU", disable=not progress, leave=False)

    def step(what: str) -> None:
        bar.set_postfix_str(what)
        bar.update()

    busy(0.0 if quick else 1.0)  # idle cores run slower for a while (realexec.calibration.steady)
    try:
        with session(workers=profile.workers, engine="native") as nd:
            costs, links, raw = measure_gpu(nd, settings, index, progress=step)
    finally:
        bar.close()
        if enabled:
            gc.enable()
    raw["settings"] = dataclasses.asdict(settings)
    from realexec.gpu.device import SIM_GPUS

    count = SIM_GPUS if gpu_kernels().on_simulator() else len(gpu_kernels().cuda.gpus)
    measured = dataclasses.replace(profile, gpus=max(profile.gpus, count),
                                   costs={**profile.costs, **costs},
                                   links={**profile.links, **links},
                                   meta={**profile.meta, "gpu": json.loads(json.dumps(raw))})
    return dataclasses.replace(measured, **host_costs(measured, raw["host"]))


__all__ = ["FULL_GPU", "QUICK_GPU", "GpuSettings", "backlog_period", "host_costs", "measure_gpu",
           "with_gpu"]
