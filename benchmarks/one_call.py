"""A push that is one compiled call: the ring reader's work for an op done inside the frontend's
own call, with no ring and no thread of its own.

`push_parts.py`'s ring rows put the push's floor near 2x numpy's op: a frontend that makes no
call per op and writes records into a ring for a compiled thread to take (`ring_reader`). The
notes took the call per op to be what held "lean" (one compiled call) near 4x. Timed apart, it
is not: a call through a compiled function's entry point costs about 100 ns with one integer
argument (an address) and about 10 ns per integer more, where an array argument costs about
100 ns by itself, and seven memoryview stores (the ring's record) cost 180-270 ns (2-core AMD
EPYC VM). What held "lean" back was the Python around its call: free lists, a var object, a
dict, the table's slot, all per op.

So `OneCall` makes the reader's work for an op (`ring_reader.read`) the body of the push. The
frontend calls `op(world, op id, code, input var, output var, bytes, scalar, name, dropped)`
once, and compiled code finds the input's slot, gives the output a buffer from the size
classes, asks the compiled analysis (`slotdeps`) for the predecessor and runs the op itself,
in push order, or pushes it into a compiled engine's table behind that predecessor
(`realexec.engine.table.push_unary`) for the engine's workers. A drop rides on the next push's
call (the frontend holds it until then), or is a call of its own before a creation, a wait or
a second drop.
What it keeps lives in one int64 array (`world`: a header of counters and the offsets of its
parts), passed by address, so no array is converted per call. Compared with the ring: program
order needs no ring (one caller, calling in order); an error belongs to the call that caused it;
and both cores go to the engine's workers and the frontend, none to a reader.

It stands for no more than the reader does: float32, the op `y = x + scalar`, no pool
accounting, no spans read out, no failures. Its waits (for the table slot's last op, for a
freed buffer's last op when the arena is full) spin and yield the core, and give up after
`WAIT_NS` with an error, where an engine's blocker would sleep on its futex. Units: tokens (op
numbers in push order), bytes, nanoseconds.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit, types
from overhead import NullBackend
from ring_reader import (
    ARENA_FULL,
    CLASSES,
    EMPTY,
    GONE,
    TABLE_FULL,
    _due,
    _find,
    _give_back,
    _take,
    creatable,
)

from realexec.cpu.loops import ADD
from realexec.cpu.native_ops import SCALAR
from realexec.engine import layout, table
from realexec.engine import slotdeps as deps
from realexec.engine.atomics import load, now_ns, pointer, sched_yield

# the world's header (int64 words): counters, then where each part starts (in words)
TOKEN, PREDS, ARENA, ITEMS, ENGINE, ENGINE_LEN, DUE, HELD, SLOTS, NODES, LATE, WAIT = range(12)
KEYS, OFFS, SIZES, SPARE, NFREE, BUMP, ROWS, LINKS, POOL, PREDBUF, LATEBUF = range(16, 27)
HEADER = 32
NODES_FULL, NO_VAR, STUCK = -3, -4, -5  # a call's answers besides TABLE_FULL, ARENA_FULL; 0: done
WAIT_NS = 2_000_000_000  # a wait for the engine's workers gives up after this long
OP_TYPES = (*[types.int64] * 6, types.float64, types.int64, types.int64)


@njit(nogil=True, cache=True)
def _parts(addr):
    """The world at `addr`: its header and each of its parts, as arrays over its words."""
    w = carray(pointer(addr), HEADER, np.int64)
    t, nodes, i64 = w[SLOTS], w[NODES], np.int64
    return (w, carray(pointer(addr + 8 * w[KEYS]), t, i64),
            carray(pointer(addr + 8 * w[OFFS]), t, i64),
            carray(pointer(addr + 8 * w[SIZES]), t, i64),
            carray(pointer(addr + 8 * w[SPARE]), (CLASSES, 2 * t), i64),
            carray(pointer(addr + 8 * w[NFREE]), CLASSES, i64),
            carray(pointer(addr + 8 * w[BUMP]), 1, i64),
            carray(pointer(addr + 8 * w[ROWS]), (t, 5), i64),
            carray(pointer(addr + 8 * w[LINKS]), (nodes, 2), i64),
            carray(pointer(addr + 8 * w[POOL]), 1, i64),
            carray(pointer(addr + 8 * w[PREDBUF]), nodes + 1, i64),
            carray(pointer(addr + 8 * w[LATEBUF]), (w[LATE], 3), i64),
            carray(pointer(w[ARENA]), w[ITEMS], np.float32),
            carray(pointer(w[ENGINE]), w[ENGINE_LEN], i64))


@njit(nogil=True, cache=True)
def _slot(w, keys, offs, sizes, spare, nfree, bump, lates, arena, s, var, nbytes, deadline):
    """A slot for the new `var` with a buffer of `nbytes`; where the arena is full and freed
    buffers wait for their last op, it waits for them. The slot, or an error code."""
    while True:
        if len(s) > 0:
            w[DUE] = _due(s, lates, w[DUE], w[HELD], spare, nfree)
        slot = _take(keys, offs, sizes, spare, nfree, bump, len(arena), var, nbytes)
        if slot != ARENA_FULL or w[DUE] == w[HELD]:
            return slot
        if now_ns() > deadline:
            return STUCK
        sched_yield()


@njit(nogil=True, cache=True)
def op(addr, op_id, code, src_var, out_var, nbytes, scalar, name, dropped):
    """Push `out_var = src_var + scalar` (`out_var` fresh), after the deletion of `dropped`
    (-1: none), which the frontend held back for this call: 0, or an error code (the
    deletion's, then nothing else done; or the op's, with nothing of it done)."""
    issue = now_ns()
    (w, keys, offs, sizes, spare, nfree, bump, rows, links, pool, preds, lates, arena,
     s) = _parts(addr)
    token, engine, deadline = w[TOKEN], len(s) > 0, issue + w[WAIT]
    if dropped >= 0:
        status = _drop(w, keys, offs, sizes, spare, nfree, rows, links, pool, preds, lates, s,
                       dropped, deadline)
        if status:
            return status
    src = _find(keys, src_var)
    if src < 0:
        return NO_VAR
    if engine:
        cap = s[layout.H_CAP]
        while token - cap >= load(s, layout.H_LOW):  # the op that last held its slot runs
            if now_ns() > deadline:
                return STUCK
            sched_yield()
    slot = _slot(w, keys, offs, sizes, spare, nfree, bump, lates, arena, s, out_var, nbytes,
                 deadline)
    if slot < 0:
        return slot
    deps.fresh(rows, slot)
    low = load(s, layout.H_LOW) if engine else token  # every op below it is done
    pred = deps.add_fresh(rows, links, pool, token, src, slot, low)
    if pred == deps.OUT_OF_NODES - 1:
        keys[slot] = GONE  # the output's slot and buffer back: nothing changed
        _give_back(spare, nfree, offs[slot], nbytes)
        return NODES_FULL
    w[PREDS] += pred >= 0
    n = nbytes // 4
    if engine:
        base = w[ARENA]
        table.push_unary(s, token & (cap - 1), token, SCALAR, code, 0, n,
                         base + 4 * offs[src], base + 4 * offs[slot], scalar, pred, op_id, name,
                         issue)
    else:
        x, y = offs[src], offs[slot]
        for j in range(n):
            arena[y + j] = arena[x + j] + np.float32(scalar)
    w[TOKEN] = token + 1
    return 0


@njit(nogil=True, cache=True)
def create(addr, var, nbytes, value):
    """A new var of `nbytes` filled with `value`: 0, or an error code."""
    (w, keys, offs, sizes, spare, nfree, bump, rows, links, pool, preds, lates, arena,
     s) = _parts(addr)
    slot = _slot(w, keys, offs, sizes, spare, nfree, bump, lates, arena, s, var, nbytes,
                 now_ns() + w[WAIT])
    if slot < 0:
        return slot
    deps.fresh(rows, slot)
    arena[offs[slot]:offs[slot] + nbytes // 4] = np.float32(value)
    return 0


@njit(nogil=True, cache=True)
def _drop(w, keys, offs, sizes, spare, nfree, rows, links, pool, preds, lates, s, var,
          deadline):
    """`var` is deleted: its buffer back now if every op on it is done, else once its last op
    is (`late`, given back by later calls). 0, or an error code, with nothing changed."""
    slot = _find(keys, var)
    if slot < 0:
        return NO_VAR
    engine = len(s) > 0
    while engine:
        w[DUE] = _due(s, lates, w[DUE], w[HELD], spare, nfree)
        if w[HELD] - w[DUE] < len(lates):
            break
        if now_ns() > deadline:  # every freed buffer still waits for its last op
            return STUCK
        sched_yield()
    last = -1
    for i in range(deps.drop(rows, links, pool, slot, preds)):
        last = max(last, preds[i])
    if last < (load(s, layout.H_LOW) if engine else w[TOKEN]):
        _give_back(spare, nfree, offs[slot], sizes[slot])
    else:
        lates[w[HELD] % len(lates)] = offs[slot], sizes[slot], last
        w[HELD] += 1
    keys[slot] = GONE
    return 0


@njit(nogil=True, cache=True)
def drop(addr, var):
    """`_drop` on its own: 0, or an error code."""
    (w, keys, offs, sizes, spare, nfree, bump, rows, links, pool, preds, lates, arena,
     s) = _parts(addr)
    return _drop(w, keys, offs, sizes, spare, nfree, rows, links, pool, preds, lates, s, var,
                 now_ns() + w[WAIT])


class OneCall(NullBackend):
    """`ND`'s backend for "one call": each push and each drop is one compiled call over the
    world (`op`, `drop`); `engine`, a `realexec.engine.native.NativeEngine` whose workers run
    the ops (no other pushes on it), or None to run them in the call."""

    def __init__(self, slots: int = 1 << 14, items: int = 1 << 20, engine=None,
                 wait_ns: int = WAIT_NS):
        nodes = 4 * slots
        words_of = {KEYS: slots, OFFS: slots, SIZES: slots, SPARE: CLASSES * 2 * slots,
                    NFREE: CLASSES, BUMP: 1, ROWS: 5 * slots, LINKS: 2 * nodes, POOL: 1,
                    PREDBUF: nodes + 1, LATEBUF: 3 * slots}  # each part's length
        self.world = np.zeros(HEADER + sum(words_of.values()), np.int64)
        w, at = self.world, HEADER
        for k, words in words_of.items():
            w[k], at = at, at + words
        self.keys = w[w[KEYS]:w[KEYS] + slots]
        self.offs, self.sizes = w[w[OFFS]:w[OFFS] + slots], w[w[SIZES]:w[SIZES] + slots]
        self.keys[:] = EMPTY
        rows, links, _ = deps.new_deps(slots, nodes)  # the analysis's start, copied in
        w[w[ROWS]:w[ROWS] + 5 * slots] = rows.ravel()
        w[w[LINKS]:w[LINKS] + 2 * nodes] = links.ravel()
        self.arena = np.zeros(items, np.float32)
        # the engine's state, kept here: a closed engine puts a small one in its place
        self.state = np.zeros(1, np.int64) if engine is None else engine.state
        w[ARENA], w[ITEMS] = self.arena.ctypes.data, items
        w[ENGINE] = self.state.ctypes.data
        w[ENGINE_LEN] = 0 if engine is None else len(self.state)  # 0: ops run in the call
        w[SLOTS], w[NODES], w[LATE], w[WAIT] = slots, nodes, slots, wait_ns
        self.engine, self.addr = engine, w.ctypes.data
        self.codes = {"add_scalar": ADD}
        self.name = 0 if engine is None else engine._name_number("add_scalar")
        self.dropped = -1  # a deletion held for the next push's call
        self._op = table.entry(op, OP_TYPES)
        self._drop = table.entry(drop, (types.int64, types.int64))

    def issue(self, op_, out_var, host) -> None:
        creatable(op_, out_var, "one call")
        self._flush()
        status = create(self.addr, out_var.id, out_var.nbytes,
                        1.0 if op_.name == "ones" else 0.0)
        if status:
            raise self._error(status, op_.name, out_var.shape)

    def issue_same(self, op_id, name, reads, var, shape, dtype, device, attrs, nbytes):
        try:  # free when nothing is raised (CPython 3.11+), where a test costs a little
            code = self.codes[name]
        except KeyError:
            raise NotImplementedError(f"{name}: one call only adds a scalar") from None
        dropped = self.dropped
        if dropped >= 0:
            self.dropped = -1
        status = self._op(self.addr, op_id, code, reads[0], var, nbytes, attrs["scalar"],
                          self.name, dropped)
        if status:
            raise self._error(status, name, shape)

    def free(self, var) -> None:
        """Hold the deletion for the next push's call (`op`'s `dropped`): in a loop of
        `y = x + 1` each push drops the last y, and its own call cost 0.1-0.2 us an op. A
        second deletion before that push makes the first one's call."""
        if self.dropped < 0:
            self.dropped = var
            return
        held, self.dropped = self.dropped, var
        self._delete(held)

    def _delete(self, var) -> None:
        status = self._drop(self.addr, var)
        if status:  # (`NDArray.__del__` drops it; a test calls `free` to see it)
            raise self._error(status, "a drop", f"var {var}")

    def _flush(self) -> None:
        """The deletion held back, made now: before a creation and a wait."""
        if self.dropped >= 0:
            held, self.dropped = self.dropped, -1
            self._delete(held)

    def sync(self, kind, var):
        """Wait until the engine has run every op pushed; then a var's values (a copy)."""
        self._flush()
        if self.engine is not None:
            self.engine._wait(1, int(self.world[TOKEN]))
        if var is None:
            return None
        slot = _find(self.keys, var)
        return self.arena[self.offs[slot]:self.offs[slot] + self.sizes[slot] // 4].copy()

    @property
    def ops(self) -> int:
        return int(self.world[TOKEN])

    @property
    def preds(self) -> int:
        return int(self.world[PREDS])

    def _error(self, status: int, what: str, shape) -> RuntimeError:
        why = {TABLE_FULL: f"its var table is full (more live arrays than {self.world[SLOTS]})",
               ARENA_FULL: f"its arena of {len(self.arena)} float32 is full",
               NODES_FULL: f"{self.world[NODES]} reads in flight fill its dependency analysis",
               NO_VAR: "its input is not one of its vars",
               STUCK: f"the engine's workers freed no room within {self.world[WAIT] / 1e9} s"}
        return RuntimeError(f"{what} ({shape}): one call: {why[status]}")
