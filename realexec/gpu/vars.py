"""How GPU work is ordered without host waits: CUDA events carried on the engine's vars.

The engine tracks dependencies on the host and counts a GPU op complete once it is enqueued on its
stream (see `realexec.gpu.device`). What may still run on the device is remembered here, per var:
a `StreamVar` holds the `Stamp` of its last write (the event that ends it, its stream, the op)
and, per stream, the event ending its last read since that write. An op about to be enqueued
makes its stream wait on the events of other streams (`GpuDevice.launch`); the host waits only
where it reads data itself (`host_wait`, `after_device`); a freed buffer is reused only once all
its events have completed (`Releases`).

Under the CUDA simulator work runs inside its launch, so every event is complete when recorded:
the same code runs there, with waits that never block.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

from realexec.engine.deps import OpError, Var


def kernels():
    """realexec.gpu.kernels, imported on first use so CPU-only runs never load numba.cuda."""
    from realexec.gpu import kernels as gpu

    return gpu


def cuda():
    """numba.cuda itself. Not `kernels().cuda`: while a simulated kernel runs, the simulator
    swaps that module global for a fake one, which another lane's thread would then see."""
    from numba import cuda

    return cuda


def new_event(timing: bool = False):
    if kernels().on_simulator():
        return cuda().event()
    return cuda().event(timing=timing)


def event_done(event) -> bool:
    """The work before `event` has finished (always, under the synchronous simulator)."""
    return kernels().on_simulator() or bool(event.query())


def synchronize(event, name: str, op_id: int) -> None:
    """Wait on the host for `event`; a device fault becomes the OpError of the op it ends."""
    try:
        event.synchronize()
    except Exception as exc:  # the driver's report of an asynchronous fault
        raise OpError(name, op_id, exc) from exc


class Stamp(NamedTuple):
    """The event ending the last write of a var, the stream it is on and the op that wrote."""

    event: object
    stream: object
    name: str
    op_id: int


class StreamVar(Var):
    """An engine var whose data GPU streams read or write: a GPU array, or the pinned CPU buffer
    a GPU copy fills. `write` is the Stamp of its last write (None: none on a stream); `reads`
    maps a stream to the event ending this var's last read there since that write.

    Only ops holding the var touch these fields (the engine grants a write alone, reads together,
    and each concurrent reader sets its own stream's key)."""

    __slots__ = ("write", "reads")

    def __init__(self, name: str = "", data=None):
        super().__init__(name, data)
        self.write: Stamp | None = None
        self.reads: dict = {}

    def events(self) -> list:
        """Every event that must complete before the var's buffer may be reused."""
        found = [] if self.write is None else [self.write.event]
        return found + list(self.reads.values())


def host_wait(var: StreamVar) -> None:
    """Block the host until the last write of `var` enqueued on a stream has finished."""
    stamp = var.write
    if stamp is not None:
        synchronize(stamp.event, stamp.name, stamp.op_id)


def after_device(fn, stream_vars, *args):
    """Run a CPU op over buffers that GPU copies fill, once those copies have finished."""
    for var in stream_vars:
        host_wait(var)
    return fn(*args)


class Releases:
    """Buffers whose last users may still be running on a device: `later(events, fn, *args)`
    queues `fn(*args)` (giving the buffer back) and `collect`, called by the frontend at
    allocations and blockers, runs those whose events have all completed.

    `later` never gives back at once, although it runs wherever an op completes: a free that the
    cyclic GC starts inside a pool's lock would otherwise take that lock again. Once `closed`
    (the device settled at the end of a run), it gives back at once."""

    def __init__(self):
        self._pending: list[tuple] = []
        self._lock = threading.RLock()
        self.closed = False

    def later(self, events, fn, *args) -> None:
        if self.closed:
            fn(*args)
            return
        with self._lock:
            self._pending.append((events, fn, args))

    def collect(self) -> None:
        if not self._pending:
            return
        with self._lock:
            pending, self._pending = self._pending, []
        waiting = []
        for events, fn, args in pending:
            if all(event_done(e) for e in events):
                fn(*args)
            else:
                waiting.append((events, fn, args))
        if waiting:
            with self._lock:
                self._pending.extend(waiting)

    def __len__(self) -> int:
        return len(self._pending)
