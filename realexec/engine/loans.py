"""What Python takes from, and lends to, the state of light results (`realexec.engine.light`):
compiled calls of one look each, called by the backend (`realexec.cpu.light`) through the
state's `Light`.

- `peek`: where a light result lies and its last write, for a blocker that reads it in place;
- `adopt`: a light result leaves the state for a Python var (another kind of op reads it): its
  last write and reads go to the Python analysis, its buffer stays counted until `release`;
- `lend` and `unlend`: a Python var whose last write is done is read by light pushes, which note
  their reads in the state, until an op writes it or it is deleted; `unlend` hands those reads
  back to the Python analysis.

No threads: the frontend is the one caller. Units: bytes, tokens, nanoseconds.
"""

from __future__ import annotations

from numba import njit

from realexec.engine import slotdeps
from realexec.engine.arena import GONE, LENT, find, free_slot, give_back, log_live, parts
from realexec.engine.atomics import now_ns


@njit(nogil=True, cache=True)
def _look(w, keys, offs, sizes, dims, rows, var, out):
    """Light result `var`'s slot (-1: not here), and its buffer offset, bytes, dims, dtype
    code and last write (-1: none) into `out`."""
    slot = find(w, keys, var)
    if slot >= 0:
        out[0], out[1], out[2], out[3] = offs[slot], sizes[slot], dims[slot, 0], dims[slot, 1]
        out[4], out[5] = dims[slot, 2], rows[slot, slotdeps.WRITER]
    return slot


@njit(cache=True)
def peek(addr, var, out):
    """`_look` at light result `var`, left as it is (a blocker waits for it and reads it).
    False if not here."""
    (w, keys, offs, sizes, dims, rows, links, pool, preds, spare, nfree, made, lates,
     logs) = parts(addr)
    return _look(w, keys, offs, sizes, dims, rows, var, out) >= 0


@njit(cache=True)
def adopt(addr, var, out):
    """Light result `var` leaves the table for a Python var: `out` gets what `_look` gives, and
    its reads since its last write after their count (out[6]); its buffer stays counted until
    `release`. False if `var` is not here."""
    (w, keys, offs, sizes, dims, rows, links, pool, preds, spare, nfree, made, lates,
     logs) = parts(addr)
    slot = _look(w, keys, offs, sizes, dims, rows, var, out)
    if slot < 0:
        return False
    read = rows[slot, slotdeps.HEAD] >= 0
    n = slotdeps.drop(rows, links, pool, slot, preds)
    out[6] = n if read else 0
    for i in range(out[6]):
        out[7 + i] = preds[i]
    keys[slot] = GONE
    return True


@njit(cache=True)
def lend(addr, var, address, writer, d0, d1, dtype):
    """Python var `var` (its buffer at `address`, its last write `writer`, -1: none, done; of
    shape (d0, d1), a dimension -1 for none, and dtype code `dtype`, which a light push of it
    gives its output) is read by light pushes from now on: their reads are noted here until
    `unlend`. Its slot, or -1 (the var table is full)."""
    (w, keys, offs, sizes, dims, rows, links, pool, preds, spare, nfree, made, lates,
     logs) = parts(addr)
    slot = free_slot(w, keys, var)
    if slot < 0:
        return -1
    keys[slot], offs[slot], sizes[slot] = var, address, LENT
    dims[slot, 0], dims[slot, 1], dims[slot, 2] = d0, d1, dtype
    slotdeps.fresh(rows, slot)
    rows[slot, slotdeps.WRITER] = writer
    return slot


@njit(cache=True)
def unlend(addr, var, out):
    """Lent var `var` goes back to the Python analysis: its reads since `lend` into `out`, their
    count returned (-1: not lent)."""
    (w, keys, offs, sizes, dims, rows, links, pool, preds, spare, nfree, made, lates,
     logs) = parts(addr)
    slot = find(w, keys, var)
    if slot < 0:
        return -1
    read = rows[slot, slotdeps.HEAD] >= 0
    n = slotdeps.drop(rows, links, pool, slot, preds)
    keys[slot] = GONE
    if not read:
        return 0
    for i in range(n):
        out[i] = preds[i]
    return n


@njit(cache=True)
def release(addr, off, nbytes):
    """An adopted buffer back (every op on it is done: the Python deletion waited)."""
    (w, keys, offs, sizes, dims, rows, links, pool, preds, spare, nfree, made, lates,
     logs) = parts(addr)
    give_back(w, spare, nfree, off, nbytes)
    log_live(w, logs, now_ns())
