"""The backend's side of light results (`realexec.engine.light`): small outputs of the fast push
that live in the engine's compiled state alone until Python needs one.

On an engine made with `light=True` (`engine="native-light"`, the default session's; without
`max_inflight`; in sync mode the one call runs the op too),
the push of `y = f(x)` on cpu(0) with a result of at most `LIGHT_BYTES` makes no engine var, no
pool array and no entry in the Python analysis (`realexec.unary.light_push`). A light result
becomes a Python var (`LightVar`, over its buffer in the arena) the first time Python asks the
backend's var table for it (`Vars.__missing__`): an op of another kind, a GPU copy.
Its last write and its reads move to the Python analysis then, and its buffer goes back to the
arena, not the pool, once every op on it is done (`_delete`). A blocker on a light result does
not adopt it: it waits for its last write and reads its buffer in the arena (`_sync_light`);
the result stays light, so its drop is a light one too.

Drops: every drop waits in `_light_drops` (the backend's `free` is that list's `append`: no
Python frame per drop, where the light push's own frame cost 0.1 us, 2-core AMD EPYC VM). The
next light push hands the last one to its call, which deletes it first; the call answers
`PYTHON_DROP` for a Python var's (a lent one, an adopted one, one of another kind of op), and
Python deletes it (`_free_python`, the shipped `free`) and makes the call again (0.25 us: in
the common loop the drop is a light result's, which a look in Python would have cost 35 ns).
Two or more waiting, the push deletes all but the last first; the general path, every
blocker, mark, trace and close delete them all (`_hand_drops`, `_flush_light`: a Python var's
without a call), before anything is reserved: so memory comes back at the next push or
blocker, never later than before the next output is taken. Appends and pops of that list are
single steps, so a drop on another thread (a collection) is neither lost nor made twice.

Inputs: a light push reads a light result, or a Python var whose last write is done (lent to the
state, with its shape and dtype, which the output takes, when a call answers `NO_VAR`, and the
push made again: `_lend`; an array of more than two dimensions is never lent). A Python var
whose last write still runs sends the op the general way: a light result there would be read by
the next op of another kind as often as not (a dense layer's relu, read by the next layer), and
its adoption costs more than the light push saves. So no light op can inherit a failure, but
from a predecessor that failed after the call looked (a poisoned var ends light pushes:
`Light.off`): the call then answers `HELD`, and the result is adopted at once and the op
recorded, for the worker to poison it by. Memory: the arena's live bytes, logged by the compiled
calls, are added to the CPU pool's samples in the Trace (`_with_light`).
"""

from __future__ import annotations

import numpy as np

from realexec.cpu.drops import DroppedResults
from realexec.cpu.native_ops import DTYPES
from realexec.engine import table as t
from realexec.engine.deps import Var
from realexec.engine.light import (
    GENERAL,
    HELD,
    LATE_FULL,
    LIGHT_BYTES,
    NO_VAR,
    OP_BITS,
    READ_LOG,
    Light,
)
from realexec.issuing import _address_of

_DTYPES = (np.dtype("float32"), np.dtype("float64"))  # by code (`realexec.cpu.native_ops`)
NOT_LIGHT = object()  # `_sync_light`'s answer for a var it leaves to the general blocker


class LightVar(Var):
    """A Python var over a light result's buffer in the arena (at `off`)."""

    __slots__ = ("off",)


class Vars(dict):
    """The backend's var table: frontend var id -> engine var, adopting a light result when
    asked for one it does not hold (`d[var]`; `get` and `pop` do not adopt)."""

    __slots__ = ("adopt",)

    def __missing__(self, var):
        return self.adopt(var)


