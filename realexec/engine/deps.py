"""Per-var dependency tracking (MXNet's ThreadedVar rules): pure bookkeeping, no threads, no locks.

Every op names the vars it reads and the vars it writes. Each var keeps, in push order, a queue of
the ops that may not touch it yet, plus what is running on it now:

- a read may start when no write pushed before it is unfinished (read-after-write);
- a write may start when every read and write pushed before it has finished (write-after-read,
  write-after-write);
- so consecutive reads of a var run together, and the next write waits for all of them.

An op is *granted* a var when its turn on that var comes; it is *ready* when it holds all its vars.
`Deps.add` grants what it can at once and says whether the op is ready; `Deps.complete` releases an
op's vars and appends to `ready` the ops that became ready. The caller (the engine) serialises both
calls under its own lock; everything here is plain single-threaded code and is unit-tested as such.

Deleting a var: MXNet pushes DeleteVariable as a write, which runs once every op pushed before it
has finished. Nothing can be pushed on a var after its deletion (no handle to it is left), so that
write runs exactly when the var goes *idle*. A var therefore keeps its deletion (`on_idle`, a
callable, and `on_idle_args`), and `complete` reports it in `released` when the var goes idle: no
op record, no queue entry, no lane, for the one "op" that every array gets.

Errors: `complete(op, failure)` with a failure stores it on every var the op writes (the var is
*poisoned*); `inherited_failure(op)` tells the engine an op touches a poisoned var, so it must not
run and poisons its own outputs in turn, as MXNet propagates `var_exception`. `OpError` is what a
blocker raises for a `Failure`.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple


class Failure(NamedTuple):
    """A kernel's exception and the op it came from (`op_id` is the frontend's op number)."""

    name: str
    op_id: int
    exc: BaseException


class OpError(RuntimeError):
    """A kernel raised. Raised at a blocker (from the original exception), naming the op."""

    def __init__(self, name: str, op_id: int, exc: BaseException, more: int = 0):
        self.op_name, self.op_id, self.original = name, op_id, exc
        tail = f" (and {more} more failed op(s))" if more else ""
        super().__init__(f"op {name!r} (#{op_id}) failed: {type(exc).__name__}: {exc}{tail}")

    @classmethod
    def of(cls, failure: Failure, more: int = 0) -> OpError:
        return cls(failure.name, failure.op_id, failure.exc, more)


class Var:
    """One engine variable: a unit of data whose readers and writers are ordered."""

    __slots__ = ("name", "running_reads", "writing", "queue", "writes_pushed", "writes_done",
                 "failure", "data", "on_idle", "on_idle_args", "ptr")

    def __init__(self, name: str = "", data=None):
        self.name = name
        self.running_reads = 0  # granted reads not yet finished
        self.writing = False  # a granted write not yet finished
        # (op, is_write) waiting for their turn, in push order; made at the first op that has to
        # wait, as most vars never see one (None reads as an empty queue)
        self.queue: deque | None = None
        self.writes_pushed = 0  # counts let a blocker wait for "every write pushed so far"
        self.writes_done = 0
        self.failure: Failure | None = None
        self.data = data  # the payload the engine's user attaches (a buffer); unused here
        self.ptr = 0  # its address, once the compiled engine has asked (0: not yet)
        self.on_idle = None  # the var's deletion, called as on_idle(*on_idle_args) when idle
        self.on_idle_args: tuple = ()

    @property
    def idle(self) -> bool:
        return not (self.running_reads or self.writing or self.queue)

    def __repr__(self) -> str:
        queued = len(self.queue) if self.queue else 0
        return (f"Var({self.name!r} reads={self.running_reads} writing={self.writing} "
                f"queued={queued})")


class OpRecord:
    """One pushed op: what to call, the vars it touches, and how many grants it still lacks."""

    __slots__ = ("fn", "args", "reads", "writes", "lane", "name", "op_id", "waiting")

    def __init__(self, fn, args, reads, writes, lane=None, name="op", op_id=-1):
        self.fn = fn
        self.args = args
        if len(reads) == 1 and len(writes) == 1 and reads[0] is not writes[0]:
            self.reads, self.writes = reads, writes  # most ops: nothing to weed out
        else:
            self.reads, self.writes = distinct(reads, writes)
        self.lane = lane
        self.name = name
        self.op_id = op_id
        self.waiting = 0

    def __repr__(self) -> str:
        return f"OpRecord({self.name!r} #{self.op_id}, waiting={self.waiting})"


def distinct(reads: tuple, writes: tuple) -> tuple[tuple, tuple]:
    """Reads without repeats and without the vars the op also writes (a write covers a read)."""
    # fast paths for the shapes every nd op has: no write, or one write and at most two reads
    n = len(reads)
    if len(writes) <= 1:
        w = writes[0] if writes else None
        if n == 0 or (n == 1 and reads[0] is not w):
            return reads, writes
        if n == 2 and reads[0] is not w and reads[1] is not w and reads[0] is not reads[1]:
            return reads, writes
    unique_writes: list = []
    for v in writes:
        if v not in unique_writes:
            unique_writes.append(v)
    unique_reads: list = []
    for v in reads:
        if v not in unique_writes and v not in unique_reads:
            unique_reads.append(v)
    return tuple(unique_reads), tuple(unique_writes)


class Deps:
    """The ThreadedVar rules over `Var`s and `OpRecord`s."""

    def add(self, op: OpRecord) -> bool:
        """Queue `op` on its vars; True when it holds every var already (it is ready now)."""
        waiting = 0
        for v in op.reads:
            if v.writing or v.queue:
                _enqueue(v, op, False)
                waiting += 1
            else:
                v.running_reads += 1
        for v in op.writes:
            v.writes_pushed += 1
            if v.writing or v.running_reads or v.queue:
                _enqueue(v, op, True)
                waiting += 1
            else:
                v.writing = True
        op.waiting = waiting
        return waiting == 0

    def complete(self, op: OpRecord, failure: Failure | None, ready: list,
                 released: list | None = None) -> None:
        """Release `op`'s vars (poisoning its writes on failure); newly ready ops go to `ready`,
        and deleted vars that went idle (their `on_idle` still to call) to `released`."""
        for v in op.reads:
            v.running_reads -= 1
            if v.running_reads == 0:
                if v.queue:
                    self._grant(v, ready)
                elif v.on_idle is not None:  # no write runs beside reads: idle now
                    released.append(v)
        for v in op.writes:
            if failure is not None:
                v.failure = failure
            v.writing = False
            v.writes_done += 1
            if v.queue:
                self._grant(v, ready)
            elif v.on_idle is not None:  # no read runs beside a write: idle now
                released.append(v)

    @staticmethod
    def _grant(v: Var, ready: list) -> None:
        # called when v has no running write: the head write needs no running reads either; a
        # run of reads at the head all start together
        queue = v.queue
        if queue[0][1]:
            if v.running_reads:
                return
            op = queue.popleft()[0]
            v.writing = True
            op.waiting -= 1
            if op.waiting == 0:
                ready.append(op)
            return
        while queue and not queue[0][1]:
            op = queue.popleft()[0]
            v.running_reads += 1
            op.waiting -= 1
            if op.waiting == 0:
                ready.append(op)

    @staticmethod
    def inherited_failure(op: OpRecord) -> Failure | None:
        """The failure stored on any var the op touches, or None: such an op must not run."""
        for v in op.reads:
            if v.failure is not None:
                return v.failure
        for v in op.writes:
            if v.failure is not None:
                return v.failure
        return None


def _enqueue(v: Var, op: OpRecord, is_write: bool) -> None:
    if v.queue is None:
        v.queue = deque()
    v.queue.append((op, is_write))
