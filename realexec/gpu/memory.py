"""GPU devices, memory and data movement: which GPUs are usable, pooled device and pinned host
buffers, per-stream scratch buffers, host<->device copies and cross-stream events.

`DevicePool` hands out device arrays carved from cached buffers, so that steady-state op
execution does no cudaMalloc (which costs tens of microseconds, and whose counterpart cudaFree
synchronises the whole device). `PinnedPool` does the same for page-locked host buffers, which
host<->device copies need to be truly asynchronous.

Both round a request up to a *size class*: the next of 2^k, 1.25*2^k, 1.5*2^k, 1.75*2^k bytes
(at least 512), so a class wastes at most a quarter of a buffer and a released buffer serves
any later request of the same class. `live_bytes` and `peak_bytes` count the *requested* bytes
of arrays handed out and not yet released; `reserved_bytes` counts the buffers the pool holds.

Assumptions. Releasing a buffer means the caller (the engine) knows no pending GPU work outside
stream order will touch it: work already queued on the stream that will next use the buffer is
ordered before that use, as in PyTorch's caching allocator on one stream. Device allocations
are made with gpu(device_id)'s context current; the simulator (NUMBA_ENABLE_CUDASIM=1, which
must be set before numba is imported) has exactly one device, gpu(0). Units: bytes.
"""

from __future__ import annotations

import contextlib
import threading
from math import prod

import numpy as np


def _one_line(exc: BaseException) -> str:
    """An exception as one line: driver errors come as several lines, some blank."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {text[:240]}"


try:
    from numba import cuda
    from numba.cuda.core import config as _cuda_config

    _IMPORT_ERROR = ""
except Exception as exc:  # a broken CUDA install must not break importing the engine
    cuda = None
    _cuda_config = None
    _IMPORT_ERROR = _one_line(exc)

MIN_CLASS_BYTES = 512
_SIM_HINT = ("to run GPU code without one, set NUMBA_ENABLE_CUDASIM=1 before numba is imported "
             "(the numba CUDA simulator: slow, for tests)")


def on_simulator() -> bool:
    """True when numba.cuda was imported as the CUDA simulator."""
    return bool(cuda is not None and _cuda_config.ENABLE_CUDASIM)


def available() -> bool:
    """A real GPU or the simulator is usable. Never raises."""
    if cuda is None:
        return False
    try:
        return bool(cuda.is_available())
    except Exception:
        return False


def _device_names() -> list[str]:
    names = []
    for dev in cuda.gpus:
        name = dev.name
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    return names


def device_error(i: int) -> str:
    """Why gpu(i) cannot be used, in one line naming the device; '' when it can."""
    if cuda is None:
        return f"gpu({i}): numba.cuda cannot be imported ({_IMPORT_ERROR}); {_SIM_HINT}"
    if on_simulator():
        if i == 0:
            return ""
        return (f"gpu({i}): the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) has one device, "
                f"gpu(0); use gpu(0)")
    try:
        if not cuda.is_available():
            try:
                len(cuda.gpus)  # raises with the driver's own reason when there is one
                reason = "numba.cuda finds no CUDA driver or device"
            except Exception as exc:
                reason = _one_line(exc)
            return f"gpu({i}): no usable CUDA GPU on this machine ({reason}); {_SIM_HINT}"
        names = _device_names()
    except Exception as exc:
        return f"gpu({i}): no usable CUDA GPU on this machine ({_one_line(exc)}); {_SIM_HINT}"
    if not 0 <= i < len(names):
        listed = ", ".join(f"gpu({j}) {n}" for j, n in enumerate(names))
        return f"gpu({i}): this machine has {len(names)} CUDA device(s): {listed}"
    return ""


_THREAD = threading.local()  # .device: the GPU this thread made current for good


def device_context(device_id: int = 0):
    """A context manager making gpu(device_id) current on this thread (kernels, streams and
    allocations then go to that device).

    Entering numba's `cuda.gpus[i]` pushes and pops the context (~6 us, on every launch of an
    engine lane), so: where gpu(device_id) is current already this does nothing, and a thread
    with no context current (an engine lane's, on its first op) makes gpu(device_id) current
    for good; only a thread that switches between devices pushes and pops."""
    if on_simulator():
        return contextlib.nullcontext()
    if getattr(_THREAD, "device", None) == device_id:
        return contextlib.nullcontext()
    from numba.cuda.cudadrv.driver import driver

    with driver.get_active_context() as active:
        if active and active.devnum == device_id:
            return contextlib.nullcontext()
        fresh = not active
    if fresh:
        cuda.select_device(device_id)
        _THREAD.device = device_id
        return contextlib.nullcontext()
    return cuda.gpus[device_id]


def lane_context(device_id: int):
    """For a thread that works for gpu(device_id) alone, for its whole life: the device made
    current, and numba's context lookup done once and kept (numba's `ensure_context`, which its
    API calls otherwise repeat with two driver queries each, several times per launch; a
    private helper of numba-cuda, so without it this only makes the device current)."""
    if on_simulator():
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(device_context(device_id))
        from numba.cuda.cudadrv.devices import _runtime

        ensure = getattr(_runtime, "ensure_context", None)
        if ensure is not None:
            stack.enter_context(ensure())
    except Exception:
        # only a speed-up: each launch still makes its device current, and a lane thread that
        # died here would leave its ops unfinished and their blockers waiting
        stack.close()
        return contextlib.nullcontext()
    return stack


def size_class(nbytes: int) -> int:
    """The buffer size (bytes) that serves a request of nbytes: >= nbytes, <= 1.25x + 512."""
    if nbytes <= MIN_CLASS_BYTES:
        return MIN_CLASS_BYTES
    power = 1 << ((nbytes - 1).bit_length() - 1)  # largest power of two below nbytes
    step = power // 4
    return power + -(-(nbytes - power) // step) * step


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, acc = [], itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def device_pointer(arr) -> int:
    """The address of arr's first byte (device or host); equal addresses mean a reused buffer."""
    if isinstance(arr, np.ndarray):
        return arr.__array_interface__["data"][0]
    if on_simulator():
        return arr._ary.__array_interface__["data"][0]
    return arr.device_ctypes_pointer.value or 0


