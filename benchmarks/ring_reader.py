"""A push that makes no call, with a compiled thread reading its records: the frontend's floor
measured with the records taken on the other core as they come.

`push_parts.py`'s "ring, no call" writes each op's record into an int64 ring that nothing reads.
An engine built that way would have a compiled thread take the records: find each op's
predecessors (the dependency analysis by var slot, `slotdeps`), give its output a buffer (a
free list per size class over one arena), have the op run, and take a deletion's buffer back
once the ops on it are done. Its reads pull the ring's lines from the frontend's core, and the
frontend's next stores pull them back: `RingReader` is that thread, so that "ring, compiled
reader" is the floor with those transfers in it. Two ways to run the ops:
- itself, in push order as it takes them ("ring, compiled reader"): every predecessor it finds
  is done, and its low mark is the op's own token;
- pushed into a compiled engine's table behind their predecessors
  (`realexec.engine.table.push_unary`), for the engine's workers ("ring, reader into the
  engine"): a freed buffer waits until the engine's low mark passes the last op on it, and a
  token waits until the op that last held its slot is done.
It stands for no more than that: no pool accounting, no spans, no failures, float32 only, the
one op `y = x + scalar`.

The ring (int64 words): [0] the tail, where the frontend writes next; [1] the head, where the
reader reads next, written back once per batch it takes; [2] stop; [3] the predecessors found;
[4] the ops taken; records from word 8: an op (op id >= 0, op code, input var, output var,
bytes, scalar as a float64), a creation (-2, var, bytes, fill value as a float64), a deletion
(-1, var). A record starts below `wrap` and is never split; the frontend re-reads the head only
when the room it last saw is used up. A creation takes no token: the reader writes it before
any later op is taken.
"""

from __future__ import annotations

import threading
import time

import numpy as np
from numba import njit
from overhead import NullBackend

from realexec.cpu.loops import ADD
from realexec.cpu.native_ops import SCALAR
from realexec.engine import layout, table
from realexec.engine import slotdeps as deps
from realexec.engine.arena import EMPTY, GONE, probe  # a free slot, a GONE one, a look
from realexec.engine.atomics import load, now_ns, pause, sched_yield, store

TABLE_FULL, ARENA_FULL, NODES_FULL = -1, -2, -3  # why the reader stopped: the stop word
DELETE_KIND, CREATE_KIND = -1, -2  # a record's first word, where an op's has its op id
OP, CREATE, DELETE = 6, 4, 2  # words per record
CLASS = 16  # float32 items in the smallest size class; class k holds CLASS << k
CLASSES = 24  # size classes: arrays of up to CLASS << (CLASSES - 1) float32
SPIN = 256  # empty looks at the ring, a `pause` apart (some microseconds), before yielding
# the frontend's wait for room or for the reader: a sleep, so that the cores go to the workers
# (a blocker of the real engine sleeps on a futex the last op wakes; this one looks again)
WAIT_S = 20e-6


@njit(nogil=True, cache=True)
def _find(keys, var):
    """`var`'s slot, or -1 (a look that may go round the table: this one keeps no PROBE)."""
    return probe(keys, var, len(keys))


@njit(nogil=True, cache=True)
def _take(keys, offs, sizes, free, nfree, bump, items, var, nbytes):
    """A slot for the new `var`, its buffer of `nbytes` (at `offs[slot]` in the arena of `items`
    float32) taken: the slot, or TABLE_FULL, or ARENA_FULL."""
    mask = len(keys) - 1
    i = var & mask
    for _ in range(len(keys)):
        if keys[i] < 0:
            break
        i = (i + 1) & mask
    else:
        return TABLE_FULL
    cls = _class(nbytes)
    if nfree[cls] > 0:
        nfree[cls] -= 1
        at = free[cls, nfree[cls]]
    elif bump[0] + (CLASS << cls) <= items:
        at = bump[0]
        bump[0] += CLASS << cls
    else:
        return ARENA_FULL
    keys[i], offs[i], sizes[i] = var, at, nbytes
    return i


@njit(nogil=True, cache=True)
def _class(nbytes):
    """The size class of an array of `nbytes`: the smallest k with CLASS << k float32."""
    k = 0
    while (CLASS << k) * 4 < nbytes:
        k += 1
    return k


@njit(nogil=True, cache=True)
def _give_back(free, nfree, off, nbytes):
    cls = _class(nbytes)
    free[cls, nfree[cls]] = off
    nfree[cls] += 1


@njit(nogil=True, cache=True)
def _due(s, late, due, held, free, nfree):
    """Give back the freed buffers whose last op the engine has done, oldest first: the new
    count given back."""
    low = load(s, layout.H_LOW)
    while due < held and late[due % len(late), 2] < low:
        _give_back(free, nfree, late[due % len(late), 0], late[due % len(late), 1])
        due += 1
    return due


