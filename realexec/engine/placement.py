"""Where the compiled engine's CPU workers run: a worker that finds a busy worker on its core moves
itself to a core that neither a busy worker nor the (pushing) frontend uses.

Why: the OS queues a thread woken by a futex on or near the core of the thread that woke it,
and may leave it there for a scheduler tick or more (1-4 ms measured here) while the other core
idles. On the 2-core VMs this project measures on, a worker woken by the other (a completion
made two chains of ops ready) so started 1.5-4 ms late, and two workers drained two chains of
10 us ops no faster than one (1.0x; pinned to a core each: 1.9x). Pinning has costs of its own
(`engine="native-pinned"`), so the default engine corrects the OS only where it plainly went
wrong: before each op a worker reads its core (`sched_getcpu`, tens of ns); if a busy worker is
there too and a core is free, it asks the OS for that core and then gives itself every allowed
core back (two `sched_setaffinity` calls; the second does not move it). The core the frontend
pushes from is not free unless the frontend waits in a blocker (`layout.H_BLOCKING`).

Measured with `benchmarks/small_ops.py` (two chains of 200 x 2 ops queued behind a gate, 2
workers against 1, 2-core Intel Xeon VM): 400^2 float32 (11 us kernels) 0.98x before, 1.66-1.89x
after; a loop pushing the same ops one at a time runs at 0.9-1.0x, as before. Giving the
waker's core up at each wake-up (`sched_yield`) was tried as well: no better drained, and the
loop then ran 12% slower on two workers than on one.

A worker asleep is steered as well (`steer`): woken, the OS queued it on the core it last
ran on, behind the busy worker there, where it waited milliseconds before it ran at all, so the
correction above never came. Before a worker is woken, and as a blocker starts to wait, every
idle registered worker (`register`: the CPU lane's, unpinned) kept on a taken core may run only
on the cores free of busy workers and of the pushing frontend (one `sched_setaffinity` each); it
gives itself every allowed core back at its next op. With it (2-core Intel Xeon VM, same
session): ten independent 256x256 products on two workers ran at the same time in 20 of 20 runs
(6 of 20 before) in 0.52-0.54x the time of a chain of the same ten (0.83-0.85x); `small_ops.py`
drained 3 us ops 1.59-1.62x faster on two workers (0.99-1.04x) and 11 us ops 1.78-1.86x
(1.79-1.85x), and a loop pushing 11 us ops one at a time ran 1.32-1.34x faster (0.80-1.02x).
That also needed a worker back from Python ops to give its core up when it finds nothing to do
(`realexec.cpu.worker.work`): it kept it while it slept, and was taken for a busy worker there.
A spinning worker is never woken, so a push that queues an op for one steers it instead when it
went idle on the core the frontend pushes from (`unstarve`): the worker whose completion
ended a blocker had the frontend queued on its own core, and got no turn there while the
frontend issued (`small_ops`' chain: its first op waited 1-1.5 ms in 25 of 600 runs, none
after).

State (in the shared array of `realexec.engine.layout`, after the lane rings): the cores the process
may use and a scratch mask, each a cpu_set_t of `MASK_WORDS` int64 words, then per worker index its
core plus one while it runs ops (a worker running a Python op keeps its core, so one it wakes from
Python moves away from it); while idle, minus the core it went idle on plus one (0: it never ran),
written with plain stores (a steerer's with a compare-and-swap): a stale read costs one needless
move or one missed one, never a wrong result. After the cores, per worker index its thread id (0:
never steered; negative while steered). Cores 0..63 only; workers past `MAX_WORKERS`, or a process
allowed cores above 63, are never moved.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from realexec.engine import layout
from realexec.engine.atomics import cas, cpu, futex_wake, load, set_affinity, store

__all__ = ["allow", "register", "busy", "idle", "cores_of"]


def allow(state: np.ndarray, cores) -> bool:
    """Let the engine move its workers among `cores` (the process's own, e.g.
    `os.sched_getaffinity(0)`). False, and nothing turned on, for an empty set or one with a
    core above 63."""
    cores = sorted(cores)
    if not cores or cores[-1] >= 64:
        return False
    base = layout.places_at(int(state[layout.H_CAP]), int(state[layout.H_NEDGES]))
    mask = 0
    for c in cores:
        mask |= 1 << c
    state[base: base + layout.PLACE_WORDS] = 0
    state[base] = np.int64(np.uint64(mask).view(np.int64))
    state[layout.H_PLACES] = base
    return True


def register(state: np.ndarray, worker: int, tid: int) -> None:
    """Let a waker steer worker `worker`, whose OS thread id is `tid` (`threading.get_native_id`),
    to a free core before it wakes it (`steer`). Nothing where moves are off."""
    base = int(state[layout.H_PLACES])
    if base == 0 or worker >= layout.MAX_WORKERS or tid <= 0:
        return
    state[base + 2 * layout.MASK_WORDS + layout.MAX_WORKERS + worker] = tid
    state[layout.H_WORKERS] = max(int(state[layout.H_WORKERS]), worker + 1)


def cores_of(state: np.ndarray, workers: int) -> list[int]:
    """Each worker's core while it runs ops, -1 while idle (for tests and diagnostics)."""
    base = state[layout.H_PLACES]
    if base == 0:
        return [-1] * workers
    first = base + 2 * layout.MASK_WORDS
    return [int(c) - 1 if c > 0 else -1 for c in state[first: first + workers]]


