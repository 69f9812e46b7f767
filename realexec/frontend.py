"""The `nd` surface over the real engine: `realexec.run(workload)` and `realexec.session()`.

`EngineBackend` is the backend that `asyncsim.nd.frontend.ND` calls (the recording backend's
twin, so every workload runs unchanged): `issue` reserves the output buffer from the device's
`Pool` and pushes the op's kernel (`realexec.cpu.kernels.KERNELS[name](inputs, out, attrs)`) to
the engine, reading the input vars and writing the output var; `free` pushes the buffer's release
behind every op that still touches it (`Engine.delete_var`); `sync` is a blocker; `mark` times an
`nd.benchmark` region. Ops that touch a GPU go to its lanes (`realexec.gpu.backend`, mixed in).

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

Devices: arrays made without ctx live on the CPU, or on gpu(0) with `device='gpu'`. A GPU is set
up when first named; one that cannot be used fails at the call, saying how to run under the
simulator (NUMBA_ENABLE_CUDASIM=1). An array that cannot be allocated is a MemoryError at the
call, naming the op and the shape; nothing stays counted.

Ending: a session left by an exception (Ctrl-C included) cancels its engine: ops not yet started
are dropped, so the error reaches the caller at once (`realexec.engine.shutdown`). A long
session can record less: `trace=False` keeps no spans, samples or marks (live and peak bytes
are still counted), `trace=N` the last ~N of each.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import platform
import threading
from time import perf_counter_ns

import numpy as np

from asyncsim.nd.frontend import ND
from asyncsim.nd.ops import COMPILED
from asyncsim.nd.record import check_params, check_workload
from asyncsim.nd.trace import Span, Trace, device_lanes
from realexec.cpu import kernels as cpu
from realexec.cpu.warm import warm_all
from realexec.cpu.worker import DTYPES, address, native_op
from realexec.engine.core import FRONTEND, Engine, default_workers
from realexec.engine.deps import Var
from realexec.engine.memory import Pool, RssProbe
from realexec.engine.native import NativeEngine
from realexec.engine.shutdown import EngineStopped, trace_log
from realexec.gpu.backend import GpuBackend
from realexec.gpu.device import check_gpu
from realexec.gpu.vars import StreamVar, after_device, host_wait

_RSS_EVERY_NS = 10_000_000
ENGINES = {"native": NativeEngine, "native-pinned": functools.partial(NativeEngine, pin=True),
           "python": Engine}
_KERNELS = dict(cpu.KERNELS)  # as shipped: the native worker runs these ops itself
_warm = False


class EngineBackend(GpuBackend):
    """What `ND` calls: turns op records into engine pushes and blockers into engine waits."""

    def __init__(self, engine: Engine, device: str = "cpu", trace: bool | int = True):
        self.engine = engine
        self.device = device
        # GPUs add theirs ("gpu0": a GpuPool) when first named
        self._trace = trace
        self.pools = {"cpu": Pool("cpu", samples=trace)}
        self.kernels = cpu.KERNELS
        self.vars: dict = {}  # frontend var id -> engine Var (its name is its device)
        self._release_cpu = self.pools["cpu"].release  # bound once: a free per op passes it
        self._native = isinstance(engine, NativeEngine)  # elementwise ops run compiled
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

    def issue(self, op, out_var, host) -> None:
        engine = self.engine
        if engine.max_inflight is not None:
            engine.throttle(op.name, op.id)  # before reserving: the cap bounds memory too
        t_issue = perf_counter_ns()
        gpus = self.gpus
        if gpus and (op.device[0] == "g" or op.attrs.get("src", "cpu")[0] == "g"):
            ends = (op.device, op.attrs.get("src", op.device))
            if op.name == "copyto" and "cpu" not in ends and any(e[0] == "c" for e in ends):
                raise ValueError(f"copyto: copies between {ends[1]} and {ends[0]} are not "
                                 f"supported; copy through cpu(0)")
            self._issue_gpu(op, out_var, host, t_issue)
            return
        vars_ = self.vars
        if out_var is not None:
            device = out_var.device
            try:
                out = Var(device, self.pools[device].acquire(out_var.shape, out_var.dtype))
            except MemoryError as exc:
                raise MemoryError(f"{op.name}: cannot allocate an array of shape "
                                  f"{out_var.shape} ({out_var.dtype}): {exc}") from None
            vars_[out_var.id] = out
        else:
            out = vars_[op.out]
        names = op.reads
        if len(names) == 1:  # most ops read one var: skip the list building
            reads = (vars_[names[0]],)
        else:
            reads = tuple([vars_[v] for v in names])
        if host is not None:
            inputs = (host,)
        elif len(reads) == 1:
            inputs = (reads[0].data,)
        else:
            inputs = tuple([v.data for v in reads])
        if op.device != "cpu":  # cpu(i): its spans are shown under it in `trace`
            self._on_device[op.id] = op.device
        coded = None
        if self._native and op.name in COMPILED and host is None:
            coded = native_op(op.name, op.attrs, [v.shape for v in inputs])
            # a replaced kernel (a test's gate, a teacher's tracer) runs as given, in Python
            if coded is not None and (self.kernels[op.name] is not _KERNELS[op.name] or (
                    gpus and any(type(v) is StreamVar for v in reads))):
                coded = None  # (or a GPU copy fills an input: wait for it in Python)
        try:
            if coded is not None:
                self._push_native(coded, op, reads, out, t_issue)
                return
            fn, args = self.kernels[op.name], (inputs, out.data, op.attrs)
            if gpus:
                copied = tuple([v for v in reads if type(v) is StreamVar])
                if copied:  # buffers a copy from a GPU fills: wait for those copies first
                    fn, args = after_device, (fn, copied, *args)
            engine.push(fn, reads, (out,), "cpu", op.name, args, op.id, t_issue)
        except EngineStopped:  # refused before queuing: give the fresh output back
            if out_var is not None:
                vars_.pop(out_var.id, None)
                self.pools[out_var.device].release(out.data)
            raise

    def _push_native(self, coded, op, reads, out, t_issue) -> None:
        """Push an op that the compiled CPU worker runs itself, over the buffers' addresses."""
        kind, code, scalar = coded
        data = out.data
        a = b = c = out.ptr or _address_of(out)
        if reads:
            a = b = reads[0].ptr or _address_of(reads[0])
            if len(reads) > 1:
                b = reads[1].ptr or _address_of(reads[1])
        self.engine.push_native(kind, code, DTYPES[data.dtype], data.size, a, b, c, scalar,
                                reads, (out,), "cpu", op.name, op.id, t_issue)

    def sync(self, kind: str, var: int | None):
        start = perf_counter_ns()
        try:
            if var is None:
                self.engine.wait_all()
                if self.gpus:
                    self._settle()
                return None
            ev = self.vars[var]
            self.engine.wait_for_var(ev)
            if type(ev) is StreamVar:
                if ev.name != "cpu":
                    return self._read_gpu(kind, ev)
                host_wait(ev)
            if kind == "asnumpy":
                return ev.data.copy()
            return None if kind == "wait_to_read" else ev.data
        finally:
            end = perf_counter_ns()
            self.engine.log.append((FRONTEND, "wait", kind, -1, start, end))
            self._sample_rss(end)
            if self.gpus:
                self.releases.collect()

    def free(self, var: int) -> None:
        ev = self.vars.pop(var, None)
        if ev is None:
            return
        if type(ev) is StreamVar:
            self._free_stream_var(ev)
        elif ev.name == "cpu":
            self.engine.delete_var(ev, self._release_cpu, (ev.data,))
        else:  # cpu(i)'s buffer goes back to its own pool
            self.engine.delete_var(ev, self.pools[ev.name].release, (ev.data,))

    def drain(self) -> None:
        """Wait, without a span, until every op pushed so far has run (on every device)."""
        self.engine.wait_all()
        if self.gpus:
            self._settle()

    def mark(self, label: str, begin: bool) -> None:
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
        t0 = self.engine.origin_ns

        def secs(ns: int) -> float:
            return max(0.0, (ns - t0) * 1e-9)

        samples = [s for pool in self.pools.values() for s in list(pool.samples)]
        samples += self._rss_samples
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
            self.engine.close(cancel)
        finally:
            if self.gpus:
                if cancel or self.engine.stopped:
                    self.releases.closed = True  # arrays that outlive the run go when dropped
                else:
                    self._close_gpus()
            self._rss.close()