@njit(nogil=True, cache=True)
def read(ring, scalars, keys, offs, sizes, arena, free, nfree, bump, wrap, rows, nodes, pool,
         preds, s, late):
    """The reader's life: take records until stop is set and the ring is empty; out of room in
    the table, the arena or the analysis's nodes it sets stop to TABLE_FULL, ARENA_FULL or
    NODES_FULL and returns. With an empty `s` it runs each op itself, in push order; with an
    engine's state `s` it pushes each op into the engine's table behind its predecessor, for
    the engine's workers to run, and keeps a freed buffer in `late` (offset, bytes, the last
    token that touches it) until that op is done. ring[3]: the predecessors the analysis found;
    ring[4]: the ops taken."""
    head, empty, token, due, held = 8, 0, 0, 0, 0
    engine = len(s) > 0
    cap = s[layout.H_CAP] if engine else 1
    base, name = arena.ctypes.data, 0
    while True:
        if engine:
            due = _due(s, late, due, held, free, nfree)
        tail = load(ring, 0)
        if tail == head:
            if load(ring, 2) != 0:
                return
            empty += 1
            # a spin, then the core back to the OS at each look: where the VM has lent the
            # process one core, the frontend that fills the ring runs
            if empty < SPIN:
                pause()
            else:
                sched_yield()
            continue
        empty = 0
        while head != tail:
            kind = ring[head]
            low = load(s, layout.H_LOW) if engine else token  # every op below it is done
            if kind == DELETE_KIND:
                slot = _find(keys, ring[head + 1])
                if slot >= 0:
                    last = -1
                    for i in range(deps.drop(rows, nodes, pool, slot, preds)):
                        last = max(last, preds[i])
                    if last < low:
                        _give_back(free, nfree, offs[slot], sizes[slot])
                    else:
                        while held - due == len(late):  # full: wait for the oldest
                            sched_yield()
                            due = _due(s, late, due, held, free, nfree)
                        late[held % len(late)] = offs[slot], sizes[slot], last
                        held += 1
                    keys[slot] = GONE
                head += DELETE
            else:
                fresh = 3 if kind >= 0 else 1  # the word of the new var: an op's, a creation's
                while True:
                    slot = _take(keys, offs, sizes, free, nfree, bump, len(arena),
                                 ring[head + fresh], ring[head + fresh + 1])
                    if slot != ARENA_FULL or due == held:
                        break
                    sched_yield()  # buffers come back as the engine's ops finish
                    due = _due(s, late, due, held, free, nfree)
                if slot < 0:
                    store(ring, 2, slot)
                    return
                deps.fresh(rows, slot)  # (a creation is written here, before any op reads it)
                out, n = offs[slot], ring[head + fresh + 1] // 4
                if kind >= 0:  # y = x + scalar, after the last write of x
                    src = _find(keys, ring[head + 2])
                    pred = deps.add_fresh(rows, nodes, pool, token, src, slot, low)
                    if pred == deps.OUT_OF_NODES - 1:  # (-1 is "no predecessor")
                        store(ring, 2, NODES_FULL)
                        return
                    ring[3] += pred >= 0
                    src, scalar = offs[src], scalars[head + 5]
                    if engine:
                        while token - cap >= load(s, layout.H_LOW):  # its slot's op not done
                            sched_yield()
                        table.push_unary(s, token & (cap - 1), token, SCALAR, ADD, 0, n,
                                         base + 4 * src, base + 4 * out, scalar, pred,
                                         ring[head], name, now_ns())
                    else:
                        for j in range(n):
                            arena[out + j] = arena[src + j] + np.float32(scalar)
                    token += 1
                    ring[4] = token
                    head += OP
                else:
                    arena[out:out + n] = np.float32(scalars[head + 3])
                    head += CREATE
            if head >= wrap:
                head = 8
        store(ring, 1, head)


def creatable(op, out_var, who: str) -> None:
    """NotImplementedError unless `op` makes an array that `who` keeps: float32 ones or zeros
    of at most the largest size class."""
    if op.name not in ("ones", "zeros") or out_var.dtype != "float32":
        raise NotImplementedError(f"{op.name}: {who} only makes float32 ones and zeros, and "
                                  "adds a scalar")
    if out_var.nbytes > (CLASS << (CLASSES - 1)) * 4:
        raise NotImplementedError(f"{op.name}: {who} keeps arrays of up to "
                                  f"{CLASS << (CLASSES - 1)} float32, not {out_var.shape}")