@njit(nogil=True, cache=True)
def busy(s, worker):
    """Worker `worker` is about to run an op: if a busy worker shares its core, move it to a
    core of the process's that no busy worker uses; then say where it runs. Before every op, not
    only the first after a wake-up: the OS may move a busy thread onto another's core. The core
    the frontend pushes from counts as free only while the frontend waits in a blocker: a
    push-bound loop of 10 us ops ran 35% slower per op on two workers than on one when the
    second moved in beside the frontend (`benchmarks/small_ops.py`)."""
    base = s[layout.H_PLACES]
    if base == 0 or worker >= layout.MAX_WORKERS:
        return
    here = cpu()
    if here < 0 or here >= 64:
        return
    first = base + 2 * layout.MASK_WORDS
    if load(s, layout.H_WORKERS) <= worker:
        store(s, layout.H_WORKERS, worker + 1)  # a race may lose a worker here: it is seen next op
    tid = load(s, first + layout.MAX_WORKERS + worker)
    if tid < 0:  # a waker steered it here: every allowed core is its again
        set_affinity(s, base, layout.MASK_WORDS, 0)
        store(s, first + layout.MAX_WORKERS + worker, -tid)
    used = worker_cores(s, worker)
    if used & (1 << here):
        used |= pushing_core(s)  # the frontend runs there, pushing: leave it its core
        free = s[base] & ~used
        if free != 0:
            target = lowest(free)
            scratch = base + layout.MASK_WORDS
            s[scratch] = 1 << target
            set_affinity(s, scratch, layout.MASK_WORDS, 0)  # the OS moves this thread now
            set_affinity(s, base, layout.MASK_WORDS, 0)  # and may move it again later, as before
            here = target
    store(s, first + worker, here + 1)


@njit(nogil=True, cache=True)
def idle(s, worker):
    """Worker `worker` has no op to run: its core no longer counts as taken, and is kept as the
    core it last ran on (minus one, negated), where the OS will look first when it is woken."""
    base = s[layout.H_PLACES]
    if base != 0 and worker < layout.MAX_WORKERS:
        here = cpu()
        store(s, base + 2 * layout.MASK_WORDS + worker, -(here + 1) if 0 <= here < 64 else 0)


# -- steering, from compiled code: the engine's table calls these as it wakes or queues ---------
@njit(nogil=True, cache=True)
def worker_cores(s, skip):
    """The cores (a bit each, 0..63) where busy workers other than worker `skip` run ops now,
    as `busy` and `idle` keep them (placement on)."""
    first = s[layout.H_PLACES] + 2 * layout.MASK_WORDS
    used = 0
    for j in range(min(load(s, layout.H_WORKERS), layout.MAX_WORKERS)):
        c = load(s, first + j) - 1
        if j != skip and 0 <= c < 64:
            used |= 1 << c
    return used


