"""One GPU for the real engine: a compute stream, a copy stream, pooled memory and timed launches.

`GpuDevice` (gpu{i}) owns two CUDA streams, each drained by one engine lane of one thread:
"gpu{i}/compute" (spans of kind "exec") and "gpu{i}/copy" (kind "copy"), the lanes of
`asyncsim.simulate`. Its memory is a `GpuPool`: the process-wide `DevicePool` (no cudaMalloc per
op) with one run's live/peak accounting, sampled into the Trace as device "gpu{i}".

Completion (the issue's design (b), as in MXNet and PyTorch): a GPU op is ready when the engine
grants its vars on the host; its lane's thread *enqueues* it (`launch`) and the engine counts it
complete once enqueued. Ordering on the device comes from CUDA events (`realexec.gpu.vars`):
before enqueuing, the stream waits (`event.wait(stream)`, never a host wait) on the last write
of each var the op reads and on the last write and reads of each var it writes, where those went
to another stream; the same stream orders itself. The host waits only where it reads data:
blockers (`readback`, `host_wait`), CPU ops reading a GPU copy's buffer, staging for an upload.

Copies: cpu->gpu (`upload`) copies the host data into a pinned staging buffer on the lane's thread
and enqueues `to_device` from it; gpu->cpu (`download`) enqueues `to_host` into the CPU var's own
pinned buffer; both are then truly asynchronous. gpu->gpu (`peer`) is a device-to-device copy on
the destination's copy stream (relying on unified addressing; not yet run on two real GPUs).

Spans: on a real GPU each op records a timing event at its end, and `timed_spans` maps those to
host-clock nanoseconds through a reference event timed at set-up (to within `clock_error_ns`);
an op's start is when its in-order stream could begin it (see `timed_spans`). Under the
simulator kernels run inside the launch, and a span is the host's wall time around the enqueue,
written straight into the engine's log.

The simulator (NUMBA_ENABLE_CUDASIM=1) has one device; realexec offers `SIM_GPUS` virtual devices
on it (own streams, lanes and accounting over gpu(0)'s memory), so two-GPU workloads run in CI.
Units: nanoseconds (perf_counter_ns), bytes.
"""

from __future__ import annotations

import threading
from time import perf_counter_ns

import numpy as np

from realexec.gpu.vars import (
    Stamp,
    StreamVar,
    cuda,
    host_wait,
    kernels,
    new_event,
    synchronize,
)

SIM_GPUS = 2  # virtual devices under the simulator: the chapters use at most two GPUs
_HINT = ("to run without one, set NUMBA_ENABLE_CUDASIM=1 before numba is imported "
         "(the numba CUDA simulator: slow, for tests)")


def check_gpu(index: int) -> None:
    """A ValueError saying why, and how to run under the simulator, unless gpu(index) works."""
    gpu = kernels()
    if not gpu.available():
        raise ValueError(gpu.device_error(index)
                         or f"gpu({index}): no usable CUDA GPU on this machine; {_HINT}")
    if gpu.on_simulator():
        if not 0 <= index < SIM_GPUS:
            raise ValueError(f"gpu({index}): under the CUDA simulator realexec has {SIM_GPUS} "
                             f"virtual devices, gpu(0) to gpu({SIM_GPUS - 1})")
        return
    why = gpu.device_error(index)
    if why:
        raise ValueError(why)


class GpuPool:
    """One run's accounting of gpu(i)'s memory over the process-wide DevicePool, with `Pool`'s
    interface: `acquire`/`release`, `live_bytes`, `peak_bytes`, `samples`."""

    def __init__(self, device: str, pool):
        self.device, self.pool = device, pool
        self.live_bytes = self.peak_bytes = 0
        self.samples: list[tuple[int, str, int]] = [(perf_counter_ns(), device, 0)]
        self._lock = threading.Lock()

    def acquire(self, shape, dtype):
        array = self.pool.alloc(shape, dtype)
        self._count(array.size * array.dtype.itemsize)
        return array

    def release(self, array) -> None:
        self.pool.release(array)
        self._count(-array.size * array.dtype.itemsize)

    def _count(self, nbytes: int) -> None:
        with self._lock:
            self.live_bytes += nbytes
            live = self.live_bytes
            self.peak_bytes = max(self.peak_bytes, live)
            now = perf_counter_ns()
        self.samples.append((now, self.device, live))

    def __repr__(self) -> str:
        return f"GpuPool({self.device}: live {self.live_bytes} B, peak {self.peak_bytes} B)"


