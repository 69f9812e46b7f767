"""The free buffers of a device, shared by every `realexec.engine.memory.Pool` of it in this
process: `BufferCache` by size class, and `shared_cache(device)`, the process-wide one.

The cache holds at most `max_bytes` (1 GiB); beyond that the Pool gives
the buffers of the size classes released least recently back to the OS
(`asyncsim.model.caches.make_room`, which the model follows too). The cache's `lock` also guards
the accounting of the Pools that draw from it (one lock per acquire or release).

Fork: a child process gets fresh cache locks (`os.register_at_fork`): a lock that a thread of the
parent held at the fork would never be released in the child. Units: bytes.
"""

from __future__ import annotations

import os
import threading

import numpy as np


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
        self.releases = 0  # releases so far: a clock for `last_release`
        self.last_release: dict[int, int] = {}  # size class -> the clock at its last release
        # re-entrant: a tracer (a debugger, coverage) runs Python code at every line, even inside
        # a section below, and a collection started there may release an array on this thread
        self.lock = threading.RLock()

    def clear(self) -> None:
        with self.lock:
            self.free.clear()
            self.last_release.clear()
            self.cached_bytes = 0


_caches: dict[str, BufferCache] = {}


def shared_cache(device: str) -> BufferCache:
    """The process-wide BufferCache of `device`."""
    return _caches.setdefault(device, BufferCache())


def _fresh_locks_in_child() -> None:
    for cache in _caches.values():
        cache.lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_locks_in_child)
