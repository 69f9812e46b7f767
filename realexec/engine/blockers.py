"""The Python-thread engine's blockers (`realexec.engine.core.Engine` mixes them in): waiting for
a var, for every op, and for room under `max_inflight`, and the workers' side of waking them.

Waiting: a blocker leaves its condition in `_blockers`, and the worker that finishes an op
tests those conditions (a few attribute reads, under the engine's lock) instead of letting each
blocker test its own: a blocker that took the GIL at every op finished cost each op a GIL
hand-over and a thread's wake-up (a 100-product backlog on one worker ran 1.5x slower while the
frontend spun). The blocker first spins for `spin_s` *without the GIL* (`realexec.engine.spin`),
watching a counter that the worker bumps when a condition holds, as the last thing before its queue
lets go of the GIL; so the frontend takes the GIL back, free, within microseconds. Then it falls
back to a Condition with a short timeout, so Ctrl-C is delivered, and is notified only when a
condition holds.

`Blockers` needs the engine's state: `_lock`, `_cond`, `_blockers`, `_asleep`, `_progress`,
`_spin_ns`, `_pushed`, `_done`, `_inflight`, `max_inflight`, `_failures`, `_observed`,
`_stopped`, `_interrupted`, `_forked` and `log` (set by `Engine.__init__`). Units: ns
(`perf_counter_ns`), seconds for `_POLL_S`.
"""

from __future__ import annotations

from time import perf_counter_ns

from realexec.engine.deps import OpError, Var
from realexec.engine.lanes import FRONTEND
from realexec.engine.shutdown import EngineStopped

_POLL_S = 0.05  # a sleeping blocker re-checks this often (and lets KeyboardInterrupt in)


class Blockers:
    """`throttle`, `wait_for_var`, `wait_all`, `pending`, `blocked`, and `_signal_blockers`
    for the workers."""

    def throttle(self, name: str = "op", op_id: int = -1) -> None:
        """Block while `max_inflight` ops are pending (a "wait" span named "max_inflight").

        `push` calls it; a caller that reserves memory before pushing calls it first, so the
        cap also bounds memory."""
        cap = self.max_inflight
        if cap is None or self._inflight < cap:
            return
        start = perf_counter_ns()
        self._wait(self._has_room)
        self.log.append((FRONTEND, "wait", "max_inflight", op_id, start, perf_counter_ns()))

    def wait_for_var(self, var: Var) -> None:
        """Return when every write pushed on `var` so far has finished; OpError if poisoned."""
        if self._forked:
            raise EngineStopped(self._stopped)
        target = var.writes_pushed
        if var.writes_done < target:
            self._wait(lambda: var.writes_done >= target)
        if var.failure is not None:
            self._observed.add(id(var.failure))
            raise OpError.of(var.failure) from var.failure.exc

    def wait_all(self) -> None:
        """Return when every op pushed so far has finished; OpError for failures not yet
        reported by an earlier wait_all (MXNet's WaitForAll drops them: apache/mxnet#13234)."""
        if self._forked:
            raise EngineStopped(self._stopped)
        target = self._pushed
        if self._done < target:
            self._wait(lambda: self._done >= target)
        self._interrupted = False  # nothing left that an interrupted wait would have dropped
        self._raise_failures()

    @property
    def pending(self) -> int:
        """Ops pushed and not yet finished (frees excluded)."""
        return self._inflight

    @property
    def blocked(self) -> bool:
        """A thread is asleep in a blocker (past its spin), waiting for ops to finish."""
        return self._asleep > 0

    def _has_room(self) -> bool:
        return self._inflight < self.max_inflight

    def _raise_failures(self) -> None:
        with self._lock:
            failures, self._failures = self._failures, []
        if failures:
            raise OpError.of(failures[0], len(failures) - 1) from failures[0].exc

    def _wait(self, done) -> None:
        """Return when `done()` holds: spin without the GIL for up to spin_s until a worker
        signals that a blocker's condition holds (`realexec.engine.spin`), then sleep on the
        condition in short timeouts. EngineStopped if the engine can no longer get there; a
        Ctrl-C meanwhile marks the engine interrupted (its close() then cancels)."""
        if done():
            return
        if self._stopped is not None:
            raise EngineStopped(self._stopped)
        with self._lock:  # registered before the spin reads the counter: no signal is missed
            self._blockers.append(done)
        try:
            if self._progress.spin(done, perf_counter_ns() + self._spin_ns):
                return
            with self._cond:
                self._asleep += 1
                try:
                    while not done():
                        if self._stopped is not None:
                            raise EngineStopped(self._stopped)
                        self._cond.wait(_POLL_S)
                finally:
                    self._asleep -= 1
        except KeyboardInterrupt:
            self._interrupted = True
            raise
        finally:
            with self._lock:
                self._blockers.remove(done)

    def _signal_blockers(self) -> bool:
        """Whether a waiting blocker's condition now holds (the lock held); if so, wake the
        blockers asleep on _cond (a spinning one sees the counter that the caller bumps)."""
        for done in self._blockers:
            if done():
                if self._asleep:
                    self._cond.notify_all()
                return True
        return False