_pools: dict = {}
_pools_lock = threading.RLock()  # re-entrant: a GC-run free may give back a pinned buffer
_warm: set = set()


def device_pool(index: int):
    """The process-wide DevicePool of gpu(index) (a virtual device draws on gpu(0)'s memory)."""
    gpu = kernels()
    with _pools_lock:
        if index not in _pools:
            _pools[index] = gpu.DevicePool(0 if gpu.on_simulator() else index)
        return _pools[index]


def pinned_pool():
    """The process-wide PinnedPool: staging and copy-target buffers for every device."""
    with _pools_lock:
        if "pinned" not in _pools:
            _pools["pinned"] = kernels().PinnedPool()
        return _pools["pinned"]


class GpuDevice:
    """gpu(index) inside one engine: streams, lanes, memory accounting and timed launches.

    `blocking` (the engine's sync mode) makes every launch wait for its op on the host."""

    def __init__(self, index: int, engine, releases, blocking: bool = False):
        gpu = self.gpu = kernels()
        self.index, self.name = index, f"gpu{index}"
        self.sim = gpu.on_simulator()
        self.releases, self.blocking, self.log = releases, blocking, engine.log
        self.memory = GpuPool(self.name, device_pool(index))
        self.pinned = pinned_pool()
        with gpu.device_context(index):
            self.compute, self.copy, self.readback_stream = (cuda().stream() for _ in range(3))
            if not self.sim:
                self.reference, self.reference_ns, self.clock_error_ns = _clock_reference(
                    self.compute)
        self.compute_lane, self.copy_lane = f"{self.name}/compute", f"{self.name}/copy"
        self.lane_of = {self.compute: (self.compute_lane, "exec"),
                        self.copy: (self.copy_lane, "copy")}
        # (lane, kind, name, op_id, host ns after the hand-over, events waited for, end event)
        self.timed: list[tuple] = []
        self._spans: list[tuple] = []  # `timed` converted so far, and each lane's last end
        self._last_end: dict = {}
        self.last: dict = {}  # stream -> (name, op_id) of the last op enqueued on it
        self.description = ("CUDA simulator (virtual device)" if self.sim
                            else _device_name(index))
        for lane, kind in self.lane_of.values():
            engine.add_lane(lane, 1, kind, [lane], log=False,
                            thread_context=lambda: gpu.lane_context(index))

    # -- launching -------------------------------------------------------------------------------
    def launch(self, stream, name: str, op_id: int, reads, writes, enqueue):
        """On a lane's thread: make `stream` wait for other streams' work on the vars, run
        `enqueue(stream)` between timing marks, stamp the vars; return the op's end event."""
        gpu = self.gpu
        lane, kind = self.lane_of[stream]
        waited = []
        with gpu.device_context(self.index):
            for var in reads:
                stamp = var.write
                if stamp is not None and stamp.stream is not stream:
                    waited.append(stamp.event)
            for var in writes:
                waited += [event for other, event in var.reads.items() if other is not stream]
                stamp = var.write
                if stamp is not None and stamp.stream is not stream:
                    waited.append(stamp.event)
            for event in waited:
                gpu.wait_event(event, stream)
            if self.sim:
                start = perf_counter_ns()
                enqueue(stream)
                self.log.append((lane, kind, name, op_id, start, perf_counter_ns()))
                end = new_event()
                end.record(stream)
            else:
                enqueue(stream)
                handed_over = perf_counter_ns()
                end = new_event(timing=True)
                end.record(stream)
                self.timed.append((lane, kind, name, op_id, handed_over, waited, end))
        self.last[stream] = (name, op_id)
        for var in reads:
            var.reads[stream] = end
        for var in writes:
            var.write = Stamp(end, stream, name, op_id)
            var.reads = {}
        if self.blocking:
            synchronize(end, name, op_id)
        return end

    def run_kernel(self, kernel, inputs, out, attrs, name, op_id, reads) -> None:
        """A compute-stream op: `kernel(arrays, out array, attrs, stream)` of kernels.gpu."""
        def enqueue(stream):
            kernel(tuple([v.data for v in inputs]), out.data, attrs, stream)
        self.launch(self.compute, name, op_id, reads, (out,), enqueue)

    def upload(self, stream, source, out, name, op_id) -> None:
        """Host data (a numpy array, or a CPU var) -> `out` on this device, through a pinned
        staging buffer that goes back once the copy has finished."""
        staged = []

        def enqueue(stream):
            if isinstance(source, StreamVar):
                host_wait(source)  # a GPU copy may still be filling its pinned buffer
            host = source if isinstance(source, np.ndarray) else source.data
            staging = self.pinned.alloc(host.shape, host.dtype)
            staged.append(staging)
            np.copyto(staging, host)
            self.gpu.to_device(staging, out.data, stream)

        try:
            end = self.launch(stream, name, op_id, (), (out,), enqueue)
        except BaseException:
            for staging in staged:
                self.pinned.release(staging)
            raise
        self.releases.later((end,), self.pinned.release, staged[0])

    def download(self, source, out, name, op_id) -> None:
        """`source` on this device -> `out`, a CPU var with a pinned buffer, on the copy stream."""
        def enqueue(stream):
            self.gpu.to_host(source.data, out.data, stream)
        self.launch(self.copy, name, op_id, (source,), (out,), enqueue)

    def peer(self, source, out, name, op_id) -> None:
        """`source` on another device -> `out` on this one, on this device's copy stream."""
        copy = self.gpu.GPU_KERNELS["copy"]

        def enqueue(stream):
            copy((source.data,), out.data, {}, stream)
        self.launch(self.copy, name, op_id, (source,), (out,), enqueue)

    # -- the host's side -------------------------------------------------------------------------
    def readback(self, var: StreamVar) -> np.ndarray:
        """A blocker's copy of `var` as a fresh numpy array, once its last write has finished."""
        gpu = self.gpu
        host = np.empty(var.data.shape, var.data.dtype)
        stamp, stream = var.write, self.readback_stream
        with gpu.device_context(self.index):
            if stamp is not None:
                gpu.wait_event(stamp.event, stream)
            gpu.to_host(var.data, host, stream)
            done = new_event()
            done.record(stream)
        name, op_id = (stamp.name, stamp.op_id) if stamp else ("readback", -1)
        synchronize(done, name, op_id)
        return host

    def settle(self) -> None:
        """Wait on the host for everything enqueued on this device's streams."""
        for stream in (self.compute, self.copy):
            name, op_id = self.last.get(stream, ("stream", -1))
            with self.gpu.device_context(self.index):
                done = new_event()
                done.record(stream)
            synchronize(done, name, op_id)

    def timed_spans(self, since: int = 0) -> list[tuple]:
        """The spans timed by events, as (lane, kind, name, op_id, start_ns, end_ns) on the
        host's clock, from the `since`-th timed op on; call once the streams have finished the
        ops asked for (empty under the simulator).

        Each op records one event, at its end (creating and recording a second costs the lane
        ~13 us per op). An in-order stream starts an op at the latest of: the host's hand-over
        of it, the end of the op before it on that stream, and the ends of the events it was
        made to wait for; that is its start here (within the clock mapping's error)."""
        if self.sim:
            return []
        ref, ref_ns = self.reference, self.reference_ns

        def ns(event) -> int:
            return ref_ns + int(ref.elapsed_time(event) * 1e6)

        with self.gpu.device_context(self.index):
            for lane, kind, name, op_id, handed_over, waited, end in self.timed[len(self._spans):]:
                end_ns = ns(end)
                start = max([handed_over, self._last_end.get(lane, 0)]
                            + [_ns_or_zero(ns, event) for event in waited])
                self._last_end[lane] = end_ns
                self._spans.append((lane, kind, name, op_id, min(start, end_ns), end_ns))
        return self._spans[since:]