class _SizeClassPool:
    """Free lists of buffers by size class, and accounting of what is handed out."""

    def __init__(self):
        self._lock = threading.Lock()
        self._free: dict[int, list] = {}
        self._out: dict[int, tuple[object, int, object, int]] = {}  # id(arr) -> arr, cls, buf, n
        self.live_bytes = 0
        self.peak_bytes = 0
        self.reserved_bytes = 0

    def _new_buffer(self, nbytes: int):
        raise NotImplementedError

    def _view(self, buffer, shape: tuple[int, ...], dtype: np.dtype):
        raise NotImplementedError

    @property
    def cached_bytes(self) -> int:
        """Bytes held in free buffers, ready for reuse."""
        with self._lock:
            return sum(cls * len(bufs) for cls, bufs in self._free.items())

    def alloc(self, shape, dtype):
        shape = (int(shape),) if isinstance(shape, int | np.integer) else tuple(map(int, shape))
        dtype = np.dtype(dtype)
        nbytes = prod(shape) * dtype.itemsize
        cls = size_class(nbytes)
        with self._lock:
            bufs = self._free.get(cls)
            buffer = bufs.pop() if bufs else None
        if buffer is None:
            buffer = self._grow(cls)
        arr = self._view(buffer, shape, dtype)
        with self._lock:
            self._out[id(arr)] = (arr, cls, buffer, nbytes)
            self.live_bytes += nbytes
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        return arr

    def _grow(self, cls: int):
        try:
            buffer = self._new_buffer(cls)
        except Exception:
            # Out of memory is the likely cause: give cached buffers back and retry once.
            self.empty_cache()
            buffer = self._new_buffer(cls)
        with self._lock:
            self.reserved_bytes += cls
        return buffer

    def release(self, arr) -> None:
        with self._lock:
            entry = self._out.pop(id(arr), None)
            if entry is None:
                raise ValueError("release: this array was not allocated by this pool, "
                                 "or was already released")
            _, cls, buffer, nbytes = entry
            self._free.setdefault(cls, []).append(buffer)
            self.live_bytes -= nbytes

    def empty_cache(self) -> None:
        """Drop the free buffers (the memory goes back to the driver when they are collected)."""
        with self._lock:
            dropped = sum(cls * len(bufs) for cls, bufs in self._free.items())
            self._free.clear()
            self.reserved_bytes -= dropped


