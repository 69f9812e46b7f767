"""Pooled GPU memory: device buffers, page-locked (pinned) host buffers and per-stream scratch
buffers.

`DevicePool` hands out device arrays carved from cached buffers, so that steady-state op
execution does no cudaMalloc (which costs tens of microseconds, and whose counterpart cudaFree
synchronises the whole device). `PinnedPool` does the same for page-locked host buffers, which
host<->device copies need to be truly asynchronous. `PerStream` keeps one scratch device buffer
per stream (a kernel's temporaries: random states, partial sums).

Both pools round a request up to a *size class*: the next of 2^k, 1.25*2^k, 1.5*2^k, 1.75*2^k
bytes (at least 512), so a class wastes at most a quarter of a buffer and a released buffer
serves any later request of the same class. `live_bytes` and `peak_bytes` count the *requested*
bytes of arrays handed out and not yet released; `reserved_bytes` counts the buffers the pool
holds.

Assumptions. Releasing a buffer means the caller (the engine) knows no pending GPU work outside
stream order will touch it: work already queued on the stream that will next use the buffer is
ordered before that use, as in PyTorch's caching allocator on one stream. Device allocations
are made with gpu(device_id)'s context current (`realexec.gpu.runtime.device_context`); the
simulator has exactly one device, gpu(0). Units: bytes.
"""

from __future__ import annotations

import threading
from math import prod

import numpy as np

from realexec.gpu.runtime import available, cuda, device_context, device_error, on_simulator

MIN_CLASS_BYTES = 512


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