def _ns_or_zero(ns, event) -> int:
    try:
        return ns(event)
    except Exception:  # an event of another device: its own stream's order already holds
        return 0


def _clock_reference(stream, tries: int = 5) -> tuple:
    """(event, host ns, error ns): an event whose device time maps to the host's clock. The
    event completes between the host times around its record and synchronize; of a few tries,
    the narrowest window's middle is taken, and half its width is the error."""
    best = None
    for _ in range(tries):
        event = new_event(timing=True)
        before = perf_counter_ns()
        event.record(stream)
        event.synchronize()
        after = perf_counter_ns()
        if best is None or after - before < best[2] - best[1]:
            best = (event, before, after)
    event, before, after = best
    return event, (before + after) // 2, (after - before) // 2


def _device_name(index: int) -> str:
    name = cuda().gpus[index].name
    return name.decode() if isinstance(name, bytes) else str(name)


def warmup(index: int = 0, dtypes=("float32", "float64")) -> None:
    """Compile (or load from numba's cache) every GPU kernel for `dtypes` on gpu(index), so that
    no measured op pays for compilation. Once per device and process."""
    gpu = kernels()
    if (index, tuple(dtypes)) in _warm:
        return
    pool = device_pool(index)
    with gpu.device_context(index):
        stream = cuda().stream()
        # a product of MIN_TILES output tiles takes the register-blocked kernel (the 4 x 4 ones
        # take the small one): a column of MIN_TILES * BM rows times a 1 x 1 matrix
        from realexec.gpu.matmul import BM, MIN_TILES

        tall = (MIN_TILES * BM, 1)
        for dtype in dtypes:
            held = [pool.alloc(shape, dtype) for shape in ((4, 4), (4,), (4, 4), ())]
            columns = [pool.alloc(shape, dtype) for shape in (tall, (1, 1), tall)]
            for name, inputs, target, attrs in _warmup_calls(*held):
                gpu.GPU_KERNELS[name](inputs, target, attrs, stream)
            gpu.GPU_KERNELS["ones"]((), columns[1], {}, stream)
            gpu.GPU_KERNELS["dot"](tuple(columns[:2]), columns[2], {}, stream)
            held += columns
            stream.synchronize()
            for array in held:
                pool.release(array)
    _warm.add((index, tuple(dtypes)))


def _warmup_calls(x, row, out, scalar):
    """One call per kernel specialisation: (op, inputs, out, attrs)."""
    rows = {"start": 0, "stop": 4, "squeeze": False}
    calls = [(name, (), x, {"value": 1.0, "seed": 0})
             for name in ("zeros", "full", "uniform", "normal", "ones")]
    calls.append(("ones", (), row, {}))  # so no op below divides by zero
    for name in ("add", "sub", "mul", "div"):
        calls += [(name, (x, x), out, {}), (name, (x, row), out, {})]
    for name in ("add_scalar", "sub_scalar", "rsub_scalar", "mul_scalar", "div_scalar",
                 "rdiv_scalar", "relu", "copy"):
        calls.append((name, (x,), out, {"scalar": 2.0}))
    calls += [(name, (x,), scalar, {}) for name in ("sum", "mean", "norm")]
    calls += [("dot", (x, x), out, {}), ("slice", (x,), out, rows),
              ("setitem", (out, x), out, rows), ("setitem", (out, row), out, rows),
              ("setitem_scalar", (out,), out, {**rows, "scalar": 0.0})]
    return calls
