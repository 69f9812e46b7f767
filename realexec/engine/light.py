"""Light results: the small outputs of the commonest push (`y = f(x)`, one array, elementwise,
on cpu(0)) kept in the engine's compiled state alone, so that a push is one compiled call with
integers and no Python object per op.

A light result is a var id in a var table (open addressing by id), a buffer in an arena cut in
size classes (8 << k bytes, k < `CLASSES`: up to `LIGHT_BYTES`), its dimensions (at most two)
and its row in the dependency analysis by var slot (`realexec.engine.slotdeps`: the last write
and the reads since). `push` does, in one call, what the Python push does with its objects:

1. the deletion the frontend held back for it (a dropped var; a Python var's is Python's to
   make, `PYTHON_DROP`): a light result's buffer goes back at once if every op on it is done,
   else onto the late list, given back once the low-water mark `H_LOW` passes its last op (the
   DESIGN rule: a buffer is reused only after every op touching it has finished), looked at by
   every call;
2. the input: a light result's buffer, or a Python var's lent to the state (`lend`: its last
   write done, its shape and dtype written with it), with its last write as the predecessor and
   this op as a read of it (any other input: the frontend takes the general path);
3. the output: a buffer of its class (a free one, or a new one off the arena's end), a slot with
   its input's shape and dtype, its write; then the op into the engine's table
   (`table.push_unary`) behind its predecessor.

A call that cannot do its op (light pushes over: `OFF`, set once the engine closes, a var is
poisoned or a GPU is in use; a result too large; table, arena or reads full; an unknown input)
changes nothing of it and says why (a negative answer); the frontend then takes the general
path, or for an unknown input lends it and calls again. `adopt` turns a
light result into a Python var's buffer when Python needs it (another kind of op reads it):
its last write and reads move to the Python analysis, and its buffer stays counted here until
`release` gives it back; `peek` tells a blocker where one lies and its last write, and leaves
it light. `unlend` gives a lent var's reads back to the Python analysis
(before an op writes the var, and before its deletion). Those calls are `realexec.engine.loans`.
`due` gives back what the late list holds and is done (a blocker). The state's layout and the
helpers over it: `arena`.

Memory: `LIVE` counts the bytes of the buffers handed out and not given back, and each call that
changed it appends (time, live bytes) to a log the frontend reads out through its own view of
the words (`LOGN` entries; the answer's `READ_LOG` bit asks for it once half full), merged with
the CPU pool's samples in the Trace. No threads: the frontend is the one caller, in program
order. Units: bytes, tokens (op numbers in push order), nanoseconds (`atomics.now_ns`).
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit, types

from realexec.cpu.native_ops import SCALAR
from realexec.cpu.worker import run_unary_stamped
from realexec.engine import layout, slotdeps
from realexec.engine import table as t
from realexec.engine.arena import (
    ARENA,
    ARENA_BYTES,
    CLASSES,
    DIMS,
    EMPTY,
    GONE,
    HEADER,
    ITEMSIZE,
    KEYS,
    LATE_HEAD,
    LATE_TAIL,
    LATEBUF,
    LATES,
    LENT,
    LINKS,
    LIVE,
    LOGBUF,
    LOGN,
    LOGS,
    MADE,
    NFREE,
    NODES,
    OFF,
    OFFS,
    POOL,
    PREDS,
    ROWS,
    SIZES,
    SLOTS,
    SPARE,
    SPARES,
    STATE,
    STATE_LEN,
    SYNC,
    find,
    free_slot,
    give_back,
    give_back_due,
    log_live,
    parts,
    take,
)
from realexec.engine.atomics import load, now_ns, pointer
from realexec.engine.loans import adopt, lend, peek, release, unlend

# a push's answer: a negative one means nothing of the op was done
TABLE_FULL, ARENA_FULL, NO_VAR, READS_FULL, LATE_FULL = -1, -2, -3, -4, -5
PYTHON_DROP, GENERAL = -6, -7  # the deletion is a Python var's; the op is not light's
HELD, READ_LOG = 1, 2  # bits of an answer that is not negative (see `push`)
OP_BITS = 16  # a push's `op`: the op's code below, its name's number above
_CODE = (1 << OP_BITS) - 1
LIGHT_BYTES = 8 << (CLASSES - 1)  # the largest light result: 4 KiB


@njit(nogil=True, cache=True)
def _drop(w, keys, offs, sizes, rows, links, pool, preds, spare, nfree, lates, var, low):
    """Light result `var` is deleted: 1 if its buffer went back, 0 if it waits on the late list;
    nothing done if the late list is full (LATE_FULL) or `var` is no light result (PYTHON_DROP:
    a lent Python var, or one the state does not hold, is Python's to delete)."""
    slot = find(w, keys, var)
    if slot < 0 or sizes[slot] == LENT:
        return PYTHON_DROP
    if w[LATE_TAIL] - w[LATE_HEAD] >= len(lates):
        return LATE_FULL
    last = -1
    for i in range(slotdeps.drop(rows, links, pool, slot, preds)):
        last = max(last, preds[i])
    keys[slot] = GONE
    if last < low:
        give_back(w, spare, nfree, offs[slot], sizes[slot])
        return 1
    lates[w[LATE_TAIL] % len(lates)] = offs[slot], sizes[slot], last
    w[LATE_TAIL] += 1
    return 0


@njit(cache=True)  # the frontend's: keeps the GIL, as `table.push_unary` does
def push(addr, token, op, in_var, out_var, nbytes, scalar, op_id, dropped):
    """Push `out_var = f(in_var)` (`op`: the compiled worker's op code of its SCALAR kind, and
    above `OP_BITS` the number of the op's name in the engine's table; `out_var` a fresh light
    result of `nbytes`, with `in_var`'s dimensions and dtype, which its slot holds) after the
    deletion of `dropped` (-1: none), which the frontend held back for this call. `in_var`: a
    light result or a lent var. The answer: GENERAL (light pushes are over, or the result is
    not a light one), NO_VAR (`in_var` is neither), LATE_FULL or PYTHON_DROP (see `_drop`),
    nothing done; another negative one, the deletion done and nothing of the op (see the
    module); else the bits HELD (its predecessor failed: the op waits for the frontend's
    `table.release_held`) and READ_LOG."""
    (w, keys, offs, sizes, dims, rows, links, pool, preds, spare, nfree, made, lates,
     logs) = parts(addr)
    if w[OFF] or not 0 < nbytes <= LIGHT_BYTES:  # (0: an empty array)
        return GENERAL
    src = find(w, keys, in_var)
    if src < 0:
        return NO_VAR
    # the output's shape and dtype are its input's (an elementwise op of one array): read from
    # the input's slot, not passed (three arguments less a call, 60 ns, and no shape unpacked)
    d0, d1, dtype = dims[src, 0], dims[src, 1], dims[src, 2]
    n = nbytes // ITEMSIZE[dtype]
    # the push's span and its memory entry start here, after the frontend's deletions: stamped
    # before them, the take sorted before the memory they gave back in the Trace. Read here, not
    # by the frontend: a Python call and an argument less per push
    issue = now_ns()
    s = carray(pointer(w[STATE]), w[STATE_LEN], np.int64)
    low = load(s, layout.H_LOW)
    changed = 0
    if dropped >= 0:
        changed = _drop(w, keys, offs, sizes, rows, links, pool, preds, spare, nfree, lates,
                        dropped, low)
        if changed < 0:
            return changed
    changed += give_back_due(w, lates, spare, nfree, low)
    base = w[ARENA]
    in_addr = offs[src] if sizes[src] == LENT else base + offs[src]
    slot = free_slot(w, keys, out_var)
    off = take(w, spare, nfree, made, nbytes) if slot >= 0 else -1
    if off < 0:
        if changed:
            log_live(w, logs, issue)
        return TABLE_FULL if slot < 0 else ARENA_FULL
    sync = w[SYNC]
    # sync mode orders nothing (each op is done when its push returns): no read to note
    if not sync and not slotdeps.note_read(rows, links, pool, src, token, low):
        give_back(w, spare, nfree, off, nbytes)
        if changed:
            log_live(w, logs, issue)
        return READS_FULL
    keys[slot], offs[slot], sizes[slot] = out_var, off, nbytes
    dims[slot, 0], dims[slot, 1], dims[slot, 2] = d0, d1, dtype
    slotdeps.fresh(rows, slot)
    rows[slot, slotdeps.WRITER] = token
    log_live(w, logs, issue)  # one entry a call, at its issue: the deletion's and the take's
    answer = 0
    code, name = op & _CODE, op >> OP_BITS
    if sync:  # the op runs here and now, stamped as a worker would (sync mode)
        run_unary_stamped(s, token, code, dtype, n, in_addr, base + off, scalar, op_id, name,
                          issue)
    elif t.push_unary(s, token & (s[layout.H_CAP] - 1), token, SCALAR, code, dtype, n, in_addr,
                      base + off, scalar, rows[src, slotdeps.WRITER], op_id, name, issue):
        answer = HELD
    if len(logs) and 2 * w[LOGN] >= len(logs):
        answer |= READ_LOG
    return answer


PUSH_TYPES = (*[types.int64] * 6, types.float64, *[types.int64] * 2)


@njit(cache=True)
def drop(addr, var):
    """`push`'s deletion on its own, with the late buffers whose ops are done given back as a
    push gives them: 1 (given back), 0 (late), LATE_FULL or PYTHON_DROP (nothing done)."""
    (w, keys, offs, sizes, dims, rows, links, pool, preds, spare, nfree, made, lates,
     logs) = parts(addr)
    s = carray(pointer(w[STATE]), w[STATE_LEN], np.int64)
    low = load(s, layout.H_LOW)
    done = _drop(w, keys, offs, sizes, rows, links, pool, preds, spare, nfree, lates, var, low)
    if done >= 0 and done + give_back_due(w, lates, spare, nfree, low):
        log_live(w, logs, now_ns())
    return done


@njit(cache=True)
def due(addr, every):
    """Give back the late buffers whose ops are all done (`every`: all of them, nothing runs
    any more): how many."""
    (w, keys, offs, sizes, dims, rows, links, pool, preds, spare, nfree, made, lates,
     logs) = parts(addr)
    s = carray(pointer(w[STATE]), w[STATE_LEN], np.int64)
    n = give_back_due(w, lates, spare, nfree, (1 << 62) if every else load(s, layout.H_LOW))
    if n:
        log_live(w, logs, now_ns())
    return n


class Light:
    """The state's words (`words`, an int64 array whose address every call takes) and its arena
    (`arena`, bytes) for the engine whose table is `state`: `slots` light results at once,
    `nodes` reads in flight, an arena of `arena_bytes`."""

    def __init__(self, state: np.ndarray, slots: int = 1 << 14, arena_bytes: int = 8 << 20,
                 logs: int = 1 << 12, sync: bool = False):
        assert slots & (slots - 1) == 0, "slots: a power of two"
        nodes, lates = 4 * slots, 2 * slots
        spares = min(slots, arena_bytes // 8)
        sizes = {KEYS: slots, OFFS: slots, SIZES: slots, DIMS: 3 * slots, ROWS: 5 * slots,
                 LINKS: 2 * nodes, POOL: 1, PREDS: nodes + 1, SPARE: CLASSES * spares,
                 NFREE: CLASSES, MADE: CLASSES, LATEBUF: 3 * lates, LOGBUF: 2 * logs}
        self.words = w = np.zeros(HEADER + sum(sizes.values()), np.int64)
        at = HEADER
        for part, n in sizes.items():
            w[part], at = at, at + n
        w[SLOTS], w[NODES], w[LATES], w[LOGS], w[SPARES] = slots, nodes, lates, logs, spares
        w[w[KEYS]:w[KEYS] + slots] = EMPTY
        rows, links, _ = slotdeps.new_deps(slots, nodes)
        w[w[ROWS]:w[ROWS] + 5 * slots] = rows.ravel()
        w[w[LINKS]:w[LINKS] + 2 * nodes] = links.ravel()
        self.arena = np.zeros(arena_bytes, np.uint8)  # pages made as the arena's end moves
        self.state = state  # kept: the calls read the engine's table by its address
        w[ARENA], w[ARENA_BYTES] = self.arena.ctypes.data, arena_bytes
        w[STATE], w[STATE_LEN] = state.ctypes.data, len(state)
        w[SYNC] = sync  # each op run in its push (the engine's sync mode)
        self.addr = w.ctypes.data
        self.push = t.entry(push, PUSH_TYPES)
        self.drop = t.entry(drop, (types.int64, types.int64))
        self.due = t.entry(due, (types.int64, types.boolean))
        self.out = np.zeros(7 + nodes, np.int64)  # `adopt`'s answer
        self.logs = logs
        self.view = memoryview(w)  # single words read from Python: 30 ns, not numpy's 100

    def off(self) -> None:
        """Light pushes are over: each push from now on answers GENERAL, and takes the general
        path (the engine closed, a var poisoned, a GPU in use: none of them is undone)."""
        self.view[OFF] = 1

    def peek(self, var: int):
        """(offset, shape, dtype code, last write, -1 for none) of light result `var`, which
        stays one; None if not here."""
        if not peek(self.addr, var, self.out):
            return None
        off, _, d0, d1, dtype, writer = self.out[:6].tolist()
        return off, tuple(d for d in (d0, d1) if d >= 0), dtype, writer

    def adopt(self, var: int):
        """(offset, bytes, shape, dtype code, last write or None, reads) of light result
        `var`, which leaves the table (its buffer stays counted until `release`); None if not
        here."""
        if not adopt(self.addr, var, self.out):
            return None
        off, nbytes, d0, d1, dtype, writer, n = self.out[:7].tolist()
        shape = tuple(d for d in (d0, d1) if d >= 0)
        return (off, nbytes, shape, dtype, None if writer < 0 else writer,
                self.out[7:7 + n].tolist())

    def release(self, off: int, nbytes: int) -> None:
        release(self.addr, off, nbytes)

    def lend(self, var: int, address: int, writer: int | None, shape: tuple,
             dtype: int) -> bool:
        """Lend Python var `var` of `shape` (at most two dimensions) and dtype code `dtype` to
        the light pushes (see `lend`); False: the table is full."""
        d0, d1 = (shape + (-1, -1))[:2]  # (a missing dimension is -1)
        return lend(self.addr, var, address, -1 if writer is None else writer, d0, d1,
                    dtype) >= 0

    def unlend(self, var: int) -> list[int]:
        """The reads of lent var `var` since it was lent, and the var back (see `unlend`)."""
        n = unlend(self.addr, var, self.out)
        return self.out[:n].tolist() if n > 0 else []

    @property
    def live(self) -> int:
        return self.view[LIVE]

    def late(self) -> bool:
        """Whether deleted buffers wait on the late list for their ops."""
        view = self.view
        return view[LATE_HEAD] != view[LATE_TAIL]

    def log_half_full(self) -> bool:
        """Whether the memory log is half full (a push's `READ_LOG`): time to read it out."""
        return bool(self.logs) and 2 * self.view[LOGN] >= self.logs

    def read_log(self) -> np.ndarray | None:
        """The (time ns, live bytes) entries logged since the last read, as an (n, 2) array,
        and the log emptied; None if there are none."""
        w = self.words
        n = self.view[LOGN]
        if not n:
            return None
        entries = w[w[LOGBUF]:w[LOGBUF] + 2 * n].reshape(n, 2).copy()
        w[LOGN] = 0
        return entries
