"""The host's cores in the SimPy model, shared by the threads that want them (`model.host`).

When more threads want to run than there are cores (the frontend and two busy workers on a
2-core machine), the operating system's scheduler gives each a share of the cores in turn. Over
the time an op takes (tens of microseconds to milliseconds: longer than the scheduler's switches,
which come every few milliseconds, only at the long end) that is processor sharing: each of n
runnable threads runs at `count / n` of a core's speed, and at full speed when n <= count. A
thread counts as runnable while it has work to do: the frontend while it issues (not while it
waits in a blocker, a `max_inflight` slot or the engine's table, or for the GIL), a worker while
it runs an op (not while idle, or waiting for the GIL).

`Cores.work(seconds)` spends `seconds` of one runnable thread's work at the share it gets: a
plain timeout at the share it finds, and when the share changes meanwhile (a thread comes or
goes across the count), every thread at work is interrupted and waits again for what is left
at the new share. The work is conserved, so whatever the threads' order, the cores finish the
same total; and while the runnable threads stay within the cores, as they mostly do, a thread's
work costs one timeout, as it would with no cores modelled.

Units: seconds of work at a full core's speed, simulated seconds.
"""

from __future__ import annotations

from simpy import Interrupt

__all__ = ["Cores", "elapse"]

EPSILON = 1e-15  # seconds of work left that count as none (floating-point rounding)


def elapse(env, seconds: float):
    """Generator: `seconds` of a thread's work where no cores are shared: one timeout."""
    yield env.timeout(seconds)


class Cores:
    """`count` cores shared by the runnable threads; the frontend is runnable from the start."""

    def __init__(self, env, count: int):
        self.env, self.count = env, count
        self.runnable = 1
        self.working: set = set()  # the processes inside `work` now

    @property
    def share(self) -> float:
        """The fraction of a core each runnable thread gets now."""
        return min(1.0, self.count / self.runnable) if self.runnable else 1.0

    def join(self) -> None:
        """A thread becomes runnable."""
        self._move(1)

    def leave(self) -> None:
        """A runnable thread blocks or goes idle."""
        self._move(-1)

    def _move(self, step: int) -> None:
        before = self.share
        self.runnable += step
        if self.share != before:  # every thread at work re-times what it has left
            for process in self.working:
                process.interrupt()

    def work(self, seconds: float):
        """Generator: `seconds` of a runnable thread's work, at its share of the cores."""
        env, left = self.env, seconds
        process = env.active_process
        while left > EPSILON:
            share, start = self.share, env.now
            self.working.add(process)
            try:
                yield env.timeout(left / share)
                left = 0.0
            except Interrupt:
                left -= (env.now - start) * share
            finally:
                self.working.discard(process)
