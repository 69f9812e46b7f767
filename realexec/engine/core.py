"""The Python-thread engine (`engine="python"`): the frontend pushes ops and returns at once;
Python worker threads run them. The default engine is `realexec.engine.native` (compiled workers,
no GIL per op); this one stays as the contrast the chapters draw ("what if the backend were
written in Python?") and runs every op through a Python callable.

`Engine.push(fn, reads, writes, lane, name, args)` queues `fn(*args)` behind the ops that touch
the same vars (`realexec.engine.deps`: read-after-write, write-after-read, write-after-write) and
returns. When an op holds all its vars it goes to its *lane*'s ready queue; the lane's worker
threads run it. The engine is generic: `fn` is any callable; `realexec.frontend` builds the `nd`
surface on it.

Vocabulary (lanes, modes, `max_inflight`, blockers), the settings and `Lane`: shared with the
compiled engine and `asyncsim.simulate`, in `realexec.engine.lanes`.

Times: `time.perf_counter_ns`, kept as raw ns tuples in `log` (cheap to append from any thread)
and turned into `Span`s (seconds from `origin_ns`) only by `spans()`.

Costs, and the GIL: a push costs the frontend about 2 us of Python (5 us with the `nd` layer on
top) and each op costs its worker about as much again (completing it, calling the kernel,
logging, releasing memory). Both need the GIL, so tiny ops cannot overlap on CPython: a frontend
that keeps pushing keeps the GIL (a worker gets it at the 5 ms switch interval, or when the
frontend blocks), ops queue up, and they run while the frontend waits. The concurrency comes from
kernels that drop the GIL (numba's nogil loops, BLAS): large ops overlap each other and the
frontend.

Waiting: the blockers (`realexec.engine.blockers`) spin without the GIL, then sleep; the
worker that finishes an op tests their conditions for them.

Errors: a kernel that raises poisons the vars it writes; ops touching a poisoned var do not run
and poison their own writes. The error surfaces as `OpError` (raised from the original exception)
at the next blocker on a poisoned var, and at `wait_all`, which then forgets it.

Shutdown (`realexec.engine.shutdown`): `close()` drains, stops and joins the workers; after a
Ctrl-C in a blocker, or with `close(cancel=True)`, it drops the ops not yet started and abandons
running ones after `JOIN_S` instead. A failure that no blocker reported is a RuntimeWarning at
close. Engines left open are drained at interpreter exit (a Ctrl-C there cancels them); in a
forked child an inherited engine raises `EngineStopped`.

Trace: `trace=False` records no spans, `trace=N` keeps the last N (a long session's log would
grow by ~400 bytes an op otherwise).
"""

from __future__ import annotations

import threading
from queue import SimpleQueue
from time import perf_counter, perf_counter_ns

from asyncsim.nd.trace import Span
from realexec.engine import shutdown
from realexec.engine.blockers import Blockers
from realexec.engine.deps import Deps, Failure, OpRecord, Var
from realexec.engine.lanes import FRONTEND, Lane, settings
from realexec.engine.shutdown import JOIN_S, EngineStopped
from realexec.engine.spin import Progress

_STOP = None  # a worker's sentinel


