"""The compiled engine's op table: the compiled functions over the shared state
(`realexec.engine.layout`) that push ops and queue the ready ones; the workers' side, which pops
them and completes them, is `realexec.engine.ready`. None needs the GIL but the frontend's
pushes. The frontend calls `push` through its
compiled entry point (`entry`), not numba's dispatcher, which would work out every argument's
type at every call.

- An op's state: PENDING (waiting for `pending` predecessors), QUEUED, RUNNING, DONE. Its token is
  done when it is below the low-water mark `H_LOW` (every op before it is done too) or its slot
  still holds it in state DONE.
- `push` links the op behind each unfinished predecessor (an edge on that predecessor's successor
  list) and queues it when none is left (`enqueue`); `ready.complete` marks it done, bumps the
  counters, and releases its successors (a failed op marks them FAILED_INHERITED: the worker
  hands them to Python, which poisons their outputs where a var of theirs is poisoned and runs
  them where none is: `realexec.engine.threads`).
- One spin lock (`H_LOCK`) guards the records, edges and queues; every section under it is a few
  dozen instructions. Counters that threads read without the lock (done, low, queue ends, futex
  words) are read with acquire loads.
- Sleeping (`realexec.engine.sleep`): `push` and `complete` bump a lane's futex word to wake a
  sleeping worker only when more ops are queued than the lane has workers spinning
  (`Q_SPINNERS`, who will take them), steering idle workers off busy workers' cores first
  (`placement.steer`); a push steers a spinner off the pushing frontend's core
  (`placement.unstarve`); a completion wakes a sleeping blocker only once its condition
  (`H_WAIT_KIND`, `H_WAIT_TARGET`) holds.

Units: nanoseconds (`atomics.now_ns`, Python's perf_counter_ns clock).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit, types

from realexec.engine.atomics import (
    cas,
    cpu,
    load,
    now_ns,
    pause,
    sched_yield,
    store,
)
from realexec.engine.layout import (
    DONE,
    F_A,
    F_B,
    F_CODE,
    F_DTYPE,
    F_END,
    F_FAILED,
    F_ISSUE,
    F_ISSUED,
    F_KIND,
    F_LANE,
    F_N,
    F_NAME,
    F_OP,
    F_OUT,
    F_PENDING,
    F_SCALAR,
    F_START,
    F_STATE,
    F_SUCC,
    F_TOKEN,
    FAILED_INHERITED,
    H_CAP,
    H_ECOUNT,
    H_EFREE,
    H_FRONT_CPU,
    H_LOCK,
    H_LOW,
    H_NEDGES,
    H_NEXT,
    H_PLACES,
    LANE_FIELDS,
    LANES,
    OPS,
    PENDING,
    Q_FUTEX,
    Q_HEAD,
    Q_SLEEPERS,
    Q_SPINNERS,
    Q_TAIL,
    QUEUED,
    STRIDE,
    at,
)
from realexec.engine.placement import unstarve, wake_worker


@njit(nogil=True, cache=True)
def lock(s):
    spins = 0
    while cas(s, H_LOCK, 0, 1) != 0:
        while load(s, H_LOCK) != 0:
            pause()
            spins += 1
            if spins % 256 == 0:
                sched_yield()  # the holder may have lost its core: give it one


@njit(nogil=True, cache=True, inline="always")
def unlock(s):
    store(s, H_LOCK, 0)


@njit(nogil=True, cache=True)
def is_done(s, token):
    if token < load(s, H_LOW):
        return True
    cap = s[H_CAP]
    slot = token & (cap - 1)
    return load(s, at(slot, F_TOKEN)) != token or load(s, at(slot, F_STATE)) == DONE


@njit(nogil=True, cache=True, inline="always")
def ready_at(s, lane, i):
    """Where entry `i` of `lane`'s ready ring is."""
    cap = s[H_CAP]
    return OPS + STRIDE * cap + 2 * s[H_NEDGES] + lane * cap + (i & (cap - 1))


