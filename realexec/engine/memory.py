"""Memory: a pooled allocator per device with live/peak accounting, and a cheap process-RSS probe.

`Pool.acquire(shape, dtype)` hands out a C-contiguous numpy array cut from a cached buffer of the
same *size class* when one is free, so a loop like `y = x + 1` on 2000x2000 reuses two buffers
instead of paying fresh pages (and their page faults) every iteration. `Pool.release(array)` puts
the buffer back. Free buffers live in a process-wide `BufferCache` per device (capped at
`max_bytes`, 1 GiB; beyond that the buffers of the size classes given back least recently go
back to the OS; `realexec.engine.buffers`), so they also outlive a run; each `Pool` does one
run's accounting.

Size classes (`asyncsim.model.caches.size_class`, which the model's cache uses too): at most 512
bytes -> 512; up to 1 MiB -> the next power of two; above 1 MiB -> the next multiple of 2 MiB
(PyTorch's caching allocator rounds the same way), so a cached buffer wastes at most 2 MiB or half
of a small request.

Accounting follows DESIGN.md: *live bytes* are the bytes of the arrays handed out and not yet
released (the requested bytes, not the rounded class), which is what `asyncsim.simulate` predicts;
the engine calls `release` only when the last handle is gone and every op reading the array has
finished. Each change records a sample, read back as `(t_ns, device, live_bytes)` from `samples`;
`peak_bytes` is the maximum.

Buffers from elsewhere (a GPU copy's pinned host buffer) are counted on a Pool's device with
`track`/`untrack`; GPU memory has its own accounting (`realexec.gpu.device.GpuPool`).

A request is counted only once its buffer exists: one that cannot be served (larger than this
machine's memory, `MemoryError`, or numpy's own refusal) raises and leaves the accounting as it
was. `samples` takes `False` (no samples: live and peak only) or a cap (about the last cap kept,
trimmed at releases), for sessions too long to keep a sample per op.

`RssProbe` reads the resident set size from /proc/self/statm through a descriptor kept open (a few
microseconds a read); it gives None where /proc is missing.
"""

from __future__ import annotations

import math
import os
import sys
import weakref
from array import array
from time import perf_counter_ns

import numpy as np

# the model reuses buffers, and makes room in a full pool, as this pool does
from asyncsim.model.caches import make_room, size_class
from realexec.engine.buffers import BufferCache, shared_cache

_MIB = 1 << 20
_WHOLE = slice(None)  # made once: a slice made inside a lock could start a collection
_QUIET_CAP = 4096  # samples a Pool with samples=False keeps (and shows none of)

# id(buffer) -> its address, for every buffer a Pool made, while the buffer exists (a finalizer
# drops the entry before the id can be reused): the compiled engine's push needs each output's
# address, and asking numpy (or a compiled call) cost 0.4-1 us an op
ADDRESSES: dict[int, int] = {}


