"""DepTracker: the simulator's per-var dependency rules (MXNet's ThreadedVar), as pure bookkeeping.

Ops are pushed in issue order with the vars they read and write; each var behaves as a queue:

- read-after-write: a read waits for every earlier write of the var;
- write-after-read: a write waits for every earlier read (issued since the previous write);
- write-after-write: a write waits for the previous write;
- consecutive reads of a var do not wait for each other, and ops on different vars never do.

An op that reads and writes the same var (`x += 1`) counts as a write of it. `push` says whether an
op may start at once; `complete` says which waiting ops became ready, in issue order. Tokens are
any ints that grow with issue order (the simulator uses the op's position in the program).

How, in O(1) per var touched: each var remembers its last unfinished write and an *epoch*, the
count of unfinished reads issued since that write. A write closes the epoch: if reads are still
running it waits for the epoch to drain (those reads waited for the previous write, so that one is
done too), else it waits for the previous write directly. Nothing here knows about time or SimPy.
"""

from __future__ import annotations


class _Epoch:
    __slots__ = ("reads", "writer")

    def __init__(self):
        self.reads = 0  # unfinished reads issued since the var's last write
        self.writer = None  # the token of a write waiting for those reads


class DepTracker:
    __slots__ = ("_writer", "_epoch", "_waiting", "_after", "_epochs_of", "_writes_of")

    def __init__(self):
        self._writer: dict = {}  # var -> token of its last write, while that write is unfinished
        self._epoch: dict = {}  # var -> _Epoch of reads since that write
        self._waiting: dict = {}  # token -> number of things it still waits for
        self._after: dict = {}  # token of a write -> tokens waiting for it to finish
        self._epochs_of: dict = {}  # token of a read -> epochs it counts in
        self._writes_of: dict = {}  # token -> vars it writes

    def push(self, token: int, reads, writes) -> bool:
        """Register an op issued now; True when it may start at once."""
        waits = 0
        after = self._after
        for var in writes:
            epoch = self._epoch.pop(var, None)
            if epoch is not None and epoch.reads:
                epoch.writer = token  # write-after-read
                waits += 1
            else:
                last = self._writer.get(var)
                if last is not None:  # write-after-write
                    after.setdefault(last, []).append(token)
                    waits += 1
            self._writer[var] = token
        self._writes_of[token] = writes
        epochs = None
        for var in reads:
            if var in writes:
                continue
            last = self._writer.get(var)
            if last is not None:  # read-after-write
                after.setdefault(last, []).append(token)
                waits += 1
            epoch = self._epoch.get(var)
            if epoch is None:
                epoch = self._epoch[var] = _Epoch()
            epoch.reads += 1
            if epochs is None:
                epochs = self._epochs_of[token] = []
            epochs.append(epoch)
        if waits:
            self._waiting[token] = waits
            return False
        return True

    def complete(self, token: int) -> list[int]:
        """The op `token` finished; the ops that became ready, in issue order."""
        ready = []
        waiting = self._waiting
        # the ops this one held up: writes after it, and a write waiting for its epoch to drain
        unblocked = list(self._after.pop(token, ()))
        for epoch in self._epochs_of.pop(token, ()):
            epoch.reads -= 1
            if not epoch.reads and epoch.writer is not None:
                unblocked.append(epoch.writer)
        for other in unblocked:
            left = waiting[other] - 1
            if left:
                waiting[other] = left
            else:
                del waiting[other]
                ready.append(other)
        writer = self._writer
        for var in self._writes_of.pop(token):
            if writer.get(var) == token:
                del writer[var]
        if len(ready) > 1:
            ready.sort()
        return ready

    def last_write(self, var):
        """The token of the var's last unfinished write, or None: what a wait_to_read waits for
        (writes of one var finish in order, so the last one finishing means all have)."""
        return self._writer.get(var)

    def forget(self, var) -> None:
        """Drop the bookkeeping of a var that nothing touches any more (it was freed)."""
        epoch = self._epoch.get(var)
        if epoch is not None and not epoch.reads:
            del self._epoch[var]

    def waiting(self) -> int:
        """How many pushed ops are not ready yet."""
        return len(self._waiting)