def _address_of(var) -> int:
    """A CPU var's buffer address, learned once (a compiled call: numpy's own costs ~1 us)."""
    var.ptr = address(var.data.reshape(-1))
    return var.ptr


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


def _blas_threads() -> int | None:
    from threadpoolctl import threadpool_info

    counts = [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
    return max(counts) if counts else None


# process-wide settings that open sessions share, in whatever threads: the first to open saves
# (gc: freezes), the last to close restores (a session restoring what the one before it had set
# left BLAS at one thread for the rest of the process when two threads overlapped). Re-entrant:
# a collection started inside may finalize a session left open, which takes it again.
_shared_lock = threading.RLock()
_frozen_sessions = 0
_blas_sessions = 0
_blas_before: int | None = None


def _fresh_lock_in_child() -> None:
    global _shared_lock
    _shared_lock = threading.RLock()  # a thread of the parent may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock_in_child)


@contextlib.contextmanager
def frozen_gc():
    """Keep the objects that exist now out of the cyclic GC's full collections until the block
    ends (`gc.freeze`, then `gc.unfreeze`; nested and concurrent blocks unfreeze at the last exit).

    Why: a full collection walks every container object in the process, and numba's compiler
    alone leaves ~100k of them, so one costs ~40 ms here. Ops queued in async mode (an op record,
    its vars and tuples each) live long enough to trigger full collections every few thousand
    pushes: without the freeze they cost more per push than the push itself. Objects made
    inside the block are collected as usual; cycles among the frozen ones wait for the exit."""
    global _frozen_sessions
    with _shared_lock:
        if _frozen_sessions == 0:
            gc.freeze()
        _frozen_sessions += 1
    try:
        yield
    finally:
        with _shared_lock:
            _frozen_sessions -= 1
            if _frozen_sessions == 0:
                gc.unfreeze()


def _set_blas_threads(threads: int) -> None:
    """`cpu.set_blas_threads` from whichever thread calls (the caller holds _shared_lock).
    threadpoolctl lets only the first thread that limited OpenBLAS limit it again and ignores
    the others silently; the sessions' setting is serialised here, so any thread may make it."""
    with contextlib.suppress(ImportError, AttributeError):
        from threadpoolctl import OpenBLASController

        OpenBLASController.clear_controlling_thread(force=True)
    cpu.set_blas_threads(threads)


@contextlib.contextmanager
def blas_threads(threads: int):
    """BLAS at `threads` threads in the block; the setting from before the first of the open
    blocks (in any thread) comes back when the last one ends."""
    global _blas_sessions, _blas_before
    with _shared_lock:
        if _blas_sessions == 0:
            _blas_before = _blas_threads()
        _blas_sessions += 1
        _set_blas_threads(threads)
    try:
        yield
    finally:
        with _shared_lock:
            _blas_sessions -= 1
            if _blas_sessions == 0 and _blas_before is not None:
                _set_blas_threads(_blas_before)


@contextlib.contextmanager
def session(workers: int | None = None, mode: str = "async", max_inflight: int | None = None,
            seed: int = 0, device: str = "cpu", trace: bool | int = True,
            engine: str = "native"):
    """An `nd` over a fresh engine, for interactive use; the engine is closed on exit.

        >>> with realexec.session(workers=2) as nd:
        ...     y = nd.dot(nd.ones((500, 500)), nd.ones((500, 500)))   # returns at once
        ...     y.sum().item()                                          # blocks
        125000000.0

    BLAS gets cores // workers threads meanwhile (so W concurrent products do not oversubscribe
    the cores; all cores in sync mode), and its previous setting is restored when the last open
    session ends (`blas_threads`). `engine`: "native" (`realexec.engine.native`: compiled
    workers run elementwise ops without the GIL), "native-pinned" (the same, each CPU worker
    pinned to a core while it runs compiled ops: two workers drain two chains of 10 us
    elementwise ops twice as fast as one, where the OS's placement gave 1.0-1.4x) or "python"
    (`realexec.engine.core`: Python worker threads, the contrast the chapters draw).
    The objects that exist when the session starts are moved out of the cyclic GC's way until it
    ends (`frozen_gc`). `trace`: True records everything, False no spans, samples or marks, N
    the last ~N of each.

    Leaving the block by an exception (Ctrl-C included) cancels the engine: the ops not yet
    started are dropped and the exception propagates at once; leaving it normally waits for
    every op, and warns of a failure no blocker reported."""
    global _warm
    if not _warm:  # compile (or load from numba's cache) before any timing starts
        warm_all(("float32", "float64"))
        _warm = True
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu' (where arrays made without a ctx "
                         f"live), got {device!r}")
    check_device("cpu" if device == "cpu" else "gpu0")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {tuple(ENGINES)}, got {engine!r}")
    engine = ENGINES[engine](workers=workers, mode=mode, max_inflight=max_inflight, trace=trace)
    cores = default_workers()
    threads = cores if mode == "sync" else max(1, cores // engine.workers)
    cancel = False
    backend = None
    try:
        with frozen_gc(), blas_threads(threads):
            try:
                backend = EngineBackend(engine, device, trace)
                if device == "gpu":
                    backend.check_device("gpu0")  # set up (on a real GPU, compile) before timing
                yield ND(backend, seed=seed, device=device)
            except GeneratorExit:  # the session object was dropped unclosed: drain, as at exit
                raise
            except BaseException:
                cancel = True
                raise
            finally:
                if backend is not None:
                    backend.close(cancel)
    finally:
        engine.close(cancel=True)  # a no-op once closed; a session that failed to start


def run(workload, device: str = "cpu", workers: int | None = None, mode: str = "async",
        max_inflight: int | None = None, seed: int = 0, trace: bool | int = True,
        engine: str = "native", **params) -> Trace:
    """Run `workload(nd, **params)` on the real engine and return its measured Trace (`trace`:
    as for `session`). An exception of the workload, Ctrl-C included, propagates at once."""
    name = check_workload(workload)
    check_params(workload, params)
    with session(workers, mode, max_inflight, seed, device, trace, engine) as nd:
        backend = nd._backend
        workload(nd, **params)
        backend.drain()  # ops the workload left queued still belong to its run
    return backend.trace({"workload": name, "params": dict(params), "seed": seed,
                          "engine": engine})
