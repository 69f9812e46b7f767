"""The workers' side of the compiled op table (`realexec.engine.table`): take a ready op off a
lane's queue, complete it and release its successors, and say whether a blocker's wait is over.

`table` pushes ops and queues the ready ones; this takes them out again. A worker in compiled
code (`realexec.cpu.worker`) calls `pop` and `complete` without the GIL; a thread running a
Python op calls `finish_and_pop_python`, which keeps the GIL while Python ops follow. `complete`
moves the low-water mark `H_LOW` and the done count `H_DONE`, wakes a lane's sleeping worker for
each successor it queues (`realexec.engine.placement.wake_worker`) and a sleeping blocker whose
condition now holds (`holds`, over `H_WAIT_KIND` and `H_WAIT_TARGET`). Every change of a record,
an edge or a queue is made under the table's spin lock, as `table`'s are.

Units: tokens (op numbers in push order); slots (a token's place in the table, token & (cap - 1)).
"""

from __future__ import annotations

from numba import njit

from realexec.engine.atomics import futex_wake, load, store
from realexec.engine.layout import (
    DONE,
    F_FAILED,
    F_KIND,
    F_LANE,
    F_PENDING,
    F_STATE,
    F_SUCC,
    F_TOKEN,
    FAILED_INHERITED,
    H_CAP,
    H_DONE,
    H_ECOUNT,
    H_EFREE,
    H_GEN,
    H_LOW,
    H_NEDGES,
    H_NEXT,
    H_SLEEPERS,
    H_WAIT_KIND,
    H_WAIT_TARGET,
    LANE_FIELDS,
    LANES,
    OPS,
    Q_HEAD,
    Q_TAIL,
    RUNNING,
    STRIDE,
    at,
)
from realexec.engine.placement import wake_worker
from realexec.engine.table import enqueue, is_done, lock, ready_at, unlock


@njit(nogil=True, cache=True)
def _pop(s, lane, python_only):
    """The slot of `lane`'s next ready op (now RUNNING), or -1; with `python_only`, only if
    Python must run it (kind 0, a Python kernel, or a failed predecessor)."""
    base = LANES + LANE_FIELDS * lane
    if load(s, base + Q_HEAD) == load(s, base + Q_TAIL):
        return -1
    lock(s)
    head = s[base + Q_HEAD]
    slot = -1
    if head != s[base + Q_TAIL]:
        slot = s[ready_at(s, lane, head)]
        if python_only and s[at(slot, F_KIND)] != 0 and s[at(slot, F_FAILED)] == 0:
            slot = -1
        else:
            store(s, base + Q_HEAD, head + 1)
            s[at(slot, F_STATE)] = RUNNING
    unlock(s)
    return slot


@njit(nogil=True, cache=True)
def pop(s, lane):
    """The slot of a ready op of `lane` (now RUNNING), or -1."""
    return _pop(s, lane, False)


@njit(nogil=True, cache=True)
def holds(s, kind, target):
    """Whether a blocker's condition holds: kind 0, token `target` is done; kind 1, `target`
    ops are done; kind 2, every op below token `target` is done."""
    if kind == 0:
        return is_done(s, target)
    if kind == 1:
        return load(s, H_DONE) >= target
    return load(s, H_LOW) >= target


@njit(nogil=True, cache=True)
def complete(s, slot, failed):
    """Op `slot` finished (`failed`: it or a predecessor failed); release its successors."""
    cap = s[H_CAP]
    edges = OPS + STRIDE * cap
    nedges = s[H_NEDGES]
    woken = 0  # a bit per lane whose sleeping worker must be woken
    lock(s)
    if failed:
        s[at(slot, F_FAILED)] = failed
    store(s, at(slot, F_STATE), DONE)
    e = s[at(slot, F_SUCC)]
    s[at(slot, F_SUCC)] = -1
    while e >= 0:
        nxt = s[edges + e]
        other = s[edges + nedges + e]
        s[edges + e] = s[H_EFREE]
        s[H_EFREE] = e
        s[H_ECOUNT] -= 1
        if failed:
            s[at(other, F_FAILED)] = FAILED_INHERITED
        left = s[at(other, F_PENDING)] - 1
        s[at(other, F_PENDING)] = left
        if left == 0:
            lane = s[at(other, F_LANE)]
            if enqueue(s, lane, other):
                woken |= 1 << lane
        e = nxt
    low, nxt_token = s[H_LOW], s[H_NEXT]
    while low < nxt_token:
        where = low & (cap - 1)
        if s[at(where, F_TOKEN)] == low and s[at(where, F_STATE)] != DONE:
            break
        low += 1
    store(s, H_LOW, low)
    store(s, H_DONE, s[H_DONE] + 1)
    wake = False
    if s[H_SLEEPERS] > 0:  # blockers register under the lock; wake them once a wait is over
        kind = s[H_WAIT_KIND]  # -1: several blockers sleep, wake them all each time
        if kind < 0 or holds(s, kind, s[H_WAIT_TARGET]):
            store(s, H_GEN, s[H_GEN] + 1)
            wake = True
    unlock(s)
    if wake:
        futex_wake(s, H_GEN, 1 << 30)
    lane = 0
    while woken:
        if woken & 1:
            wake_worker(s, lane)
        woken >>= 1
        lane += 1


@njit(cache=True)  # keeps the GIL: a worker thread calls it between Python ops
def finish_and_pop_python(s, lane, slot, failed):
    """Complete op `slot` (run in Python), then pop the lane's next ready op if Python must
    run it too (a Python kernel, or a failed predecessor): its slot, or -1. A thread running
    a run of Python ops so keeps the GIL across them, as a Python worker does, instead of
    letting it go (and waiting to take it back) at each."""
    complete(s, slot, failed)
    return _pop(s, lane, True)
