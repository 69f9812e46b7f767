"""The `nd` backend over the real engine: `EngineBackend`, and the engines it can run on.

`EngineBackend` is the backend that `asyncsim.nd.frontend.ND` calls (the recording backend's
twin, so every workload runs unchanged): `issue` reserves the output buffer from the device's
`Pool` and pushes the op's kernel (`realexec.cpu.kernels.KERNELS[name](inputs, out, attrs)`) to
the engine, reading the input vars and writing the output var (on the compiled engine,
`issue_same` does the same for the frontend's fast path without its records; both in
`realexec.issuing`, mixed in, and the common case, `y = x + 1`, written out in
`realexec.unary`); `free` pushes the buffer's release behind every op that still touches it
(`Engine.delete_var`; on the compiled engine small results go in runs, and the done ones of a run
are kept for the next outputs of their shape and dtype: `realexec.cpu.drops`; on an engine with
light results, the default, small results of the fast push live in compiled state alone:
`realexec.cpu.light`);
`sync` is a blocker; `mark` times an `nd.benchmark` region.
Ops that touch a GPU go to its lanes (`realexec.gpu.backend`, mixed in). `realexec.session`
opens one over a fresh engine of `ENGINES`; `machine` names this machine for a trace's meta.

Recorded in the Trace (seconds from the engine's start, `time.perf_counter_ns`):
- "issue" spans on "frontend": from entering `issue` (the shared frontend has already checked
  shapes) to the end of the push; "exec" spans on "cpu/w{i}" from the engine (an op of cpu(k)
  on "cpu{k}/w{i}": every CPU device's ops run on the one set of CPU workers, which are the
  same cores, so that two CPU devices do not put twice as many threads on them); per GPU, "exec"
  spans on "gpu{i}/compute" and "copy" spans on "gpu{i}/copy" (`realexec.gpu.device`);
- "wait" spans on "frontend": from entering a blocker until the frontend runs again (t3 included);
- memory: the pool's live bytes per device ("cpu", "gpu0", ..) at every change, and the process
  RSS as device "cpu:rss" at marks and blockers (at most once per 10 ms at blockers). A read
  costs ~2 us warm but ~60 us after a `gc.collect()` here (cold caches): it is taken before a
  region's start is stamped and after its end, and rarely at blockers, so that the measurement
  is not inside what it measures;
- marks: the `nd.benchmark` regions; meta: source="measured", workload, workers, mode, machine,
  and "gpus": what each GPU used was (a device name, or the CUDA simulator).
`trace` bounds what is kept, as for `realexec.session` (live and peak bytes are always counted).

Devices: "cpu", "cpuN" and "gpuN". A GPU is set up when first named; one that cannot be used
fails at the call, saying how to run under the simulator (NUMBA_ENABLE_CUDASIM=1). An array that
cannot be allocated is a MemoryError at the call, naming the op and the shape; nothing stays
counted.
"""

from __future__ import annotations

import contextlib
import functools
import platform
from time import perf_counter_ns

import numpy as np

from asyncsim.nd.trace import Span, Trace, device_lanes
from realexec.cpu import kernels as cpu
from realexec.cpu.drops import DroppedResults
from realexec.cpu.light import NOT_LIGHT, LightResults, LightVar
from realexec.engine.core import Engine
from realexec.engine.lanes import FRONTEND, default_workers
from realexec.engine.memory import Pool, RssProbe
from realexec.engine.native import NativeEngine
from realexec.engine.shutdown import trace_log
from realexec.gpu.backend import GpuBackend
from realexec.gpu.device import check_gpu
from realexec.gpu.vars import StreamVar, host_wait
from realexec.issuing import Issuing
from realexec.unary import light_push, unary_push

_RSS_EVERY_NS = 10_000_000
ENGINES = {"native": NativeEngine, "native-pinned": functools.partial(NativeEngine, pin=True),
           "native-light": functools.partial(NativeEngine, light=True),
           "python": Engine}


