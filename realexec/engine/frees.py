"""The compiled engine's deleted vars: their memory goes back once every op on them is done.

A deleted var's buffer may go back to the pool only when every op touching it has finished
(DESIGN.md's rule). MXNet pushes that deletion as one more write on the var; here the workers
never take the GIL and the pool is Python, so the deletion runs on the frontend thread instead:
`delete_var` gives the buffer back at once when the var's ops are done (below the low-water mark,
or each of them done), and otherwise keeps it pending until a later push, blocker or
`max_inflight` wait finds them done (`_run_frees`). Memory therefore comes back a few ops late,
never early. `delete_vars` takes a run of deleted vars at once (the frontend's small dropped
results), their free buffers given back in one call.

`DeferredFrees` is a part of `realexec.engine.native.NativeEngine`, which sets the state its
methods use: `_deps` (the dependency analysis, whose `drop` names a var's users), `_buf` (the
table's counters, read through an array: `H_DONE`, `H_LOW`), `_done` (token -> finished),
`_closed`, `_lock` and `_failures` (a failing give-back is reported by `wait_all`, as a kernel's
error would be), and the pending deletions: `_frees` (a heap), `_free_seq`, `_scanned`,
`_frees_seen`. Units: tokens (op numbers in push order).
"""

from __future__ import annotations

import heapq

from asyncsim.model.issue import FREE_POLL
from realexec.engine import layout
from realexec.engine.deps import Failure

# a blocker waiting while deleted vars wait for their ops wakes this often, to give back what is
# done (waking at every op finished instead took the GIL between every two ops of a worker's
# Python run: 8.1's imperative MLP ran 4x slower); the model prices the looks with the same
FREE_POLL_NS = round(FREE_POLL * 1e9)
_RESCAN = 32  # finished ops between two looks at every pending deletion (`_run_frees`) ...
_SHARE = 16  # ... and at least a 16th as many as are pending: at most 16 looks per finished op


class DeferredFrees:
    """`delete_var` and the pending deletions it leaves for later."""

    def delete_var(self, var, fn=None, args=()) -> None:
        """Call `fn(*args)` (give the var's memory back) once every op on `var` is done."""
        users = self._deps.drop(var)  # in push order: the last is the largest token
        if fn is not None and not self._defer(users, self._buf[layout.H_LOW], fn, args):
            fn(*args)

    def delete_vars(self, vars_, give_back, one) -> None:
        """`delete_var` for several vars whose memory is their `data`: the vars free at once go
        back in one call, `give_back(vars)`; the rest waits, each for `one(its data)`. The
        frontend hands its dropped small results over so (`realexec.cpu.drops`). In sync mode
        all of them go at once, unasked: 0.15 us less per op of a `y = x + 1` loop (3.3 us,
        2-core AMD EPYC VM)."""
        if self._sync:  # every op is done when its push returns; none is in the analysis
            self._give_back(give_back, (vars_,))
            return
        ready = []
        drop, low = self._deps.drop, self._buf[layout.H_LOW]
        for var in vars_:
            users = drop(var)
            # the common case first, `_defer`'s own first test: every user below the mark
            if not users or users[-1] < low or not self._defer(users, low, one, (var.data,)):
                ready.append(var)
        if ready:
            self._give_back(give_back, (ready,))

    def _defer(self, users, low: int, fn, args) -> bool:
        """Keep `fn(*args)` pending until every op of `users` (tokens in push order) is done,
        and say so; False when they all are (below the low-water mark `low`, every op is: no
        call per user, a free per op) or nothing runs any more."""
        if not users or users[-1] < low or self._closed or all(map(self._done, users)):
            return False
        heapq.heappush(self._frees, (users[-1], next(self._free_seq), users, fn, args))
        return True

    def _run_frees(self, every: bool = False) -> None:
        """Give back the memory of deleted vars whose ops are all done (`every`: all of them,
        nothing runs any more). The pending ones wait in the order of their last user's token,
        which is about the order ops finish in, so a call looks at the ones it gives back and
        at one more: a blocked frontend calls this every millisecond, and scanning every
        pending deletion each time (a thousand, in a backlog of batches) took a fifth of a
        core from the workers. Ops may finish far out of that order, though: without a blocker
        per batch, the first batch's chain waits behind every batch's sampler, so its deletions
        held those of the 49 batches after it for 150 ms, and the live memory stayed at its peak
        until the end where the model's fell. So once `_RESCAN` more ops have finished since
        the last look, and at least a `_SHARE`th as many as deletions are pending, every pending
        deletion is looked at. Without the second rule a small MLP's training loop, pushed
        ahead of its worker, scanned a backlog of 2,600 pending deletions every 32 ops, holding
        the GIL that the worker's Python ops waited for: 1.22-1.38 ms a step, 0.91-0.93 with it
        (2-core Xeon VM); `memory_no_barrier`'s live memory falls as early as before (a quarter
        instead of a 16th delayed its fall by 30-40 ms)."""
        frees, done, buf = self._frees, self._done, self._buf
        # read before the looks: an op finishing during them moves it, so the next push looks
        # again (a finished op's state is written before H_DONE moves)
        self._frees_seen = buf[layout.H_DONE]
        while frees and _finished(frees[0], every, buf, done):
            _, _, _, fn, args = heapq.heappop(frees)
            self._give_back(fn, args)
        if frees and buf[layout.H_DONE] - self._scanned >= max(_RESCAN, len(frees) // _SHARE):
            self._scanned = buf[layout.H_DONE]
            kept = []
            for entry in frees:
                if _finished(entry, every, buf, done):
                    self._give_back(entry[3], entry[4])
                else:
                    kept.append(entry)
            if len(kept) < len(frees):
                heapq.heapify(kept)
                frees[:] = kept

    def _give_back(self, fn, args) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # reported by wait_all, as a kernel's error would be
            with self._lock:
                self._failures.append(Failure("free", -1, exc))


def _finished(entry, every: bool, buf, done) -> bool:
    """Whether a pending deletion (`DeferredFrees._frees`) can go: its last user is below the
    low-water mark, or each of its users is done (`every`: nothing runs any more). A function,
    not a closure: `_run_frees` runs on the push path, and made one per call."""
    return every or entry[0] < buf[layout.H_LOW] or all(map(done, entry[2]))
