"""The compiled engine: workers that never take the GIL per op, behind the same API as `Engine`.

The frontend (Python, t1) orders each op with `asyncsim.nd.deps.Deps`, the analysis the
simulator uses, and makes one compiled call (`table.push`) that records the op in a shared table
and queues it once its predecessors are done (`realexec.engine.pushes`). Each worker thread
enters the compiled loop `realexec.cpu.worker.work` for its life: it takes ready ops from its
lane's queue, runs the elementwise kernels, bias adds, samplers and 2-d products (numpy BLAS, by
address) itself (no Python object touched), stamps start and end, completes the op (dependents
become ready, on any lane) and wakes a blocker only when one sleeps. An op the loop cannot run
(a Python kernel: convolutions, reductions, a GPU lane's launch; or an op whose predecessor
failed) comes back to the thread's Python code, which runs it with the GIL and goes back in
(`realexec.engine.threads`). So small ops overlap each other and the frontend, as the chapters
assume. Idle workers and blockers wait without the GIL (`realexec.engine.sleep`).

Kept from `Engine` (`realexec.engine.core`), so either serves `realexec.session`: lanes
(`add_lane`, GPU lanes are Python ops), `mode='sync'` (each op runs inside its push; a
native op runs and stamps its record in one compiled call),
`max_inflight`, the blockers, errors (a failing op poisons the vars it writes, and so do the
ops after it, in Python; `OpError` at the next blocker on a poisoned var and at `wait_all`),
`delete_var`, the trace, Ctrl-C, close, cancel, interpreter exit and fork (`shutdown`).

Differences, and why:
- a var's deletion runs on the frontend thread, at a later push, blocker or `max_inflight` wait
  once every op using the var is done (`realexec.engine.frees`): the pool is Python, and the
  workers never take the GIL. Memory therefore comes back a few ops late, never early. The
  frontend hands its small dropped results over in runs (`delete_vars`, one call, one lock and
  one memory sample for up to 32 of them; `asyncsim.model.issue.DROP_BATCH`): 0.8 us less per op
  of a `y = x + 1` loop; and keeps a run's done results for its next outputs of their shape
  and dtype (`realexec.cpu.drops`: no lock, no count, no sample), 0.6-0.7 us
  less (4.8 to 4.2 us; sync mode 4.1 to 3.4, 2-core AMD EPYC VM);
- a var's last-write token is the analysis's, so `Var` needs no queues; the var objects are
  `realexec.engine.deps.Var` (their `failure` and `data`), or anything hashable;
- with `pin=True` CPU workers run the compiled loop pinned to a core each, so a woken worker
  runs on its own core at once instead of queueing 1-5 ms behind the worker that woke it
  (`_cores`): two workers drain two chains of 10 us ops 2x faster than one, where the OS's
  placement gave 1.0-1.4x. (Unpinned, a worker that the OS left on a busy worker's core now
  moves itself to a free one, and a sleeping worker is steered to one before it is woken,
  `realexec.engine.placement`: 1.78-1.86x, as pinned.) A worker running Python
  ops is unpinned meanwhile: pinned beside the frontend, it contended with it for that core
  and the GIL, and 8.1's imperative MLP (products and a graph op) ran 40% slower. An idle
  worker on the core the (awake) frontend pushes from does not spin (`sleep.idle`): pinned
  there, it took the ops the other worker could have run, and a loop of small ops pushed one at
  a time ran at ~9 us an op, not ~5.5.
  Not the default: over three calibrated collections the model's error was no better pinned
  (median 9.2%, max 61%, against 8.6% and 47%), the model knowing nothing of placement;
- the spans of the ops pushed here (each push's own "issue" span, and the "exec" span of each
  native op) stay in the table until read out in blocks (`realexec.engine.spans`): made per op
  on the push path, they cost 0.3-0.7 us of a 6 us `y = x + 1`. The table holds `cap` ops, and
  a push that would reuse a slot whose op is unfinished waits for it.
"""

from __future__ import annotations

import itertools
import os
import threading
from time import perf_counter_ns

