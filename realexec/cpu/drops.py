"""The CPU half of `realexec.frontend.EngineBackend`'s frees: small dropped results handed to
the engine in runs, and the done ones of a run kept for the next outputs of their shape.

A drop (the last handle of a cpu(0) result let go) costs the frontend its `Engine.delete_var`: the
analysis's `drop`, and the pool's release with its lock and its memory sample, ~1.5 us alone
(2-core AMD EPYC VM). On the compiled engine a result of at most `DROP_BYTES` waits in a list
instead, handed over when `DROP_BATCH` are there, and at every blocker, mark, trace and close
(`_give_back_drops`): one `NativeEngine.delete_vars` for the run, one lock and one sample. The
done ones of a full run are then kept, by shape, still counted live, and the next fresh cpu(0)
output of that shape and dtype takes the last one kept (`_take_cpu`: a dict look-up and a list
pop, the pool untouched): 0.7 us less per op of a `y = x + 1` loop. What is kept is the engine
var itself, with its buffer and address, so a taken one costs no new var either. The next run's
hand-over gives back what no output took, and a blocker, mark, trace or close gives everything
back. So memory comes back at most two runs late, and never before the ops that use it are done
(the DESIGN rule). The model follows the same rule (`asyncsim.model.issue`, whose constants these
are).

Threads: a drop may happen on any thread (a collection). Drops leave their deque by one
`popleft` each and kept results their lists by one `pop` each, so two hand-overs at once lose
and repeat nothing. Units: bytes.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from asyncsim.model.issue import DROP_BATCH, DROP_BYTES
from asyncsim.nd.ops import DTYPES
from realexec.engine.deps import Var

# a dtype's name -> numpy's one object for it (a pool's arrays are made with it): a kept
# result's dtype is checked by identity, 40 ns less than comparing a dtype with a name
_DTYPE = {name: np.dtype(name) for name in DTYPES}


class DroppedResults:
    """Mixed into `EngineBackend`: `free`, `_give_back_drops`, `_take_cpu`. Needs its
    `engine` (`delete_var`, `delete_vars`), `vars` and `_delete` (any other var's free)."""

    def _init_drops(self, pool, runs: bool) -> None:
        """Over cpu(0)'s `pool`; `runs`: hand small drops over in runs (the compiled engine)."""
        self._release_cpu = pool.release  # bound once: a free per op passes it
        self._acquire_cpu = pool.acquire
        self._release_many_cpu = pool.release_many
        # small results dropped, for the next run handed to the engine
        self._drops: deque | None = deque() if runs else None
        # the done results of the last full run, by shape: the next outputs of their shape and
        # dtype take them
        self._stash: dict = {}
        # set after a result is kept, cleared before the kept ones are taken back: a blocker
        # with none kept skips the look (0.7 us of every blocker, 2-core AMD EPYC VM)
        self._kept = False

    def free(self, var: int) -> None:
        """`ND`'s free (the last handle of frontend var `var` let go): a small cpu(0) result
        joins the run of drops, any other var goes to the backend's `_delete`. Here, not
        there, so that a drop costs one call (each array's `__del__` makes one)."""
        ev = self.vars.pop(var, None)
        if ev is None:  # (a light result's drop is the light engine's own `free`)
            return
        drops = self._drops
        if (drops is not None and type(ev) is Var and ev.name == "cpu"
                and ev.data.nbytes <= DROP_BYTES):
            drops.append(ev)
            if len(drops) >= DROP_BATCH:
                self._give_back_drops(keep=True)
        else:
            self._delete(ev)

    def _give_back_drops(self, keep: bool = False) -> None:
        """Hand the small results dropped so far to the engine's deletion at once
        (`NativeEngine.delete_vars`). With `keep` (a full run), those whose ops are done are
        kept, and the run kept before goes back to the pool; without (a blocker, a mark, the
        trace, close), everything goes back, in one `release_many`. Each drop is taken out of
        the deque by one `popleft` (a copy and a cut in two steps let two threads take one)."""
        drops, batch = self._drops, []
        try:
            take = drops.popleft  # (None once closed: only the kept ones are left)
            for _ in range(len(drops)):
                batch.append(take())
        except (IndexError, AttributeError):  # another thread took the rest (or closed)
            pass
        back = []
        if self._kept:
            self._kept = False  # before the pops: a result kept meanwhile sets it again
            for spare in list(self._stash.values()):  # one C call: no size change under it
                try:
                    while spare:
                        back.append(spare.pop())
                except IndexError:  # another thread took the rest
                    pass
        if keep:
            if back:
                self._release_many_cpu([var.data for var in back])
            if batch:
                self.engine.delete_vars(batch, self._stash_cpu, self._release_cpu)
            return
        if batch:  # the done ones join the kept ones: one release, one sample
            self.engine.delete_vars(batch, back.extend, self._release_cpu)
        if back:
            self._release_many_cpu([var.data for var in back])

    def _stash_cpu(self, vars_) -> None:
        """Keep the done results of a run of drops (their vars) for the next outputs of their
        shape."""
        stash = self._stash
        for var in vars_:
            shape = var.data.shape
            spare = stash.get(shape)
            if spare is None:  # setdefault: another thread may make the list meanwhile
                spare = stash.setdefault(shape, [])
            spare.append(var)
        self._kept = True  # after the appends (see `_init_drops`)

    def _take_cpu(self, shape: tuple, dtype: str) -> Var:
        """A fresh output's var on cpu(0): the result dropped last of its shape, if it is of
        `dtype` too, or else a new var over an array from the pool (`Pool.acquire`)."""
        spare = self._stash.get(shape)
        if spare:
            try:
                var = spare.pop()
            except IndexError:  # another thread took the stash meanwhile
                return Var("cpu", self._acquire_cpu(shape, dtype))
            if var.data.dtype is _DTYPE.get(dtype):  # numpy's own dtype: `is`, not `==`
                var.failure = None  # its op may have failed: the new one has not
                return var
            spare.append(var)
            self._kept = True  # a hand-over may have run between the pop and the append
        return Var("cpu", self._acquire_cpu(shape, dtype))