@njit(nogil=True, cache=True)
def enqueue(s, lane, slot):
    """Queue a ready op (the lock held); if a worker of the lane sleeps, bump the lane's futex
    word and return True (the caller wakes it after letting the lock go)."""
    s[at(slot, F_STATE)] = QUEUED
    base = LANES + LANE_FIELDS * lane
    tail = s[base + Q_TAIL]
    s[ready_at(s, lane, tail)] = slot
    store(s, base + Q_TAIL, tail + 1)
    if s[base + Q_SLEEPERS] == 0:  # sleepers register under the lock: none can be missed
        return False
    # a spinner stops spinning under the lock and looks at the queue first: none can miss it
    if tail + 1 - s[base + Q_HEAD] <= load(s, base + Q_SPINNERS):
        return False
    store(s, base + Q_FUTEX, s[base + Q_FUTEX] + 1)
    return True


@njit(nogil=True, cache=True)
def _link(s, slot, pred):
    """Put op `slot` behind `pred` unless it is done (the lock held). A done `pred` that failed
    passes its failure on, as `complete` does to the ops waiting for it: it may have failed
    after the frontend looked for poisoned vars (the GIL went to its worker in between), and
    the worker hands the op to Python, which runs it only if no var of its own is poisoned.
    With the edge pool empty (ops with many inputs, all in flight) it lets the lock go until a
    completion gives one back: the op holds a guard count, so it cannot start meanwhile."""
    if pred < 0:
        return
    while True:  # (a done `pred` may be found after a wait for an edge, too)
        if is_done(s, pred):
            if _failed(s, pred):
                s[at(slot, F_FAILED)] = FAILED_INHERITED
            return
        if s[H_EFREE] >= 0:
            break
        unlock(s)
        sched_yield()
        lock(s)
    cap = s[H_CAP]
    edges = OPS + STRIDE * cap
    e = s[H_EFREE]
    s[H_EFREE] = s[edges + e]
    succ = at(pred & (cap - 1), F_SUCC)
    s[edges + e] = s[succ]  # next
    s[edges + s[H_NEDGES] + e] = slot  # whom
    s[succ] = e
    s[at(slot, F_PENDING)] += 1
    s[H_ECOUNT] += 1


@njit(cache=True)  # keeps the GIL: a release for 1 us per push invited the workers' Python ops
def push(s, slot, token, lane, kind, code, dtype, n, a, b, out, scalar, failed,
         p0, p1, p2, more, op_id, name, issue):
    """Record op `token` in `slot` and queue it behind its predecessors p0..p2 and `more` (an
    int64 array; -1 = none). True if it is ready now. `op_id`, `name` (a number) and `issue`
    (when the push began, ns) are kept for the trace, with the push's end. Called by the
    frontend, which keeps the GIL through it: releasing it around a call this short only starts
    GIL hand-overs to worker threads that wait for it (a wake-up each), as a pure-Python push
    never did."""
    _record(s, slot, token, lane, kind, code, dtype, n, a, b, out, scalar, failed, op_id, name,
            issue)
    _link(s, slot, p0)
    _link(s, slot, p1)
    _link(s, slot, p2)
    for p in more:
        _link(s, slot, p)
    return _release(s, slot, lane)


@njit(cache=True)  # keeps the GIL, as `push` does
def push_unary(s, slot, token, kind, code, dtype, n, a, out, scalar, pred, op_id, name, issue):
    """`push(s, slot, token, 0, kind, code, dtype, n, a, a, out, scalar, 0, pred, -1, -1, (),
    op_id, name, issue)`: the commonest op, `y = x + 1` on the CPU lane, with one predecessor
    at most. Its own entry point because each argument costs the call ~25 ns to convert: 14
    instead of 20 (`realexec.engine.pushes.Pushes.push_unary`). Returns 0, or
    FAILED_INHERITED when `pred`, the last write of its input, has failed (`_link`): the op is
    then held (not queued) until `release_held`."""
    _record(s, slot, token, 0, kind, code, dtype, n, a, a, out, scalar, 0, op_id, name, issue)
    _link(s, slot, pred)
    if s[at(slot, F_FAILED)]:  # `pred` failed after the frontend looked (`_link`); the op
        unlock(s)  # may have no Python record yet: held by its guard until it has one
        return FAILED_INHERITED
    _release(s, slot, 0)
    return 0