class Engine(shutdown.Ending, Blockers):
    """Vars, pushes, ready queues and workers. Use as a context manager, or call `close()`."""

    def __init__(self, workers: int | None = None, mode: str = "async",
                 max_inflight: int | None = None, spin_s: float = 2e-3,
                 trace: bool | int = True):
        self.workers = settings(workers, mode, max_inflight)
        self.mode, self.max_inflight = mode, max_inflight
        self._sync = mode == "sync"
        self._spin_ns = int(spin_s * 1e9)
        self._deps = Deps()
        # re-entrant: the cyclic GC may run NDArray.__del__ (a free) on a thread that is inside
        # one of the sections below; every section leaves the deps consistent at any allocation
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        # the conditions of waiting blockers, spinning or asleep on _cond: a worker signals them
        # only when one holds (one testing its own at every op cost each op a GIL round trip)
        self._blockers: list = []
        self._asleep = 0  # blockers asleep on _cond (past their spin)
        self._progress = Progress()  # bumped when a blocker's condition holds; watched spinning
        self._pushed = self._done = self._inflight = 0
        self._failures: list[Failure] = []  # raised by kernels, not yet reported by wait_all
        # set (under the lock) at the first failure: until then no var can be poisoned, so a
        # ready op skips the look for an inherited failure
        self._tainted = False
        self._observed: set[int] = set()  # ids of failures a wait_for_var has raised
        self._closed = False
        self._stopped: str | None = None  # why queued ops will never run (cancelled, forked)
        self._interrupted = False  # Ctrl-C left one of its blockers: close() cancels
        self._forked = False  # this is a fork child's copy: nothing here may be used
        self.lanes: dict[str, Lane] = {}
        # (lane, kind, name, op_id, start_ns, end_ns); a list, or a bounded deque
        self.log = shutdown.trace_log(trace)
        self.origin_ns = perf_counter_ns()
        self.add_lane("cpu", self.workers)
        shutdown.register(self)

    # -- lanes ---------------------------------------------------------------------------------
    def add_lane(self, name: str, workers: int = 1, kind: str = "exec", labels=None,
                 log: bool = True, thread_context=None) -> Lane:
        """A new lane; its worker threads start now (none in sync mode). With `log=False` the
        engine records no exec spans for its ops (they record their own). `thread_context`, a
        context-manager factory, is entered by each of the lane's threads for its whole life (a
        GPU lane's thread makes its device current once, not per op)."""
        if name in self.lanes:
            raise ValueError(f"lane {name!r} exists")
        lane = Lane(name, workers, kind, labels, log)
        self.lanes[name] = lane
        if not self._sync:
            for label in lane.labels:
                # daemon: a worker abandoned in a long kernel by a cancelling close must not keep
                # the process alive; close() and the exit hook join the others
                t = threading.Thread(target=self._work, args=(lane, label, thread_context),
                                     daemon=True, name=f"realexec-{label}")
                lane.threads.append(t)
                t.start()
        return lane

    # -- vars and pushes -------------------------------------------------------------------------
    def new_var(self, name: str = "", data=None) -> Var:
        return Var(name, data)

    def push(self, fn, reads=(), writes=(), lane: str = "cpu", name: str = "op", args=(),
             op_id: int = -1, t_issue: int | None = None) -> None:
        """Queue `fn(*args)` after the ops that touch `reads`/`writes`; return at once (async).

        `t_issue` (perf_counter_ns) starts this op's "issue" span, so a caller can include its
        own work before the push (allocating the output)."""
        if self._closed:
            raise EngineStopped(f"{name}: {self._stopped or 'the engine is closed'}")
        if self.max_inflight is not None and self._inflight >= self.max_inflight:
            self.throttle(name, op_id)
        if t_issue is None:
            t_issue = perf_counter_ns()
        where = self.lanes[lane]
        op = OpRecord(fn, args, reads, writes, where, name, op_id)
        with self._lock:
            self._pushed += 1
            self._inflight += 1
            ready = self._deps.add(op)
        if self._sync:
            # as asyncsim.simulate draws NaiveEngine: the issue, then the frontend waiting while
            # the op runs (here on the frontend thread itself, shown on the lane's first worker)
            assert ready, "sync mode: every earlier op has finished"
            start = perf_counter_ns()
            self.log.append((FRONTEND, "issue", name, op_id, t_issue, start))
            self._run(op, where.labels[0])
            self.log.append((FRONTEND, "wait", name, op_id, start, perf_counter_ns()))
            return
        if ready:
            where.queue.put(op)
        self.log.append((FRONTEND, "issue", name, op_id, t_issue, perf_counter_ns()))

    def delete_var(self, var: Var, fn=None, args=()) -> None:
        """Forget `var` once every op pushed on it has finished, then call `fn(*args)` (release
        its memory). MXNet pushes this as a write; a write pushed last runs when the var goes
        idle, so the var keeps `fn` as its `on_idle` and whoever completes its last op calls it
        (`realexec.engine.deps`). No span; counted as pending until called (wait_all waits for
        memory to come back), but not towards max_inflight."""
        fn = fn or _nothing
        if self._closed:
            fn(*args)
            return
        with self._lock:
            # nothing pending on it (Var.idle, written out: a free per op), and no handle left
            # to push more: free now
            idle = not (var.running_reads or var.writing or var.queue)
            if not idle:
                var.on_idle, var.on_idle_args = fn, args
                self._pushed += 1
        if idle:
            fn(*args)

    # -- execution -----------------------------------------------------------------------------
    def _work(self, lane: Lane, label: str, thread_context=None) -> None:
        if thread_context is not None:
            with thread_context():
                return self._work(lane, label)
        get, counts = lane.queue.get, self._progress.counts
        while True:
            op = get()
            if op is _STOP or self._stopped is not None:  # cancelled: the rest is dropped
                return
            if self._run(op, label):
                # the last thing before get() lets go of the GIL (when the queue is empty): a
                # blocker spinning on it then finds the GIL free (realexec.engine.spin)
                counts[0] += 1

    def _run(self, op: OpRecord, label: str) -> bool:
        """Run one ready op on this thread (unless it inherits a failure), then complete it;
        True if a waiting blocker's condition now holds."""
        failure = Deps.inherited_failure(op) if self._tainted else None
        own = False
        if failure is None:
            start = perf_counter_ns()
            try:
                op.fn(*op.args)
            except BaseException as exc:  # any error of a kernel belongs to its op
                failure, own = Failure(op.name, op.op_id, exc), True
            if op.lane.log:
                self.log.append((label, op.lane.kind, op.name, op.op_id, start, perf_counter_ns()))
        ready: list[OpRecord] = []
        released: list[Var] = []
        with self._lock:
            self._deps.complete(op, failure, ready, released)
            self._done += 1
            self._inflight -= 1
            if own:
                self._failures.append(failure)
                self._tainted = True
            signal = bool(self._blockers) and self._signal_blockers()
        for r in ready:
            r.lane.queue.put(r)
        if released:
            signal = self._release(released) or signal
        if own and self._sync and isinstance(failure.exc, KeyboardInterrupt):
            raise failure.exc  # Ctrl-C inside a sync-mode op is the user's, not the op's
        return signal

    def _release(self, released: list[Var]) -> bool:
        """Call the deletions of vars that went idle (outside the lock: they give memory back),
        then count them as done; True if a waiting blocker's condition now holds."""
        failures = []
        for var in released:
            fn, args = var.on_idle, var.on_idle_args
            var.on_idle, var.on_idle_args = None, ()
            try:
                fn(*args)
            except BaseException as exc:  # reported by wait_all, as a kernel's error would be
                failures.append(Failure("free", -1, exc))
        with self._lock:
            self._done += len(released)
            if failures:
                self._failures += failures
            return bool(self._blockers) and self._signal_blockers()

    # -- trace and shutdown --------------------------------------------------------------------
    def flush(self) -> None:
        """Nothing to read out: this engine appends each span to `log` as it happens (the
        compiled engine's `flush` reads its ops' spans out of its table)."""

    def spans(self) -> list[Span]:
        """Every span recorded so far, in seconds from `origin_ns`, ordered by start."""
        t0 = self.origin_ns
        spans = [Span(lane, name, op_id, (a - t0) * 1e-9, (b - t0) * 1e-9, kind)
                 for lane, kind, name, op_id, a, b in list(self.log)]
        spans.sort(key=lambda s: s.start)
        return spans

    def close(self, cancel: bool = False) -> None:
        """Let pending ops finish, stop the workers and join them. With `cancel`, or once a
        Ctrl-C has left one of this engine's blockers, drop the ops not yet started instead, and
        give running ones `JOIN_S` before abandoning them; a Ctrl-C during the drain does the
        same, then propagates. Idempotent. Failures that no blocker reported are a
        RuntimeWarning here."""
        if self._closed:
            return
        if not (cancel or self._interrupted or self._stopped):
            try:
                self._wait(lambda: self._done >= self._pushed)
            except KeyboardInterrupt:
                self._stop(cancel=True)
                raise
            except EngineStopped:  # cancelled meanwhile, by another thread
                pass
        self._stop(cancel or self._interrupted)

    def _stop(self, cancel: bool) -> None:
        # the state first, so that a second Ctrl-C in the joins below leaves nothing to hang on
        self._closed = True
        shutdown.unregister(self)
        if cancel and self._done < self._pushed:
            self._stopped = (f"the engine was stopped with {self._pushed - self._done} op(s) "
                             f"unfinished")
            with self._cond:
                self._cond.notify_all()  # blockers in other threads raise EngineStopped
            self._progress.counts[0] += 1  # ... and spinning ones look again
        me = threading.current_thread()
        for lane in self.lanes.values():
            for _ in lane.threads:
                lane.queue.put(_STOP)
        deadline = perf_counter() + JOIN_S
        for lane in self.lanes.values():
            for t in lane.threads:
                if t is not me:
                    t.join(max(0.0, deadline - perf_counter()) if cancel else None)
        self._warn_unreported()

    def _orphan(self, why: str) -> None:
        """In a forked child: this engine's workers stayed in the parent. Refuse everything with
        `why`; fresh locks (the parent's threads may have held these at the fork)."""
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._blockers, self._asleep, self._failures = [], 0, []
        self._closed, self._stopped, self._forked = True, why, True
        for lane in self.lanes.values():
            lane.threads, lane.queue = [], SimpleQueue()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.pending} pending"
        return f"Engine({self.mode}, {self.workers} worker(s), {state})"


def _nothing(*args) -> None:
    return None
