"""Memory: a pooled allocator per device with live/peak accounting, and a cheap process-RSS probe.

`Pool.acquire(shape, dtype)` hands out a C-contiguous numpy array cut from a cached buffer of the
same *size class* when one is free, so a loop like `y = x + 1` on 2000x2000 reuses two buffers
instead of paying fresh pages (and their page faults) every iteration. `Pool.release(array)` puts
the buffer back. Free buffers live in a process-wide `BufferCache` per device (capped at
`max_bytes`, 1 GiB; beyond that a released buffer goes back to the OS), so they also outlive a
run; each `Pool` does one run's accounting.

Size classes: at most 512 bytes -> 512; up to 1 MiB -> the next power of two; above 1 MiB ->
the next multiple of 2 MiB (PyTorch's caching allocator rounds the same way), so a cached
buffer wastes at most 2 MiB or half of a small request.

Accounting follows DESIGN.md: *live bytes* are the bytes of the arrays handed out and not yet
released (the requested bytes, not the rounded class), which is what `asyncsim.simulate` predicts;
the engine calls `release` only when the last handle is gone and every op reading the array has
finished. Each change records a sample, read back as `(t_ns, device, live_bytes)` from `samples`;
`peak_bytes` is the maximum.

Buffers from elsewhere (a GPU copy's pinned host buffer) are counted on a Pool's device with
`track`/`untrack`; GPU memory has its own accounting (`realexec.gpu.device.GpuPool`).

`RssProbe` reads the resident set size from /proc/self/statm through a descriptor kept open (a few
microseconds a read); it gives None where /proc is missing.
"""

from __future__ import annotations

import math
import os
import threading
from array import array
from time import perf_counter_ns

import numpy as np

_MIB = 1 << 20
_SMALL = 512
_LARGE_STEP = 2 * _MIB


