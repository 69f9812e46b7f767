"""DepTracker: the simulator's readiness bookkeeping over the project's one dependency analysis.

Which earlier ops an op waits for (read-after-write, write-after-read, write-after-write; reads
never wait for reads, ops on different vars never wait) comes from `asyncsim.nd.deps.Deps`, the
same rules the compiled engine follows. This module only turns those predecessors into readiness:
each pushed op counts its unfinished predecessors, each op lists the ops waiting for it, and
completing an op releases those whose count reaches zero.

Ops are pushed in issue order with the vars they read and write. `push` says whether an op may
start at once; `complete` says which waiting ops became ready, in issue order. Tokens are ints that
grow with issue order (the simulator uses the op's position in the program). Nothing here knows
about time or SimPy.
"""

from __future__ import annotations

from asyncsim.nd.deps import Deps


class DepTracker:
    __slots__ = ("_deps", "_live", "_after", "_blocked", "_forget_after")

    def __init__(self):
        live = self._live = {}  # token -> unfinished predecessors, for every unfinished op
        self._after: dict = {}  # token -> tokens waiting for it to finish
        self._blocked = 0  # unfinished ops whose count is not zero yet
        self._forget_after: dict = {}  # token -> freed vars to forget once it finishes
        # a finished op orders nothing any more, so Deps may drop it from a long reader list
        self._deps = Deps(finished=lambda token: token not in live)

    def push(self, token: int, reads, writes) -> bool:
        """Register an op issued now; True when it may start at once."""
        live, after = self._live, self._after
        # counted as unfinished before Deps sees it, else pruning could drop it as a reader
        live[token] = 0
        waits = 0
        # Deps may name a predecessor twice (one op writing two vars this op reads)
        for pred in set(self._deps.add(token, reads, writes)):
            if pred in live and pred != token:
                after.setdefault(pred, []).append(token)
                waits += 1
        if waits:
            live[token] = waits
            self._blocked += 1
            return False
        return True

    def complete(self, token: int) -> list[int]:
        """The op `token` finished; the ops that became ready, in issue order."""
        live = self._live
        del live[token]
        ready = []
        for other in self._after.pop(token, ()):
            left = live[other] - 1
            live[other] = left
            if not left:
                ready.append(other)
        self._blocked -= len(ready)
        for var in self._forget_after.pop(token, ()):
            self.forget(var)
        ready.sort()
        return ready

    def last_write(self, var):
        """The token of the var's last unfinished write, or None: what a wait_to_read waits for
        (writes of one var finish in order, so the last one finishing means all have)."""
        token = self._deps.last_write(var)
        return token if token in self._live else None

    def forget(self, var) -> None:
        """Drop the bookkeeping of a var that was freed. While ops on it are unfinished its
        entry must stay (a later write would otherwise not wait for them), so it is dropped
        when they have all finished."""
        # every op on the var is an ancestor of its users, so their finishing means all did
        pending = [t for t in self._deps.users(var) if t in self._live]
        if pending:
            self._forget_after.setdefault(pending[0], []).append(var)
        else:
            self._deps.forget(var)

    def waiting(self) -> int:
        """How many pushed ops are not ready yet."""
        return self._blocked