from asyncsim.nd.deps import Deps
from realexec.cpu.worker import (
    GEMM_ADDRESSES,
    STAMPED_TYPES,
    UNARY_STAMPED_TYPES,
    run_stamped,
    run_unary_stamped,
)
from realexec.engine import layout, placement, shutdown, sleep
from realexec.engine import table as t
from realexec.engine.deps import Failure, OpError, Var
from realexec.engine.frees import FREE_POLL_NS, DeferredFrees
from realexec.engine.lanes import Lane, default_workers, settings
from realexec.engine.pushes import Pushes
from realexec.engine.shutdown import JOIN_S, EngineStopped
from realexec.engine.spans import BLOCK, TableSpans
from realexec.engine.threads import WorkerThreads

_POLL_NS = 50_000_000  # a sleeping blocker returns to Python this often (Ctrl-C gets in)
IDLE_SPIN_S = 50e-6  # an idle worker spins this long before it sleeps (the model's idle_spin)
CAPACITY = 1 << 12  # ops the table holds: a push waits for the op `CAPACITY` before it (the
# model's `Profile.table`)


class NativeEngine(Pushes, WorkerThreads, DeferredFrees, TableSpans, shutdown.Ending):
    """Vars, pushes, a compiled op table and worker lanes. A context manager, or `close()`."""

    def __init__(self, workers: int | None = None, mode: str = "async",
                 max_inflight: int | None = None, spin_s: float = 2e-3,
                 trace: bool | int = True, capacity: int = CAPACITY, pin: bool = False,
                 light: bool = False):
        self.workers = settings(workers, mode, max_inflight)
        self.mode, self.max_inflight = mode, max_inflight
        self._sync = mode == "sync"
        # small results of the fast push kept in compiled state (the backend's: realexec.cpu.light;
        # unthrottled only: its push makes no `max_inflight` wait)
        self.light = light and max_inflight is None
        self._spin_ns = int(spin_s * 1e9)
        if capacity < 2 or capacity & (capacity - 1):
            raise ValueError(f"capacity must be a power of two, at least 2, got {capacity}")
        self.cap = capacity
        self._harvest_every = min(2 * BLOCK, capacity // 2)
        self._buf, self.state = layout.new_state(capacity, int(IDLE_SPIN_S * 1e9),
                                                 default_workers(), GEMM_ADDRESSES)
        self._push = t.entry(t.push, t.PUSH_TYPES)
        self._push_unary = t.entry(t.push_unary, t.PUSH_UNARY_TYPES)
        self._run = t.entry(run_stamped, STAMPED_TYPES) if self._sync else None
        self._run_unary = (t.entry(run_unary_stamped, UNARY_STAMPED_TYPES) if self._sync
                           else None)
        if not pin and hasattr(os, "sched_getaffinity"):  # (pinned workers stay put)
            placement.allow(self.state, os.sched_getaffinity(0))
        self._done = _done_in(self._buf, capacity)  # a closure: no reference cycle to self
        self._deps = Deps(finished=self._done, low=_low_in(self._buf))
        self._ops: list = [None] * capacity  # per slot: (name, op_id, reads, writes, fn, args)
        self._next = 0  # the next op's token
        self._harvested = 0  # ops below this token have been read out of the table
        self._next_harvest = self._harvest_every  # the push that reads spans out next
        # deleted vars waiting for their ops: a heap of (last user's token, seq, users, fn, args)
        self._frees: list = []
        self._free_seq = itertools.count()  # ties: in order of deletion
        self._scanned = 0  # ops done when the pending deletions were last looked at all
        # ops done when the pending deletions were last looked at: a push looks again only
        # once another op has finished (none can have become free meanwhile)
        self._frees_seen = -1
        self._failures: list[Failure] = []
        self._observed: set[int] = set()
        self._tainted = False  # a var is poisoned: pushes look for inherited failures
        # vars lent to light pushes, and how one comes back (set by the backend: realexec.cpu.light)
        self._lent: dict = {}
        self._unlend = None
        self._lights_out = _nothing  # ends the light pushes: the engine closed, a var poisoned
        self._closed = False
        self._stopped: str | None = None
        self._interrupted = False
        self._forked = False
        self._asleep = 0
        self._lock = threading.RLock()  # failures, the Python-side records of failed ops
        self.lanes: dict[str, Lane] = {}
        self._lane_index: dict[str, int] = {}
        self._labels: list[str] = []  # a native span's lane, by the worker index it stamps
        # spans as (lane, kind, name, op_id, start_ns, end_ns), in no set order: the
        # frontend's and Python ops' as they happen, native ops' once read out (`flush`)
        self.log = shutdown.trace_log(trace)
        self._log = self.log
        self._trace = trace
        self._blocks: list[tuple] = []  # spans read out of the table, not yet in the log
        self._names: list[str] = []  # op names, by the number the table keeps (`_number`)
        self._numbers: dict[str, int] = {}
        self.origin_ns = perf_counter_ns()
        self._cores = _cores() if pin else []
        self.add_lane("cpu", self.workers)
        shutdown.register(self)

    # -- lanes ---------------------------------------------------------------------------------
    def add_lane(self, name: str, workers: int = 1, kind: str = "exec", labels=None,
                 log: bool = True, thread_context=None) -> Lane:
        """As `Engine.add_lane`; a lane's threads run the compiled loop."""
        if name in self.lanes:
            raise ValueError(f"lane {name!r} exists")
        if len(self.lanes) >= layout.MAX_LANES:
            raise ValueError(f"at most {layout.MAX_LANES} lanes")
        lane = Lane(name, workers, kind, labels, log)
        self._lane_index[name] = len(self.lanes)
        self.lanes[name] = lane
        if not self._sync:
            for i, label in enumerate(lane.labels):
                self._labels.append(label)
                core = self._cores[i % len(self._cores)] if name == "cpu" and self._cores else -1
                th = threading.Thread(target=self._work, daemon=True, name=f"realexec-{label}",
                                      args=(lane, label, len(self._labels) - 1, thread_context,
                                            core))
                lane.threads.append(th)
                th.start()
        else:
            self._labels.append(lane.labels[0] if lane.labels else name)
        return lane

    def new_var(self, name: str = "", data=None) -> Var:
        return Var(name, data)

    # -- blockers ------------------------------------------------------------------------------
    def wait_for_var(self, var) -> None:
        """Return when every write pushed on `var` so far has finished; OpError if poisoned."""
        self.wait_for_token(self._deps.last_write(var), var)

    def wait_for_token(self, token: int | None, var=None) -> None:
        """Return when op `token` (None or -1: none; a light result's last write, which no
        Python var records: `realexec.cpu.light`) has finished; OpError if `var` (the var it
        writes) is poisoned."""
        if self._forked:
            raise EngineStopped(self._stopped)
        if token is not None and token >= self._buf[layout.H_LOW]:
            self._wait(0, token)
        if self._frees:
            self._run_frees()
        failure = getattr(var, "failure", None)
        if failure is not None:
            self._observed.add(id(failure))
            raise OpError.of(failure) from failure.exc

    def wait_all(self) -> None:
        """Return when every op pushed so far has finished and the memory of deleted vars is
        back; OpError for failures not yet reported by an earlier wait_all."""
        if self._forked:
            raise EngineStopped(self._stopped)
        target = self._next
        if self._buf[layout.H_DONE] < target:
            self._wait(1, target)
        self._run_frees(every=self._buf[layout.H_DONE] >= self._next)
        self._interrupted = False
        with self._lock:
            failures, self._failures = self._failures, []
        if failures:
            raise OpError.of(failures[0], len(failures) - 1) from failures[0].exc

    @property
    def pending(self) -> int:
        return self._next - self._buf[layout.H_DONE]

    @property
    def blocked(self) -> bool:
        return self._asleep > 0

    def _wait(self, kind: int, target: int) -> None:
        """Spin without the GIL for spin_s, then sleep in compiled calls of at most 50 ms, so a
        Ctrl-C gets in between them; EngineStopped if the engine can no longer get there.
        While deleted vars wait for their ops, it wakes every millisecond instead and gives
        back the memory of those done (the frontend is the only thread that frees: memory held
        through a long waitall made the live-memory curve a plateau where the model's falls)."""
        if self._stopped is not None:
            raise EngineStopped(self._stopped)
        state = self.state
        try:
            if sleep.wait(state, kind, target, self._spin_ns, 0):
                return
            self._asleep += 1
            try:
                while True:
                    if self._frees:
                        done = sleep.wait(state, kind, target, 0, FREE_POLL_NS)
                        self._run_frees()
                        if done:
                            return
                    elif sleep.wait(state, kind, target, 0, _POLL_NS):
                        return
                    if self._stopped is not None:
                        raise EngineStopped(self._stopped)
            finally:
                self._asleep -= 1
        except KeyboardInterrupt:
            self._interrupted = True
            raise

    # -- shutdown --------------------------------------------------------------------------------
    def close(self, cancel: bool = False) -> None:
        """As `Engine.close`: drain (or with `cancel` drop what has not started), stop, join."""
        if self._closed:
            return
        if not (cancel or self._interrupted or self._stopped):
            try:
                self._wait(1, self._next)
            except KeyboardInterrupt:
                self._stop(cancel=True)
                raise
            except EngineStopped:
                pass
        self._stop(cancel or self._interrupted)

    def _stop(self, cancel: bool) -> None:
        self._closed = True
        self._lights_out()
        shutdown.unregister(self)
        if cancel and self._buf[layout.H_DONE] < self._next:
            self._stopped = (f"the engine was stopped with {self._next - self._buf[layout.H_DONE]} "
                             f"op(s) unfinished")
        self._buf[layout.H_STOP] = 1
        sleep.wake_all(self.state, len(self.lanes))
        me = threading.current_thread()
        deadline = perf_counter_ns() + int(JOIN_S * 1e9)
        for lane in self.lanes.values():
            for th in lane.threads:
                if th is not me:
                    th.join(max(0.0, (deadline - perf_counter_ns()) * 1e-9) if cancel else None)
        if self._stopped is None:
            self._run_frees(every=True)
        self.flush()
        self._shrink()
        self._warn_unreported()

    def _shrink(self) -> None:
        """Give the table back (a few MiB; the frontend's objects form cycles that only a
        full collection frees, and a test may open thousands of sessions before one runs):
        a table of two slots with the same counters stands in for it. A worker abandoned in a
        long kernel keeps the old one alive until it returns."""
        buf, state = layout.new_state(2, 0)
        for h in (layout.H_NEXT, layout.H_DONE, layout.H_LOW, layout.H_STOP):
            buf[h] = self._buf[h]
        self._buf, self.state = buf, state
        self._ops, self._deps = [None] * 2, Deps()
        self.cap = 2
        self._done = _done_in(buf, 2)

    def _orphan(self, why: str) -> None:
        """In a forked child: the workers stayed in the parent; refuse everything with `why`."""
        self._lock = threading.RLock()
        self._failures, self._frees = [], []
        self._closed, self._stopped, self._forked = True, why, True
        self._lights_out()
        for lane in self.lanes.values():
            lane.threads = []

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.pending} pending"
        return f"NativeEngine({self.mode}, {self.workers} worker(s), {state})"


def _cores() -> list[int]:
    """The cores CPU workers are pinned to with `pin=True`, one each in turn (Linux; elsewhere
    none); why, in the module docstring."""
    if not hasattr(os, "sched_setaffinity"):
        return []
    return sorted(os.sched_getaffinity(0))


def _low_in(buf):
    """The table's low-water mark, read through `buf` (every op below it is done), for `Deps`
    to prune reader lists by. A closure over the buffer, not the engine (see `_done_in`)."""
    low = layout.H_LOW

    def below() -> int:
        return buf[low]

    return below


def _done_in(buf, cap: int):
    """`table.is_done` for a table of `cap` slots, read from Python through `buf` (cheaper than
    a compiled call for one token). A closure, not a method: `Deps` keeps it, and a bound
    method would make a reference cycle that only the cyclic GC frees (the table is MiBs)."""
    low, mask, state, done = layout.H_LOW, cap - 1, layout.F_STATE, layout.DONE

    def finished(token: int) -> bool:
        if token < buf[low]:
            return True
        at = layout.OPS + (token & mask) * layout.STRIDE
        return buf[at + layout.F_TOKEN] != token or buf[at + state] == done

    return finished


def _nothing() -> None:
    """`_lights_out` of an engine without light results."""
