"""Which earlier ops an op must wait for: MXNet's ThreadedVar rules, a pure function of program
order.

Both halves order ops with this one analysis: the simulator (`asyncsim.model.deps`) and the
compiled engine (`realexec.engine.native`). Ops are numbered by *tokens* that grow with program
order; each names the vars it reads and writes (any hashable objects). `Deps.add(token, reads,
writes)` returns the tokens of its predecessors:

- read-after-write: a read waits for the var's last write;
- write-after-read: a write waits for every read of the var since its last write;
- write-after-write: a write with no read since the last write waits for that write;
- consecutive reads never wait for each other, and ops on different vars never do.

Transitivity does the rest: each read since the last write waited for that write, so a write
that waits for those reads waits for every earlier op on the var. An op that reads and writes a
var (`x += 1`) counts as a write of it. Tokens may repeat in the answer (an op reading two vars
written by one op); a consumer counts each, which is harmless.

Bounded memory: a var read over and over but never written (a weight at inference) would keep
every reader's token. `finished(token)`, when given, says an op is done: a reader list that
reaches `PRUNE` entries, or twice, four times.. as many, drops the finished ones (a finished
predecessor orders nothing; the op being added is kept whatever `finished` says of it), so it
stays within a few times as long as the ops still running on it, and a list left long is not
weeded again before it has doubled (a few `finished` calls per read, however many run);
`low()`, when given, is a token below which every op is finished, so that the prune cuts that
part of a list (in token order) in one step.
`add_fresh` is `add` for the commonest op, one read and a write of a var no op has named yet,
which the compiled engine's fast push asks. No threads, no time: unit-tested on its own.
"""

from __future__ import annotations

from bisect import bisect_left

__all__ = ["Deps"]

PRUNE = 64  # a reader list this long is weeded of finished tokens


class Deps:
    """Per var: the token of its last write and the tokens of the reads since."""

    __slots__ = ("writer", "readers", "finished", "low", "skip")

    def __init__(self, finished=None, low=None):
        self.writer: dict = {}  # var -> token of its last write
        self.readers: dict = {}  # var -> [tokens of the reads since that write]
        self.finished = finished  # token -> bool, or None (never prune)
        # () -> a token below which every op is finished, or None: a prune cuts the readers below
        # it at once (a list is in token order) and asks `finished` only of the rest
        self.low = low
        # var -> the length its reader list must reach before it is weeded again (a list that
        # stayed long); stale after a write of the var, which only puts one weeding off
        self.skip: dict = {}

    def add(self, token: int, reads, writes) -> list[int]:
        """Register op `token` (larger than every token added before) and return the tokens it
        must wait for."""
        preds: list[int] = []
        writer, readers = self.writer, self.readers
        for v in reads:
            if v in writes:
                continue  # a write covers the read
            w = writer.get(v)
            if w is not None:
                preds.append(w)
            rs = readers.get(v)
            if rs is None:
                readers[v] = [token]
            elif rs[-1] != token:  # `dot(x, x)` reads x once
                rs.append(token)
                n = len(rs)
                if n >= PRUNE and not n & (n - 1) and self.finished:
                    self._prune(v, rs, token)
        for v in writes:
            rs = readers.pop(v, None)
            if rs:
                preds.extend(rs)  # each of them waited for the last write
            else:
                w = writer.get(v)
                if w is not None and w != token:  # != token: a var written twice by one op
                    preds.append(w)
            writer[v] = token
        return preds

    def add_fresh(self, token: int, read, write) -> int:
        """`add(token, (read,), (write,))` for the commonest op, `y = f(x)`: one read, and a
        `write` that no op has named yet (a fresh result, so nothing to wait for on it). Its one
        possible predecessor, the last write of `read`, or -1: the compiled engine's fast push
        asks this, where building and reading the general answer cost 0.15 us an op."""
        w = self.writer.get(read)
        rs = self.readers.get(read)
        if rs is None:
            self.readers[read] = [token]
        else:
            rs.append(token)
            n = len(rs)
            if n >= PRUNE and not n & (n - 1) and self.finished:
                self._prune(read, rs, token)
        self.writer[write] = token
        return -1 if w is None else w

    def _prune(self, var, rs: list, token: int) -> None:
        """Drop the finished tokens of `var`'s reader list `rs`, keeping `token` (the op being
        added). A `y = x + 1` loop with its worker keeping up asked `finished` of each of x's 64
        readers every 64 reads, a call per op; below `low` the list is cut in one step. A list
        left long (its reads still running) is not weeded again before it has doubled: with
        100-odd reads of x queued (`small_ops`' independent products), a prune at each return
        to 128 came every few reads and asked `finished` of every one of them, 13 us each time
        (one push in five)."""
        if len(rs) < self.skip.get(var, 0):
            return
        if self.low is not None:
            del rs[:bisect_left(rs, self.low())]
        done = self.finished
        rs[:] = [t for t in rs if t == token or not done(t)]
        self.skip[var] = 2 * len(rs)

    def last_write(self, var):
        """The token of the var's last write, or None: what a wait_to_read waits for."""
        return self.writer.get(var)

    def last_use(self, var):
        """The largest token that touches `var`, or None: once it and every op before it are
        done, nothing will touch the var again unless a later op names it."""
        rs = self.readers.get(var)
        if rs:
            return rs[-1]
        return self.writer.get(var)

    def users(self, var) -> list[int]:
        """The tokens a write of `var` pushed now would wait for (its deletion waits for them)."""
        rs = self.readers.get(var)
        if rs:
            return list(rs)
        w = self.writer.get(var)
        return [] if w is None else [w]

    def drop(self, var) -> list[int]:
        """`users(var)`, then `forget(var)`, in one step (a freed var's deletion waits for them)."""
        rs = self.readers.pop(var, None)
        w = self.writer.pop(var, None)
        if self.skip:
            self.skip.pop(var, None)
        if rs:
            return rs
        return [] if w is None else [w]

    def forget(self, var) -> None:
        """Drop a var that no op will name again (it was freed)."""
        self.writer.pop(var, None)
        self.readers.pop(var, None)
        self.skip.pop(var, None)