class EngineBackend(Issuing, GpuBackend, DroppedResults, LightResults):
    """What `ND` calls: turns op records into engine pushes and blockers into engine waits."""

    def __init__(self, engine: Engine, device: str = "cpu", trace: bool | int = True):
        self.engine = engine
        self.device = device
        # GPUs add theirs ("gpu0": a GpuPool) when first named
        self._trace = trace
        self.pools = {"cpu": Pool("cpu", samples=trace)}
        self.kernels = cpu.KERNELS  # (the setter: `realexec.issuing`)
        self.vars: dict = {}  # frontend var id -> engine Var (its name is its device)
        self._native = isinstance(engine, NativeEngine)  # elementwise ops run compiled
        self._init_drops(self.pools["cpu"], runs=self._native)
        self._init_light(engine, trace)  # (a light engine's var table adopts light results)
        # `y = x + 1`'s push (`issue_same`; with light results `issue_scalar` too, and the
        # shipped push behind them, `_heavy`)
        self._same = self._scalar = self._heavy = None
        if self._world is not None:
            self._heavy = unary_push(self)
            self._same, self._scalar = light_push(self, self._heavy)
        elif self._native:
            self._same = unary_push(self)
        self._on_device: dict[int, str] = {}  # op id -> cpu(i), i > 0, that it ran for
        self._init_gpu()
        self.marks = trace_log(trace)  # (label, start_ns, end_ns)
        self._open_marks: list[tuple[str, int]] = []
        self._rss = RssProbe()
        self._rss_samples = trace_log(trace)  # (t_ns, "cpu:rss", bytes)
        self._last_rss_ns = 0
        self._sample_rss(perf_counter_ns(), force=True)

    # -- the backend protocol ------------------------------------------------------------------
    def check_device(self, device: str) -> None:
        if device not in self.pools:
            check_device(device)
            if device.startswith("cpu"):  # cpu(i): host memory of its own, the CPU's workers
                self.pools[device] = Pool(device, samples=self._trace)
            else:
                self._add_gpu(device)
                if self._world is not None:  # (a light result never waits for a GPU)
                    self._world.off()

    def sync(self, kind: str, var: int | None):
        start = perf_counter_ns()
        self._hand_over_drops()
        try:
            if var is None:
                self.engine.wait_all()
                if self.gpus:
                    self._settle()
                return None
            if self._world is not None and var not in self.vars:  # (`in`: no adoption)
                got = self._sync_light(kind, var)
                if got is not NOT_LIGHT:
                    return str(got) if kind == "print" else got
            ev = self.vars[var]
            self.engine.wait_for_var(ev)
            if type(ev) is StreamVar and ev.name != "cpu":
                data = self._read_gpu(kind, ev)  # a host copy (None for wait_to_read)
            else:
                if type(ev) is StreamVar:
                    host_wait(ev)
                if kind == "wait_to_read":
                    return None
                data = ev.data.copy() if kind == "asnumpy" else ev.data
            # a print is formatted inside the wait span, as the model draws it
            return str(data) if kind == "print" else data
        finally:
            if self._world is not None and self._world.late():  # what the wait let finish
                self._flush_light()
            end = perf_counter_ns()
            self.engine.log.append((FRONTEND, "wait", kind, -1, start, end))
            self._sample_rss(end)
            if self.gpus:
                self.releases.collect()

    def _delete(self, ev) -> None:
        """Give a dropped var's memory back once its ops are done (`free`, from
        `realexec.cpu.drops`, keeps small cpu(0) results in runs first)."""
        if type(ev) is StreamVar:
            self._free_stream_var(ev)
        elif type(ev) is LightVar:  # an adopted light result's buffer goes back to the arena
            self.engine.delete_var(ev, self._release_light, (ev.off, ev.data.nbytes))
        elif ev.name == "cpu":
            self.engine.delete_var(ev, self._release_cpu, (ev.data,))
        else:  # cpu(i)'s buffer goes back to its own pool
            self.engine.delete_var(ev, self.pools[ev.name].release, (ev.data,))

    def _hand_over_drops(self, read: bool = False) -> None:
        """Every drop so far to the engine: the held ones (`realexec.cpu.light`, which gives a
        Python var's to `free`), then the runs (`realexec.cpu.drops`); with `read`, the light
        results' memory log read out."""
        if self._world is not None:
            self._flush_light(read=read)
        if self._drops or self._kept:
            self._give_back_drops()

    def drain(self) -> None:
        """Wait, without a span, until every op pushed so far has run (on every device)."""
        self._hand_over_drops()
        self.engine.wait_all()
        if self._world is not None:
            self._flush_light()
        if self.gpus:
            self._settle()

    def mark(self, label: str, begin: bool) -> None:
        self._hand_over_drops()  # the region's memory as its own drops left it
        if begin:
            self._sample_rss(perf_counter_ns(), force=True)  # before the region's clock starts
            self._open_marks.append((label, perf_counter_ns()))
            return
        now = perf_counter_ns()
        for i in range(len(self._open_marks) - 1, -1, -1):
            if self._open_marks[i][0] == label:
                self.marks.append((label, self._open_marks.pop(i)[1], now))
                break
        self._sample_rss(now, force=True)  # after the region's end is stamped

    # -- trace ---------------------------------------------------------------------------------
    def _sample_rss(self, now: int, force: bool = False) -> None:
        if force or now - self._last_rss_ns >= _RSS_EVERY_NS:
            rss = self._rss.read()
            if rss is not None:
                self._rss_samples.append((now, "cpu:rss", rss))
            self._last_rss_ns = perf_counter_ns()  # the interval counts from the read's end

    def trace(self, meta: dict | None = None) -> Trace:
        """Everything recorded so far as a Trace (times in seconds from the engine's start)."""
        self._hand_over_drops(read=True)
        t0 = self.engine.origin_ns

        def secs(ns: int) -> float:
            return max(0.0, (ns - t0) * 1e-9)

        samples = [s for pool in self.pools.values() for s in list(pool.samples)]
        samples = self._with_light(samples) + list(self._rss_samples)
        samples.sort(key=lambda s: s[0])
        spans = self.engine.spans()
        spans = device_lanes(spans, self._on_device)
        timed = self._gpu_spans()
        if timed:
            spans += [Span(lane, name, op_id, secs(a), secs(b), kind)
                      for lane, kind, name, op_id, a, b in timed]
            spans.sort(key=lambda s: s.start)
        return Trace(spans=spans,
                     memory=[(secs(t), dev, int(b)) for t, dev, b in samples],
                     marks=[(label, secs(a), secs(b)) for label, a, b in self.marks],
                     meta={"source": "measured", "device": self.device,
                           "workers": self.engine.workers, "mode": self.engine.mode,
                           "max_inflight": self.engine.max_inflight, "machine": machine(),
                           "gpus": self._gpu_meta(), "gpu_clock_error_s": self.gpu_clock_error(),
                           **(meta or {})})

    def close(self, cancel: bool = False) -> None:
        """Close the engine (`Engine.close`: drain, or with `cancel` drop what has not
        started), then the GPUs (a cancelled engine's streams are not waited for)."""
        try:
            self._hand_over_drops()
            self._drops = None  # a result dropped after the run goes back at once
            self.engine.close(cancel)
            if self._world is not None:  # every op done: every light buffer that went is back
                self._flush_light(read=True)
        finally:
            if self.gpus:
                if cancel or self.engine.stopped:
                    self.releases.closed = True  # arrays that outlive the run go when dropped
                else:
                    self._close_gpus()
            self._rss.close()


def check_device(device: str) -> None:
    """A ValueError at the call for a device that is unknown or cannot be used here."""
    if device == "cpu" or (device.startswith("cpu") and device[3:].isdigit()):
        return
    if device.startswith("gpu") and device[3:].isdigit():
        check_gpu(int(device[3:]))
        return
    raise ValueError(f"unknown device {device!r}: devices are 'cpu', 'cpuN' and 'gpuN'")


def machine() -> str:
    """The CPU, its core count and the software versions, in one line."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    return (f"{model}, {default_workers()} cores, {platform.system()}, "
            f"Python {platform.python_version()}, numpy {np.__version__}")