@njit(nogil=True, cache=True)
def pushing_core(s):
    """The core (a bit) the frontend pushes from; 0 while it waits in a blocker (its core is
    free then) or before its first push."""
    front = load(s, layout.H_FRONT_CPU)
    if 0 <= front < 64 and load(s, layout.H_BLOCKING) == 0:
        return 1 << front
    return 0


@njit(nogil=True, cache=True)
def lowest(mask):
    """The lowest core whose bit is set in `mask` (nonzero)."""
    core = 0
    while not (mask >> core) & 1:
        core += 1
    return core


@njit(nogil=True, cache=True)
def wake_worker(s, lane):
    """Wake a sleeping worker of `lane` (its futex word bumped under the lock), steered first."""
    steer(s)
    futex_wake(s, layout.LANES + layout.LANE_FIELDS * lane + layout.Q_FUTEX, 1)


@njit(nogil=True, cache=True)
def steer(s):
    """Let each idle worker that can be steered (`realexec.engine.placement.register`), and is
    kept on a core a busy worker or the pushing frontend uses, run only on the cores free of
    both. Called before a worker is woken and as a blocker starts to wait (its core is then
    free). Woken, the OS queued a worker on the core it last ran on, behind the busy worker
    there, and left it there for milliseconds: the second of ten independent 200 us products
    ran after the first worker had done all ten in 14 of 20 runs. A steered worker gives itself
    every allowed core back at its next op (`placement.busy`). A worker is not steered beside
    the pushing frontend: a version that did ran a push-bound loop of 3 us ops on two workers at
    4.8-6.5 us an op, against 4.0 on one (4.5-5.0 without it; `benchmarks/small_ops.py`). It is
    steered off the pushing frontend's core even when no worker is busy: woken there, the first
    op of a chain waited behind a frontend issuing the other 99 (2 ms) while the other core idled
    (`small_ops`' chain of 100 products: 1.93-2.07 ms at the median, up to 8.1, before; 1.72-1.80,
    up to 2.9, after; fifteen runs each, twice)."""
    base = s[layout.H_PLACES]
    if base == 0:
        return
    cores = base + 2 * layout.MASK_WORDS
    tids = cores + layout.MAX_WORKERS
    taken = worker_cores(s, -1) | pushing_core(s)
    if taken == 0:
        return  # nothing to keep a worker off: the OS's placement is left alone
    free = s[base] & ~taken
    if free == 0:
        return
    target = lowest(free)
    mask = np.zeros(layout.MASK_WORDS, np.int64)
    mask[0] = free
    for j in range(min(load(s, layout.H_WORKERS), layout.MAX_WORKERS)):
        tid = load(s, tids + j)
        kept = load(s, cores + j)  # idle: minus one more than the core it is kept on
        if tid == 0 or kept > 0 or (kept < 0 and (free >> (-kept - 1)) & 1):
            continue
        # the worker says where it is kept itself as it goes idle or busy: only if it did not
        if cas(s, cores + j, kept, -(target + 1)) == kept:
            set_affinity(mask, 0, layout.MASK_WORDS, abs(tid))
            store(s, tids + j, -abs(tid))


@njit(nogil=True, cache=True)
def unstarve(s):
    """An op was queued for a spinning worker (none woken): if an idle worker is kept on the
    core the frontend pushes from, steer it off (`steer`). The worker that finished the last op
    before a blocker returned woke the frontend, and the OS queued the frontend on that
    worker's core, where the worker went on spinning: there it got no turn while the frontend
    issued, and `small_ops`' chain of 100 products waited for its first op until the frontend
    blocked, 1-1.5 ms, in 3-4% of runs (13 of 400; the other core idle)."""
    front = load(s, layout.H_FRONT_CPU)
    if front < 0 or front >= 64 or load(s, layout.H_BLOCKING) != 0:
        return
    cores = s[layout.H_PLACES] + 2 * layout.MASK_WORDS
    tids = cores + layout.MAX_WORKERS
    for j in range(min(load(s, layout.H_WORKERS), layout.MAX_WORKERS)):
        if load(s, cores + j) == -(front + 1) and load(s, tids + j) > 0:
            steer(s)
            return