@njit(nogil=True, cache=True)
def _failed(s, token):
    """Whether done op `token` failed, as far as its slot still says (the lock held)."""
    where = token & (s[H_CAP] - 1)
    return s[at(where, F_TOKEN)] == token and s[at(where, F_FAILED)] != 0


@njit(cache=True)
def release_held(s, slot, lane):
    """The second half of a push that `push_unary` held back (its predecessor had failed): the
    frontend has written the op's Python record, which the worker that runs it reads."""
    lock(s)
    _release(s, slot, lane)


@njit(nogil=True, cache=True, inline="always")
def _record(s, slot, token, lane, kind, code, dtype, n, a, b, out, scalar, failed, op_id, name,
            issue):
    """A push's first half: take the lock and write the op's record (`_release` lets go)."""
    lock(s)
    s[at(slot, F_TOKEN)] = token
    s[at(slot, F_STATE)] = PENDING
    s[at(slot, F_PENDING)] = 1  # a guard while it is linked
    s[at(slot, F_SUCC)] = -1
    s[at(slot, F_LANE)] = lane
    s[at(slot, F_KIND)] = kind
    s[at(slot, F_CODE)] = code
    s[at(slot, F_DTYPE)] = dtype
    s[at(slot, F_N)] = n
    s[at(slot, F_A)] = a
    s[at(slot, F_B)] = b
    s[at(slot, F_OUT)] = out
    s.view(np.float64)[at(slot, F_SCALAR)] = scalar
    s[at(slot, F_START)] = 0
    s[at(slot, F_END)] = 0
    s[at(slot, F_FAILED)] = failed
    s[at(slot, F_OP)] = op_id
    s[at(slot, F_NAME)] = name
    s[at(slot, F_ISSUE)] = issue
    store(s, H_NEXT, token + 1)
    store(s, H_FRONT_CPU, cpu())


@njit(nogil=True, cache=True, inline="always")
def _release(s, slot, lane):
    """A push's second half, its predecessors linked: drop the guard, queue the op if none is
    left, let the lock go, wake or steer a worker, stamp the push's end. True if queued."""
    left = s[at(slot, F_PENDING)] - 1
    s[at(slot, F_PENDING)] = left
    wake = False
    if left == 0:
        wake = enqueue(s, lane, slot)
    unlock(s)
    if wake:
        wake_worker(s, lane)
    elif left == 0 and s[H_PLACES] != 0:
        unstarve(s)
    s[at(slot, F_ISSUED)] = now_ns()  # only the frontend reads it, and it is the caller
    return left == 0


# push's argument types: the state, ten ints (slot .. out), the scalar, four ints (failed, p0..p2),
# the `more` array, three ints (op_id, name, issue); push_unary's: the state, eight ints (slot ..
# out), the scalar, four ints (pred, op_id, name, issue)
PUSH_TYPES = (types.int64[::1], *[types.int64] * 10, types.float64, *[types.int64] * 4,
              types.int64[::1], *[types.int64] * 3)
PUSH_UNARY_TYPES = (types.int64[::1], *[types.int64] * 8, types.float64, *[types.int64] * 4)


@functools.cache  # an engine asks at its start; compiling, even from the cache, takes ms
def entry(dispatcher, argtypes: tuple):
    """The compiled function behind `dispatcher` for exactly `argtypes`, to be called without
    the dispatcher: it works out the numba type of every argument at every call, which cost
    `push` 0.3 of its 0.63 us (20 arguments, AMD EPYC VM). The entry point converts each
    argument to its declared type (an int where a float is declared, a numpy integer) and raises
    TypeError for an array of another dtype, as the dispatcher would. The dispatcher itself
    where numba compiles nothing (`NUMBA_DISABLE_JIT`)."""
    if not hasattr(dispatcher, "overloads"):
        return dispatcher
    dispatcher.compile(argtypes)  # from numba's cache when it holds it
    return dispatcher.overloads[argtypes].entry_point
