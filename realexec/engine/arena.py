"""The state of light results (`realexec.engine.light`): its words, and the compiled helpers
over them that the light calls share.

One int64 array: a header (`HEADER` words: sizes, where each part starts, the arena's and the
engine table's addresses, counters, the longest probe (`find`), and `OFF`: nonzero once light
pushes are over, the engine closed or a var poisoned or a GPU in use), then its parts: the var
table (keys by open addressing on the var id, with `EMPTY` and `GONE` slots; each slot's buffer
offset, bytes and dims), the dependency analysis by slot (`realexec.engine.slotdeps`: rows,
nodes, the free node list, room for an answer), the free buffers of each size class, the late
list (buffers whose var went, each with the last op on it) and the memory log. `parts` makes an
array over each part at every call, from the header. The arena itself is a separate uint8
array, cut in size classes of 8 << k bytes (k < `CLASSES`) off its end as they are first asked
for; a class never has more buffers than its free list has room for. No threads: one caller at
a time. Units: bytes, tokens, nanoseconds.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit

from realexec.engine.atomics import pointer

# the header's words: sizes, where each part starts (in words), addresses, counters
(SLOTS, NODES, LATES, LOGS, SPARES, KEYS, OFFS, SIZES, DIMS, ROWS, LINKS, POOL, PREDS, SPARE,
 NFREE, MADE, LATEBUF, LOGBUF, ARENA, ARENA_BYTES, STATE, STATE_LEN, BUMP, LIVE, LATE_HEAD,
 LATE_TAIL, LOGN, SYNC, OFF, PROBE) = range(30)
HEADER = 32
CLASSES = 10  # size classes of 8 << k bytes
EMPTY, GONE = -1, -2  # a var table's free slot, and one whose var went
LENT = -1  # the bytes of a lent Python var's slot: its buffer is not the arena's
ITEMSIZE = np.array([4, 8], np.int64)  # by dtype code (`realexec.cpu.native_ops.DTYPES`)


@njit(nogil=True, cache=True, inline="always")
def _at(addr, w, part):
    return pointer(addr + 8 * w[part])


@njit(nogil=True, cache=True)
def parts(addr):
    """The state at `addr`: its header and each part, as arrays over its words (made with
    their shapes: a reshape calls a helper of numba's, 7 of them a third of a push)."""
    w = carray(pointer(addr), HEADER, np.int64)
    n, nodes, i64 = w[SLOTS], w[NODES], np.int64
    return (w, carray(_at(addr, w, KEYS), n, i64), carray(_at(addr, w, OFFS), n, i64),
            carray(_at(addr, w, SIZES), n, i64), carray(_at(addr, w, DIMS), (n, 3), i64),
            carray(_at(addr, w, ROWS), (n, 5), i64), carray(_at(addr, w, LINKS), (nodes, 2), i64),
            carray(_at(addr, w, POOL), 1, i64), carray(_at(addr, w, PREDS), nodes + 1, i64),
            carray(_at(addr, w, SPARE), (CLASSES, w[SPARES]), i64),
            carray(_at(addr, w, NFREE), CLASSES, i64), carray(_at(addr, w, MADE), CLASSES, i64),
            carray(_at(addr, w, LATEBUF), (w[LATES], 3), i64),
            carray(_at(addr, w, LOGBUF), (w[LOGS], 2), i64))


@njit(nogil=True, cache=True)
def probe(keys, var, limit):
    """`var`'s slot, or -1: a look at `limit` slots at most from its own, stopping at EMPTY."""
    mask = len(keys) - 1
    i = var & mask
    for _ in range(min(len(keys), limit)):
        k = keys[i]
        if k == var:
            return i
        if k == EMPTY:
            return -1
        i = (i + 1) & mask
    return -1


@njit(nogil=True, cache=True)
def find(w, keys, var):
    """`var`'s slot, or -1. The look stops after `w[PROBE] + 1` slots, the farthest any var was
    put from its own: once the ids have gone round the table, every slot is taken or GONE, and
    a look for a var not here (a Python var's drop, an input to lend) went round it all (16384
    slots, 14 us)."""
    return probe(keys, var, w[PROBE] + 1)


@njit(nogil=True, cache=True)
def free_slot(w, keys, var):
    """A slot for a var not in the table, or -1 (full); `w[PROBE]` raised to its distance."""
    mask = len(keys) - 1
    i = var & mask
    for step in range(len(keys)):
        if keys[i] < 0:
            if step > w[PROBE]:
                w[PROBE] = step
            return i
        i = (i + 1) & mask
    return -1


@njit(nogil=True, cache=True)
def size_class(nbytes):
    """The smallest k with 8 << k >= nbytes."""
    k = 0
    while (8 << k) < nbytes:
        k += 1
    return k


@njit(nogil=True, cache=True)
def take(w, spare, nfree, made, nbytes):
    """A buffer of `nbytes`' class (its offset in the arena), or -1 when the arena is full."""
    k = size_class(nbytes)
    if nfree[k] > 0:
        nfree[k] -= 1
        off = spare[k, nfree[k]]
    elif w[BUMP] + (8 << k) <= w[ARENA_BYTES] and made[k] < w[SPARES]:
        off = w[BUMP]
        w[BUMP] += 8 << k
        made[k] += 1  # so its free list always has room for every buffer of the class
    else:
        return -1
    w[LIVE] += nbytes
    return off


@njit(nogil=True, cache=True)
def give_back(w, spare, nfree, off, nbytes):
    k = size_class(nbytes)
    spare[k, nfree[k]] = off
    nfree[k] += 1
    w[LIVE] -= nbytes


@njit(nogil=True, cache=True)
def give_back_due(w, lates, spare, nfree, low):
    """Give back the late buffers whose last op is below `low`, in the order they came: how
    many."""
    n = 0
    while w[LATE_HEAD] != w[LATE_TAIL]:
        late = lates[w[LATE_HEAD] % len(lates)]
        if late[2] >= low:
            break
        give_back(w, spare, nfree, late[0], late[1])
        w[LATE_HEAD] += 1
        n += 1
    return n


@njit(nogil=True, cache=True)
def log_live(w, logs, when):
    """Log the live bytes at `when` (ns)."""
    n = w[LOGN]
    if n < len(logs):  # (a frontend that never reads the log out loses the rest; none kept
        # when its length is 0: a run without a trace)
        logs[n, 0] = when
        logs[n, 1] = w[LIVE]
        w[LOGN] = n + 1
