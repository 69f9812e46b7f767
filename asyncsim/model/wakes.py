"""The model's CPU ready queue and its idle workers (`asyncsim.model.host.Host` runs its workers
over one): which worker a ready op goes to, and which hand-overs wake a sleeping thread.

Assumptions, as realexec's compiled engine behaves (`realexec.engine.table`): a worker that
completes an op loops back to the queue at once; an idle worker spins `idle_spin` seconds before
it sleeps, and a sleeper is woken in the order it fell asleep (a futex). Units: seconds (SimPy's
clock).
"""

from __future__ import annotations

from collections import deque


class WakeQueue:
    """The CPU ready queue: ops in order, and the idle workers that a put hands an op (one each,
    as (event, idle since)); `wakes` counts those that had fallen asleep (the thread that put
    pays `profile.wake` for each). A worker idle for less than `idle_spin` is still spinning:
    it takes the op at once, without a wake-up (the event's value says so), before any asleep."""

    def __init__(self, env=None, idle_spin: float = 0.0):
        self.env, self.idle_spin = env, idle_spin
        self.items: deque = deque()
        self.sleepers: deque = deque()
        self.wakes = 0
        self.keeper = False  # a compiled worker is completing an op (`Host._compiled`)

    def put(self, item) -> None:
        self.items.append(item)
        if self.keeper:
            # the first op that a compiled worker's completion makes ready is its own next: it
            # loops back to the queue at once, long before a sleeper it wakes is running (405 of
            # the 408 streaming ops of `memory_barrier` ran on the worker of the product before
            # them on the 2-core Intel VM). The engine wakes a sleeper all the same when no
            # worker spins (`realexec.engine.table._enqueue`): it finds nothing, and spins
            # `idle_spin` before it sleeps again
            self.keeper = False
            if self.sleepers and not self._spinning():
                self.wakes += 1
                event, _ = self.sleepers.popleft()
                self.sleepers.append((event, self.env.now))
            return
        if self.sleepers:
            # a worker still spinning takes it (the latest to fall idle); else the longest asleep
            # wakes (a futex wakes in order). The engine wakes none while one spins: a push that
            # woke the sleeper anyway made every op of a small-op loop pay a wake-up
            event, since = self.sleepers[-1]
            spinning = self._spinning()
            if spinning:
                self.sleepers.pop()
            else:
                event, since = self.sleepers.popleft()
                self.wakes += 1
            event.succeed(spinning)

    def _spinning(self) -> bool:
        """The latest worker to fall idle is still spinning."""
        return self.idle_spin > 0 and self.env.now - self.sleepers[-1][1] < self.idle_spin


__all__ = ["WakeQueue"]