class LightResults:
    """Mixed into `realexec.frontend.EngineBackend`. Needs its `engine` (the Python analysis
    `_deps`, `wait_all`), `vars` and `pools`."""

    def _init_light(self, engine, trace) -> None:
        self._world = None
        self._light_drops: list = []  # every drop, for the next push or blocker
        self._lent: dict = {}  # Python var -> its frontend id, while lent (`_lend`)
        self._lent_ids: set = set()  # their frontend ids (`issue_same` looks here first)
        self._light_log: list = []  # blocks of (t_ns, live bytes of the arena), as arrays
        self._light_trace = trace
        if getattr(engine, "light", False):
            self._world = Light(engine.state, logs=1 << 12 if trace else 0,  # (0: no samples)
                                sync=engine._sync)
            engine._lent, engine._unlend = self._lent, self._unlend  # (the pushes that write)
            engine._lights_out = self._world.off
            self.vars = Vars()
            self.vars.adopt = self._adopt
            # every drop waits for the next push, blocker or mark, which tells a light result's
            # from a Python var's (`ND` binds its backend's `free` once): no Python frame a drop
            self.free = self._light_drops.append

    def _adopt(self, var: int) -> LightVar:
        """Light result `var` as a Python var (KeyError if it is none)."""
        world = self._world
        got = world.adopt(var)
        if got is None:
            raise KeyError(var)
        off, nbytes, shape, dtype, writer, reads = got
        ev = LightVar("cpu", np.ndarray(shape, _DTYPES[dtype], world.arena, off))
        ev.off, ev.ptr = off, world.arena.ctypes.data + off
        deps = self.engine._deps
        if writer is not None and not self.engine._sync:  # (sync mode orders nothing)
            deps.writer[ev] = writer
        if reads and not self.engine._sync:
            deps.readers[ev] = reads
        self.vars[var] = ev
        return ev

    def _flush_light(self, read: bool = False) -> None:
        """A blocker, a mark, the trace, the close: every held drop deleted (`_hand_drops`), the
        late buffers whose ops are done given back, and with `read` (the trace, the close) or
        the log half full, the memory log read out."""
        self._hand_drops()
        world = self._world
        if world.late():
            world.due(world.addr, self.engine._closed)
        if read or world.log_half_full():
            self._read_light_log()

    def _hand_drops(self, keep: int = 0) -> None:
        """Delete the held drops but the last `keep`: a Python var's by the shipped free, with no
        call (`in` adopts nothing); a light result's by a call, which gives back the late
        buffers whose ops are done. What a general push does first."""
        drops, vars_, world = self._light_drops, self.vars, self._world
        while len(drops) > keep:
            try:
                var = drops.pop(0)
            except IndexError:  # another thread took it
                break
            if var in vars_:
                self._free_python(var)
                continue
            while world.drop(world.addr, var) == LATE_FULL:  # a rare backlog: let ops finish
                self.engine.wait_all()

    def _free_python(self, var: int) -> None:
        """The shipped free (`DroppedResults.free`) of a dropped var that is no light result,
        a lent one's light reads given back first."""
        if self._lent:
            ev = self.vars.get(var)
            if ev in self._lent:
                self._unlend(ev)
        DroppedResults.free(self, var)

    def _read_light_log(self) -> None:
        block = self._world.read_log()
        if block is not None:
            self._light_log.append(block)

    def _sync_light(self, kind: str, var: int):
        """A blocker on frontend var `var` if it is a light result: its last write waited for,
        its buffer read where it lies, the result left light (its drop stays a light one); else
        `NOT_LIGHT`."""
        got = self._world.peek(var)
        if got is None:
            return NOT_LIGHT
        off, shape, dtype, writer = got
        self.engine.wait_for_token(writer)
        if kind == "wait_to_read":
            return None
        data = np.ndarray(shape, _DTYPES[dtype], self._world.arena, off)
        return data.copy() if kind == "asnumpy" else data

    def _lend(self, x, rid: int) -> bool:
        """Lend Python var `x` (frontend var `rid`) to the compiled state if its last write is
        done: the light pushes that read it find it there by `rid`. False if it still runs, if
        no light push could read it (more than two dimensions or `LIGHT_BYTES`, another dtype)
        or the state's table is full."""
        data = x.data
        dtype = DTYPES.get(data.dtype)
        if dtype is None or data.ndim > 2 or data.nbytes > LIGHT_BYTES:
            return False  # no light push could read it (they take its shape and dtype)
        engine = self.engine
        writer = engine._deps.last_write(x)
        if (writer is None or engine._done(writer)) and self._world.lend(
                rid, x.ptr or _address_of(x), writer, data.shape, dtype):
            self._lent[x] = rid
            self._lent_ids.add(rid)
            return True
        return False

    def _unlend(self, x) -> None:
        """Lent var `x` back to the Python analysis, with the light pushes' reads of it: before
        an op writes it, and before its deletion."""
        rid = self._lent.pop(x)
        self._lent_ids.discard(rid)
        reads = self._world.unlend(rid)
        if reads and not self.engine._sync:
            readers = self.engine._deps.readers
            readers[x] = sorted(readers.get(x, []) + reads)

    def _answered(self, answer, op_id, name, rid, var, shape, dtype, device, scalar, nbytes,
                  attrs, token, dropped) -> int:
        """What a light push does when its call did not simply push (`answer` not 0), -1 when
        the op went another way: an input the state does not hold lent to it (its last write
        done), then the push made again; a call that could do nothing else, the general push
        instead (a new record, a real var); a failed predecessor (the result adopted, the op's
        record, then the op let go); the log to read out. (`attrs`: the op's, None for
        `issue_scalar`'s.)"""
        engine = self.engine
        if answer < 0:  # nothing of the op done (a Python var's drop: `issue_scalar`'s)
            again = False
            if answer in (LATE_FULL, GENERAL, NO_VAR) and dropped >= 0:  # (not deleted)
                self._light_drops.append(dropped)
            if answer == NO_VAR:  # a Python var, lent if its last write is done
                x = self.vars.get(rid)
                again = x is not None and self._lend(x, rid)
            if again:
                self._scalar(op_id, name, rid, var, shape, dtype, device, scalar, nbytes, attrs)
            else:
                if self._light_drops:
                    self._hand_drops()
                self._heavy(op_id, name, (rid,), var, shape, dtype, device,
                            {"scalar": scalar} if attrs is None else attrs, nbytes)
            return -1
        if answer & HELD:  # its predecessor failed meanwhile: the result a Python var, for the
            # worker that takes the op to poison by its record
            x = self.vars.get(rid)
            engine._ops[token & (engine.cap - 1)] = (name, op_id, () if x is None else (x,),
                                                     (self.vars[var],), None, ())
            t.release_held(engine.state, token & (engine.cap - 1), 0)
        if answer & READ_LOG:
            self._read_light_log()
        return answer

    def _light_code(self, name: str) -> int:
        """Op `name`'s code and its name's number in the engine's table, packed as the light
        push passes them (`realexec.engine.light.OP_BITS`), kept for the next push of it; -1
        for an op that is not light's."""
        code = self._unary.get(name)
        op = -1 if code is None else code | self.engine._name_number(name) << OP_BITS
        self._light_codes[name] = op
        return op

    def _release_light(self, off: int, nbytes: int) -> None:
        self._world.release(off, nbytes)
        if self._world.log_half_full():
            self._read_light_log()

    def _with_light(self, samples: list) -> list:
        """The CPU pool's samples (t_ns, "cpu", bytes) with the arena's live bytes added, at
        every change of either."""
        if self._world is None or not self._light_log:
            return samples
        log = np.concatenate(self._light_log).tolist()
        merged, pool, light = [], 0, 0
        events = sorted([(when, 0, b) for when, dev, b in samples if dev == "cpu"]
                        + [(when, 1, b) for when, b in log])
        for when, which, b in events:
            if which:
                light = b
            else:
                pool = b
            merged.append((when, "cpu", pool + light))
        if self._light_trace is not True:  # a bounded trace: the last samples, as the pool's
            merged = merged[-self._light_trace:]
        return [s for s in samples if s[1] != "cpu"] + merged