def physical_memory() -> int | None:
    """Bytes of RAM on this machine, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


_PHYSICAL = physical_memory()


def human_bytes(nbytes: int) -> str:
    """`nbytes` in B, KiB, MiB, GiB, TiB or PiB, three significant digits."""
    value, unit = float(nbytes), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            break
        value /= 1024
    return f"{value:.3g} {unit}"


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

    def __init__(self, device: str = "cpu", cache: BufferCache | None = None,
                 samples: bool | int = True):
        self.device = device
        self.cache = shared_cache(device) if cache is None else cache
        self.live_bytes = 0
        self.peak_bytes = 0
        self.hits = self.misses = 0
        # the samples as two int arrays (appended together, under the lock): a sample per
        # acquire and per release, so no tuple per op for the cyclic GC to count and walk
        self._times = array("q", [perf_counter_ns()])
        self._lives = array("q", [0])
        # an int: trim to about the last `cap` at a release once twice that many are kept (the
        # trim costs O(cap) once per cap samples; its slice is made here, see below); False (or
        # 0): the same with a cap of its own, and `samples` shows only the first
        self._shown = bool(samples)
        cap = _QUIET_CAP if not samples else None if samples is True else int(samples)
        self._trim_at = sys.maxsize if cap is None else 2 * cap
        self._trimmed = slice(0, cap)

    # Inside `cache.lock` nothing calls Python code or makes an object the cyclic GC tracks (a
    # frame, a slice, a tuple): that could start a collection, whose NDArray.__del__ frees
    # (releasing, taking this lock again) on this thread. So the accounting is written out in
    # each section, not called. Under a tracer it can happen anyway; the lock is re-entrant and
    # each section stays consistent when a whole release runs inside it.

    @property
    def samples(self) -> list[tuple[int, str, int]]:
        """(t_ns, device, live_bytes) at every change, oldest first."""
        with self.cache.lock:  # copies of the arrays (not GC-tracked)
            times, lives = self._times[_WHOLE], self._lives[_WHOLE]
        if not self._shown:
            times, lives = times[:1], lives[:1]
        device = self.device
        # the two agree in length unless a Ctrl-C landed between a sample's two appends (the
        # run is then being stopped): the samples both have are what there is to show
        return [(t, device, live) for t, live in zip(times, lives, strict=False)]

    def acquire(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """An uninitialised C-contiguous array of `shape` and `dtype`, counted as live.
        MemoryError (nothing counted) when it cannot be had."""
        dt, nbytes, size = _LAYOUTS.get((shape, dtype)) or _layout(shape, dtype)
        cache = self.cache
        lock = cache.lock
        lock.acquire()  # not `with`: its two special-method calls cost twice this pair
        try:
            free = cache.free.get(size)
            spare = free.pop() if free else None
            if spare is not None:
                cache.cached_bytes -= size
                self.hits += 1
                live = self.live_bytes = self.live_bytes + nbytes
                if live > self.peak_bytes:
                    self.peak_bytes = live
                self._times.append(perf_counter_ns())
                self._lives.append(live)
        finally:
            lock.release()
        if spare is not None:
            if spare.shape == shape and spare.dtype is dt:
                return spare  # the array released last time fits as it is: no view to build
            return np.ndarray(shape, dt, spare.base)
        # a fresh buffer, made before it is counted (a request that fails leaves no trace), and
        # outside the lock: fresh pages may take a while
        raw = _fresh_buffer(size, nbytes, self.device)
        fresh = np.ndarray(shape, dt, raw)
        ADDRESSES[id(raw)] = raw.ctypes.data  # once per buffer
        weakref.finalize(raw, ADDRESSES.pop, id(raw), None)
        with cache.lock:
            self.misses += 1
            self.live_bytes += nbytes
            live = self.live_bytes
            if live > self.peak_bytes:
                self.peak_bytes = live
            self._times.append(perf_counter_ns())
            self._lives.append(live)
        return fresh

    def release(self, array: np.ndarray) -> None:
        """Give back an array that `acquire` returned; it goes to the cache, where its buffer
        serves the next request of its size class (the cache full, `_make_room` first)."""
        raw = array.base
        assert raw is not None and raw.itemsize == 1, "not an array from a Pool"
        cache, size = self.cache, raw.size
        # the size class's list made here if it is new, not inside the lock (see above)
        spare = [] if cache.free.get(size) is None else None
        lock = cache.lock
        lock.acquire()
        try:
            live = self.live_bytes = self.live_bytes - array.nbytes
            self._times.append(perf_counter_ns())
            self._lives.append(live)
            if len(self._times) >= self._trim_at:
                del self._times[self._trimmed], self._lives[self._trimmed]
            cache.releases += 1
            cache.last_release[size] = cache.releases
            kept = cache.cached_bytes + size <= cache.max_bytes
            if kept:
                free = cache.free.get(size)
                if free is None:  # `spare` is None only if the cache was cleared since the look
                    free = cache.free[size] = spare if spare is not None else []
                free.append(array)
                cache.cached_bytes += size
        finally:
            lock.release()
        if not kept:
            self._make_room(array, size)

    def release_many(self, arrays: list) -> None:
        """`release` each of `arrays` (from `acquire`), with one lock and one sample: their
        bytes come back at one instant. The frontend gives back a run of small results so, a
        lock, a sample and the calls around them shared instead of paid per array
        (`realexec.frontend`'s dropped results). From the first array that the full cache
        cannot keep on, they go through `release` after the shared section, in order."""
        cache = self.cache
        free_lists, rest = cache.free, []  # the list made before the lock (see above)
        lock = cache.lock
        lock.acquire()
        try:
            given = 0
            for array in arrays:
                size = array.base.size
                if rest or cache.cached_bytes + size > cache.max_bytes:
                    rest.append(array)  # it, and those after it in order, as `release` would
                    continue
                free = free_lists.get(size)
                if free is None:  # a new class: its list made here (a release run inside is
                    free = free_lists[size] = []  # whole, and `given` is applied after it)
                free.append(array)
                cache.cached_bytes += size
                cache.releases += 1
                cache.last_release[size] = cache.releases
                given += array.nbytes
            if given:
                live = self.live_bytes = self.live_bytes - given
                self._times.append(perf_counter_ns())
                self._lives.append(live)
                if len(self._times) >= self._trim_at:
                    del self._times[self._trimmed], self._lives[self._trimmed]
        finally:
            lock.release()
        for array in rest:
            self.release(array)

    def _make_room(self, array: np.ndarray, size: int) -> None:
        """The cache is full: the buffers of the size classes given back least recently go back
        to the OS, the oldest of each first, until `array` fits. The cache is shared across
        runs, and keeping whatever came first let an earlier workload's buffers take the room:
        behind a cache full of 2 MiB buffers, `sync_vs_async` (16 MiB outputs) faulted fresh
        pages in at every op and took 283-291 ms, 136-139 ms with this (2-core Xeon VM). A
        rare path, so it may make objects inside the lock (see above); the buffers it drops
        are freed after the lock is let go."""
        cache = self.cache
        with cache.lock:
            dropped, freed = make_room(cache.free, cache.last_release, size,
                                       cache.cached_bytes + size - cache.max_bytes)
            cache.cached_bytes -= freed
            if cache.cached_bytes + size <= cache.max_bytes:
                cache.free.setdefault(size, []).append(array)
                cache.cached_bytes += size
        del dropped

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
            if len(self._times) >= self._trim_at:
                del self._times[self._trimmed], self._lives[self._trimmed]

    def __repr__(self) -> str:
        return (f"Pool({self.device}: live {self.live_bytes / _MIB:.2f} MiB, peak "
                f"{self.peak_bytes / _MIB:.2f} MiB, {self.hits} reused, {self.misses} new)")


def _fresh_buffer(size: int, nbytes: int, device: str) -> np.ndarray:
    """`size` fresh bytes, or a MemoryError saying why not: more than this machine's memory is
    refused before asking (an OS that overcommits would hand out pages it cannot back, and the
    kernel that touches them would be killed), and numpy's own refusals say the same."""
    if _PHYSICAL is not None and nbytes > _PHYSICAL:
        raise MemoryError(f"{human_bytes(nbytes)} is more than this machine's memory "
                          f"({human_bytes(_PHYSICAL)}) on {device}")
    try:
        return np.empty(size, np.uint8)
    except (MemoryError, ValueError, OverflowError) as exc:
        raise MemoryError(f"cannot allocate {human_bytes(nbytes)} on {device}: {exc}") from None


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