def size_class(nbytes: int) -> int:
    """The buffer size that serves a request of `nbytes`."""
    if nbytes <= _SMALL:
        return _SMALL
    if nbytes <= _MIB:
        return 1 << (nbytes - 1).bit_length()
    return -(-nbytes // _LARGE_STEP) * _LARGE_STEP


class BufferCache:
    """Free buffers by size class, shared by every Pool of one device in this process (as
    PyTorch's caching allocator is), so a second run reuses the first run's pages. A buffer is
    kept as the array last cut from it, so a request of the same shape and dtype takes that
    array back as it is. Its `lock` also guards the accounting of the Pools that draw from it
    (one lock per acquire/release)."""

    def __init__(self, max_bytes: int = 1 << 30):
        self.max_bytes = max_bytes
        self.cached_bytes = 0
        self.free: dict[int, list[np.ndarray]] = {}  # size class -> released arrays
        self.lock = threading.Lock()

    def clear(self) -> None:
        with self.lock:
            self.free.clear()
            self.cached_bytes = 0


_caches: dict[str, BufferCache] = {}


def shared_cache(device: str) -> BufferCache:
    """The process-wide BufferCache of `device`."""
    return _caches.setdefault(device, BufferCache())


# (shape, dtype name) -> (numpy dtype, requested bytes, size class): the push path asks for the
# same few layouts over and over; capped so a program of ever-new shapes cannot grow it unbounded
_LAYOUTS: dict[tuple, tuple[np.dtype, int, int]] = {}
_MAX_LAYOUTS = 4096


def _layout(shape: tuple[int, ...], dtype: str) -> tuple[np.dtype, int, int]:
    key = (shape, dtype)
    layout = _LAYOUTS.get(key)
    if layout is None:
        dt = np.dtype(dtype)
        nbytes = dt.itemsize * math.prod(shape)
        layout = (dt, nbytes, size_class(nbytes))
        if len(_LAYOUTS) < _MAX_LAYOUTS:
            _LAYOUTS[key] = layout
    return layout


class Pool:
    """One run's allocator for one device: buffers from a BufferCache, live/peak accounting.

    Thread-safe: the frontend acquires, a worker (or the frontend) releases."""

    def __init__(self, device: str = "cpu", cache: BufferCache | None = None):
        self.device = device
        self.cache = shared_cache(device) if cache is None else cache
        self.live_bytes = 0
        self.peak_bytes = 0
        self.hits = self.misses = 0
        # the samples as two int arrays (appended together, under the lock): a sample per
        # acquire and per release, so no tuple per op for the cyclic GC to count and walk
        self._times = array("q", [perf_counter_ns()])
        self._lives = array("q", [0])

    @property
    def samples(self) -> list[tuple[int, str, int]]:
        """(t_ns, device, live_bytes) at every change, oldest first."""
        with self.cache.lock:  # copies of the arrays (not GC-tracked) that agree in length
            times, lives = self._times[:], self._lives[:]
        device = self.device
        return [(t, device, live) for t, live in zip(times, lives, strict=True)]

    def acquire(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """An uninitialised C-contiguous array of `shape` and `dtype`, counted as live."""
        layout = _LAYOUTS.get((shape, dtype)) or _layout(shape, dtype)
        dt, nbytes, size = layout
        cache = self.cache
        # no object the cyclic GC tracks is made inside the lock, so a GC-run free (which
        # releases, taking this lock) cannot start there
        with cache.lock:
            free = cache.free.get(size)
            if free:
                spare = free.pop()
                cache.cached_bytes -= size
                self.hits += 1
            else:
                spare = None
                self.misses += 1
            self.live_bytes += nbytes
            live = self.live_bytes
            if live > self.peak_bytes:
                self.peak_bytes = live
            self._times.append(perf_counter_ns())
            self._lives.append(live)
        if spare is None:
            # outside the lock: fresh pages may take a while
            return np.ndarray(shape, dt, np.empty(size, np.uint8))
        if spare.shape == shape and spare.dtype is dt:
            return spare  # the array released last time fits as it is: no view to build
        return np.ndarray(shape, dt, spare.base)

    def release(self, array: np.ndarray) -> None:
        """Give back an array that `acquire` returned; it goes to the cache, where its buffer
        serves the next request of its size class (or back to the OS when the cache is full)."""
        raw = array.base
        assert raw is not None and raw.itemsize == 1, "not an array from a Pool"
        cache, size, spare = self.cache, raw.size, []
        with cache.lock:  # nothing GC-tracked is made in here (see acquire)
            self.live_bytes -= array.nbytes
            self._times.append(perf_counter_ns())
            self._lives.append(self.live_bytes)
            if cache.cached_bytes + size <= cache.max_bytes:
                cache.free.setdefault(size, spare).append(array)
                cache.cached_bytes += size

    def track(self, nbytes: int) -> None:
        """Count `nbytes` of a buffer that this Pool did not hand out as live on its device (the
        pinned host buffer a GPU-to-CPU copy fills); `untrack` gives them back."""
        self._count(nbytes)

    def untrack(self, nbytes: int) -> None:
        self._count(-nbytes)

    def _count(self, nbytes: int) -> None:
        with self.cache.lock:
            self.live_bytes += nbytes
            live = self.live_bytes
            if live > self.peak_bytes:
                self.peak_bytes = live
            self._times.append(perf_counter_ns())
            self._lives.append(live)

    def __repr__(self) -> str:
        return (f"Pool({self.device}: live {self.live_bytes / _MIB:.2f} MiB, peak "
                f"{self.peak_bytes / _MIB:.2f} MiB, {self.hits} reused, {self.misses} new)")


class RssProbe:
    """The process's resident set size in bytes, read cheaply; None where /proc is missing."""

    def __init__(self):
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        try:
            self._fd: int | None = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._fd = None

    def read(self) -> int | None:
        if self._fd is None:
            return None
        fields = os.pread(self._fd, 128, 0).split()
        return int(fields[1]) * self._page

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
