"""Running on the real engine: `realexec.run(workload)` and `realexec.session()`.

`session` opens an `nd` (`asyncsim.nd.frontend.ND`) over a fresh engine and the
`realexec.frontend.EngineBackend` on it, and closes both on exit; `run` runs one workload in a
session and returns its measured Trace (the backend's record, in seconds from the engine's start;
`run` adds workload, params, seed and engine to its meta).

Process-wide settings (assumption: sessions may be open in several threads of a process at once,
and the process may fork): a session moves the objects that exist when it starts out of the
cyclic GC's way (`frozen_gc`) and sets BLAS's thread count (`blas_threads`); the first session
to open freezes and saves BLAS's setting, the last to close unfreezes and restores it. The numba
kernels are compiled (or loaded from numba's cache) once per process, before the first session's
timing starts.

Devices: arrays made without ctx live on the CPU, or on gpu(0) with `device='gpu'`. Units:
`workers` counts CPU worker threads (default: one per core this process may run on); BLAS gets
cores // workers threads (all cores in sync mode); a Trace's times are seconds.

Ending: a session left by an exception (Ctrl-C included) cancels its engine: ops not yet started
are dropped, so the error reaches the caller at once (`realexec.engine.shutdown`). A long
session can record less: `trace=False` keeps no spans, samples or marks (live and peak bytes
are still counted), `trace=N` the last ~N of each.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading

from asyncsim.nd.frontend import ND
from asyncsim.nd.record import check_params, check_workload
from asyncsim.nd.trace import Trace
from realexec.cpu import kernels as cpu
from realexec.cpu.warm import warm_all
from realexec.engine.lanes import default_workers
from realexec.frontend import ENGINES, EngineBackend, check_device

_warm = False


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
            engine: str = "native-light"):
    """An `nd` over a fresh engine, for interactive use; the engine is closed on exit.

        >>> with realexec.session(workers=2) as nd:
        ...     y = nd.dot(nd.ones((500, 500)), nd.ones((500, 500)))   # returns at once
        ...     y.sum().item()                                          # blocks
        125000000.0

    BLAS gets cores // workers threads meanwhile (so W concurrent products do not oversubscribe
    the cores; all cores in sync mode), and its previous setting is restored when the last open
    session ends (`blas_threads`). `engine`: "native-light", the default
    (`realexec.engine.native`: compiled workers run elementwise ops without the GIL, and the
    small results of elementwise ops live in the engine's compiled state, a push one compiled
    call: `realexec.cpu.light`; with `max_inflight`, as "native"), "native" (the same without
    light results: every result a Python var), "native-pinned" ("native", each CPU worker
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
        engine: str = "native-light", **params) -> Trace:
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
