"""The host's cores in the SimPy model, shared by the threads that want them (`model.host`).

When more threads want to run than there are cores (the frontend and two busy workers on a
2-core machine), the operating system's scheduler gives each a share of the cores in turn. Over
the time an op takes (tens of microseconds to milliseconds: longer than the scheduler's switches,
which come every few milliseconds, only at the long end) that is processor sharing. A thread
counts as runnable while it has work to do: the frontend while it issues (not while it waits in
a blocker, a `max_inflight` slot or the engine's table, or for the GIL), a worker while it runs
an op (not while idle, or waiting for the GIL).

The frontend, while it issues, keeps a core of its own and the runnable workers share the other
`count - 1` (each at `(count - 1) / w` of a core when w > count - 1): realexec's engine keeps a
worker off the pushing frontend's core (`realexec.engine.placement`). Measured on the 2-core AMD
VM (`hybridize_mlp`'s 1000 hybridized calls, a 55 us graph each, pushed every ~48 us): two
workers ran them in 53.5 ms, one in 56.2-56.5 ms, and of two workers' graphs only 121 of 1000
overlapped the one before; equal shares for all three threads (the rule before) slowed the
frontend's issue to 2/3 of its speed instead. Where the frontend waits, or with one core, every
runnable thread gets `count / n` of a core.

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
        self.front = 1  # the frontend is runnable (1) or not (0)
        self.workers = 0  # runnable workers
        self.working: set = set()  # the processes inside `work` now

    def share_of(self, front: bool) -> float:
        """The fraction of a core the frontend (`front`) or each runnable worker gets now."""
        runnable = self.front + self.workers
        if runnable <= self.count:
            return 1.0
        if self.front and self.count > 1:  # the frontend keeps its core (module docstring)
            return 1.0 if front else (self.count - 1) / self.workers
        return self.count / runnable

    @property
    def share(self) -> float:
        """The fraction of a core each runnable worker gets now."""
        return self.share_of(False)

    def join(self, front: bool = False) -> None:
        """A thread (the frontend, or a worker) becomes runnable."""
        self._move(1, front)

    def leave(self, front: bool = False) -> None:
        """A runnable thread blocks or goes idle."""
        self._move(-1, front)

    def _move(self, step: int, front: bool) -> None:
        before = self.share_of(True), self.share_of(False)
        if front:
            self.front += step
        else:
            self.workers += step
        if (self.share_of(True), self.share_of(False)) != before:
            for process in self.working:  # every thread at work re-times what it has left
                process.interrupt()

    def work(self, seconds: float, front: bool = False):
        """Generator: `seconds` of a runnable thread's work, at its share of the cores."""
        env, left = self.env, seconds
        process = env.active_process
        while left > EPSILON:
            share, start = self.share_of(front), env.now
            self.working.add(process)
            try:
                yield env.timeout(left / share)
                left = 0.0
            except Interrupt:
                left -= (env.now - start) * share
            finally:
                self.working.discard(process)