class DevicePool(_SizeClassPool):
    """Device memory of gpu(device_id), pooled by size class."""

    def __init__(self, device_id: int = 0):
        why = device_error(device_id)
        if why:
            raise RuntimeError(why)
        super().__init__()
        self.device_id = device_id

    def _new_buffer(self, nbytes: int):
        with device_context(self.device_id):
            return cuda.device_array(nbytes, dtype=np.uint8)

    def _view(self, buffer, shape, dtype):
        # A buffer keeps the array objects made over it, one per shape: a steady loop then
        # hands out the same objects, whose numba type (a cached property, ~10 us to build)
        # and flat view (`flat_view`) are made once, not on every op.
        views = buffer.__dict__.setdefault("_views", {})
        key = (shape, dtype.str)
        arr = views.get(key)
        if arr is None:
            if len(views) >= 8:
                views.clear()
            arr = views[key] = self._new_view(buffer, shape, dtype)
        return arr

    def _new_view(self, buffer, shape, dtype):
        if on_simulator():
            from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

            return FakeCUDAArray(np.ndarray(shape, dtype, buffer=buffer._ary))
        from numba.cuda.cudadrv.devicearray import DeviceNDArray

        with device_context(self.device_id):
            return DeviceNDArray(shape, _c_strides(shape, dtype.itemsize), dtype,
                                 gpu_data=buffer.gpu_data)


class PinnedPool(_SizeClassPool):
    """Page-locked (pinned) host buffers, pooled by size class; portable across devices."""

    def _new_buffer(self, nbytes: int):
        if on_simulator() or not available():
            return np.empty(nbytes, np.uint8)
        owner = cuda.current_context().memhostalloc(nbytes, portable=True)
        return np.ndarray(nbytes, np.uint8, buffer=owner)

    def _view(self, buffer, shape, dtype):
        return np.ndarray(shape, dtype, buffer=buffer)


class PerStream:
    """One scratch device buffer per stream: launches on one stream never overlap, so they
    can share it; separate streams get separate buffers."""

    def __init__(self, count: int, dtype):
        self._count, self._dtype = count, dtype
        self._buffers: dict[object, tuple] = {}
        self._lock = threading.Lock()

    def get(self, stream):
        if on_simulator():  # one kernel at a time: one buffer serves all
            key = 0
        else:  # a stream's handle, or for the default stream (handle 0) its device
            key = int(stream.handle) if stream else 0
            key = key or ("default", cuda.get_current_device().id)
        with self._lock:
            entry = self._buffers.get(key)
            if entry is None:
                entry = (stream, cuda.device_array(self._count, dtype=self._dtype))
                self._buffers[key] = entry  # holding the stream keeps its handle from reuse
        return entry[1]


# ---- copies and events -------------------------------------------------------------------
def _check_pair(name, a, b) -> None:
    if tuple(a.shape) != tuple(b.shape) or np.dtype(a.dtype) != np.dtype(b.dtype):
        raise ValueError(f"{name}: shapes/dtypes differ ({tuple(a.shape)} {a.dtype} vs "
                         f"{tuple(b.shape)} {b.dtype})")


def to_device(host: np.ndarray, out, stream) -> None:
    """Enqueue host -> out (device) on stream; asynchronous only when host is pinned."""
    _check_pair("to_device", host, out)
    if out.size:
        out.copy_to_device(host, stream=stream or 0)


def to_host(dev, out: np.ndarray, stream) -> None:
    """Enqueue dev -> out (host) on stream; out is valid after the stream is synchronised."""
    _check_pair("to_host", dev, out)
    if dev.size:
        dev.copy_to_host(out, stream=stream or 0)


def record_event(stream):
    """An event marking the work enqueued on stream so far."""
    event = cuda.event() if on_simulator() else cuda.event(timing=False)
    event.record(stream or 0)
    return event


def wait_event(event, stream) -> None:
    """Make later work on stream wait for event, without blocking the host."""
    event.wait(stream or 0)
