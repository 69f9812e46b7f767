"""The host's cores in the SimPy model, shared by the threads that want them (`model.host`).

When more threads want to run than there are cores (the frontend and two busy workers on a
2-core machine), the operating system's scheduler gives each a share of the cores in turn. Over
the time an op takes (tens of microseconds to milliseconds: longer than the scheduler's switches,
which come every few milliseconds, only at the long end) that is processor sharing: each of n
runnable threads runs at `count / n` of a core's speed, and at full speed when n <= count. A
thread counts as runnable while it has work to do: the frontend while it issues (not while it
waits in a blocker, a `max_inflight` slot or the engine's table, or for the GIL), a worker while
it runs an op (not while idle, or waiting for the GIL).

`Cores.work(seconds)` spends `seconds` of one runnable thread's work at the share it gets,
following every change of the share as threads come and go: the work is conserved, so whatever
the threads' order, the cores finish the same total. A share that does not change (n stays
within the cores) costs no event at all.

Units: seconds of work at a full core's speed, simulated seconds.
"""

from __future__ import annotations

__all__ = ["Cores"]

EPSILON = 1e-15  # seconds of work left that count as none (floating-point rounding)


class Cores:
    """`count` cores shared by the runnable threads; the frontend is runnable from the start."""

    def __init__(self, env, count: int):
        self.env, self.count = env, count
        self.runnable = 1
        self.changed = env.event()  # succeeds (and is replaced) when the share changes

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
        if self.share != before:
            changed, self.changed = self.changed, self.env.event()
            changed.succeed()

    def work(self, seconds: float):
        """Generator: `seconds` of a runnable thread's work, at its share of the cores."""
        env, left = self.env, seconds
        while left > EPSILON:
            share, start, changed = self.share, env.now, self.changed
            end = start + left / share
            yield env.timeout(end - start) | changed
            if env.now >= end:
                return
            left -= (env.now - start) * share