class RingReader(NullBackend):
    """`ND`'s backend for "ring, compiled reader": its pushes and deletions are records in the
    ring, which `read` takes on a thread of its own from `start` to `close`. Each method writes
    its record and moves the tail itself, not through a shared helper: a call more per op would
    be part of the floor this measures."""

    def __init__(self, slots: int = 1 << 16, table: int = 1 << 14, items: int = 1 << 20,
                 engine=None):
        self.words = np.zeros(slots, np.int64)
        self.words[:2] = 8  # the ring is empty: head and tail at the first record
        self.ints = memoryview(self.words)
        self.floats = self.ints.cast("B").cast("d")
        self.codes = {"add_scalar": ADD}
        self.tail, self.wrap = 8, slots - 16
        self.room = 0  # records the frontend may write before it looks at the head again
        self.keys = np.full(table, EMPTY, np.int64)
        self.offs = np.zeros(table, np.int64)
        self.sizes = np.zeros(table, np.int64)
        self.arena = np.zeros(items, np.float32)
        # each class's free buffers: no more than were ever live at once, the table's vars and
        # as many freed ones waiting in `late` for their last op
        self.spare = np.zeros((CLASSES, 2 * table), np.int64)
        self.nfree = np.zeros(CLASSES, np.int64)
        self.bump = np.zeros(1, np.int64)
        self.rows, self.nodes, self.pool = deps.new_deps(table, 4 * table)
        self.preds = np.empty(4 * table + 1, np.int64)
        self.late = np.zeros((table, 3), np.int64)
        # a `realexec.engine.native.NativeEngine` whose table the reader pushes into, or None
        self.engine = engine
        self.thread = None

    def start(self) -> RingReader:
        args = (self.words, self.words.view(np.float64), self.keys, self.offs, self.sizes,
                self.arena, self.spare, self.nfree, self.bump, self.wrap, self.rows, self.nodes,
                self.pool, self.preds,
                np.empty(0, np.int64) if self.engine is None else self.engine.state, self.late)
        self.thread = threading.Thread(target=read, args=args, daemon=True)
        self.thread.start()
        return self

    def close(self) -> None:
        """Stop the reader once it has taken every record (a stop word it set stays)."""
        if self.ints[2] == 0:
            self.ints[2] = 1
        self.thread.join()

    def _make_room(self) -> None:
        # the words from the tail up to the head (as last written back) are free; each record
        # is counted as an op's, the longest, and two are kept spare
        while True:
            self._alive()
            head, tail = self.ints[1], self.tail
            if head > tail:
                words = head - tail
            else:
                words = (self.wrap - tail) + (head - 8)
            self.room = words // OP - 2
            if self.room > 0:
                return
            time.sleep(WAIT_S)

    def _alive(self) -> None:
        """Raise if the reader will take no more records: a wait for it would never end."""
        if self.ints[2] == TABLE_FULL:
            raise RuntimeError("ring reader: its var table is full (more live arrays than "
                               f"{len(self.keys)})")
        if self.ints[2] == ARENA_FULL:
            raise RuntimeError(f"ring reader: its arena of {len(self.arena)} float32 is full")
        if self.ints[2] == NODES_FULL:
            raise RuntimeError(f"ring reader: {len(self.nodes)} reads in flight fill its "
                               "dependency analysis")
        if self.thread is None or not self.thread.is_alive():
            raise RuntimeError("ring reader: not running (start it; or it was closed)")

    def issue(self, op, out_var, host) -> None:
        creatable(op, out_var, "the ring's reader")
        if self.room <= 0:
            self._make_room()
        self.room -= 1
        at, ints = self.tail, self.ints
        ints[at] = CREATE_KIND
        ints[at + 1] = out_var.id
        ints[at + 2] = out_var.nbytes
        self.floats[at + 3] = 1.0 if op.name == "ones" else 0.0
        at += CREATE
        self.tail = at if at < self.wrap else 8
        ints[0] = self.tail

    def issue_same(self, op_id, name, reads, var, shape, dtype, device, attrs, nbytes):
        try:  # free when nothing is raised (CPython 3.11+), where a test costs a little
            code = self.codes[name]
        except KeyError:
            raise NotImplementedError(f"{name}: the ring's reader only adds a scalar") from None
        if self.room <= 0:
            self._make_room()
        self.room -= 1
        at, ints = self.tail, self.ints
        ints[at] = op_id
        ints[at + 1] = code
        ints[at + 2] = reads[0]
        ints[at + 3] = var
        ints[at + 4] = nbytes
        self.floats[at + 5] = attrs["scalar"]
        at += OP
        self.tail = at if at < self.wrap else 8
        ints[0] = self.tail

    def free(self, var) -> None:
        # a reader that has stopped: the record is written while there is room, then
        # `_make_room` raises, which `NDArray.__del__` drops (never a wait)
        if self.room <= 0:
            self._make_room()
        self.room -= 1
        at, ints = self.tail, self.ints
        ints[at] = DELETE_KIND
        ints[at + 1] = var
        at += DELETE
        self.tail = at if at < self.wrap else 8
        ints[0] = self.tail

    def sync(self, kind, var):
        """Wait until the reader has taken every record; then a var's values (a copy)."""
        while self.ints[1] != self.ints[0]:
            self._alive()
            time.sleep(WAIT_S)
        if self.engine is not None:  # and the engine has run every op it was given
            while self.engine.state[layout.H_DONE] < self.ints[4]:
                time.sleep(WAIT_S)
        if var is None:
            return None
        slot = _find(self.keys, var)
        return self.arena[self.offs[slot]:self.offs[slot] + self.sizes[slot] // 4].copy()


class Unread(RingReader):
    """The ring with nothing reading it ("ring, no call"): the frontend's records alone. It wraps
    over what it wrote before: the room it sees is always the whole ring."""

    def _make_room(self) -> None:
        self.room = (self.wrap - 8) // OP - 2

    def sync(self, kind, var):
        return None
