"""How threads wait on the compiled engine's table without the GIL: idle workers, blockers, stop.

- A worker with nothing to do (`idle`) spins for `H_SPIN_NS`, then sleeps on its lane's futex
  word, which `realexec.engine.table`'s `push` and `complete` bump. They wake it only when it
  sleeps, and only when more ops are queued than the lane has workers spinning (`Q_SPINNERS`,
  who will take them): before that rule each push of a loop of small ops woke the sleeping
  second worker only to find the op taken, a system call for the frontend and a context switch
  each. The waker first steers idle workers off busy workers' cores (`placement.steer`).
- A blocker (`wait`) spins only while a core is free of busy workers (`H_BUSY` < `H_CORES`),
  then sleeps on `H_GEN`, which every completion bumps; a completion makes the system call that
  wakes it only once the blocker's condition (`H_WAIT_KIND`, `H_WAIT_TARGET`) holds.
- `wake_all` wakes every sleeping worker and blocker once `H_STOP` is set.

Every sleep is bounded (50 ms for a worker, `sleep_ns` for a blocker), so the Python around it
sees a stop or a Ctrl-C. Units: nanoseconds (`atomics.now_ns`, Python's perf_counter_ns clock).
"""

from __future__ import annotations

from numba import njit

from realexec.engine.atomics import (
    cpu,
    fetch_add,
    futex_wait,
    futex_wake,
    load,
    now_ns,
    pause,
    sched_yield,
)
from realexec.engine.layout import (
    H_BLOCKING,
    H_BUSY,
    H_CORES,
    H_FRONT_CPU,
    H_GEN,
    H_SLEEPERS,
    H_SPIN_NS,
    H_SPINNING,
    H_STOP,
    H_WAIT_KIND,
    H_WAIT_TARGET,
    LANE_FIELDS,
    LANES,
    Q_FUTEX,
    Q_HEAD,
    Q_SLEEPERS,
    Q_SPINNERS,
    Q_TAIL,
)
from realexec.engine.placement import steer
from realexec.engine.ready import holds
from realexec.engine.table import lock, unlock


@njit(nogil=True, cache=True)
def idle(s, lane, since_ns, spinning):
    """A worker of `lane` found nothing to do at `since_ns`: spin a little, or, past the spin
    time, sleep on the lane's futex word until something is queued (or 50 ms). `spinning`: the
    worker is counted in the lane's `Q_SPINNERS`; returns whether it still is (the caller
    uncounts it with `unspin` once it takes an op)."""
    base = LANES + LANE_FIELDS * lane
    if now_ns() - since_ns < s[H_SPIN_NS]:
        # spin only on a core that neither the frontend nor a busy or spinning worker needs:
        # two idle workers spinning beside the frontend on two cores made each push 60% dearer;
        # and not on the core the frontend pushes from while it is awake: a worker pinned there
        # that spun took ops the other (asleep) could have run, and the frontend's core with them
        others = fetch_add(s, H_SPINNING, 1) + load(s, H_BUSY) + 1
        if others < s[H_CORES] and not (load(s, H_SLEEPERS) == 0
                                        and cpu() == load(s, H_FRONT_CPU)):
            if not spinning:
                fetch_add(s, base + Q_SPINNERS, 1)
            for _i in range(64):
                if load(s, base + Q_HEAD) != load(s, base + Q_TAIL) or load(s, H_STOP):
                    break
                pause()
            fetch_add(s, H_SPINNING, -1)
            sched_yield()
            return True
        fetch_add(s, H_SPINNING, -1)
    lock(s)
    if spinning:  # under the lock, before the look at the queue (see `table.enqueue`)
        fetch_add(s, base + Q_SPINNERS, -1)
    if s[base + Q_HEAD] != s[base + Q_TAIL] or s[H_STOP]:
        unlock(s)
        return False
    s[base + Q_SLEEPERS] += 1
    seen = s[base + Q_FUTEX]
    unlock(s)
    futex_wait(s, base + Q_FUTEX, seen, 50_000_000)
    lock(s)
    s[base + Q_SLEEPERS] -= 1
    unlock(s)
    return False


@njit(nogil=True, cache=True)
def unspin(s, lane):
    """A spinning worker of `lane` took an op: it no longer counts as one that will."""
    fetch_add(s, LANES + LANE_FIELDS * lane + Q_SPINNERS, -1)


@njit(nogil=True, cache=True)
def wake_all(s, lanes):
    """After `H_STOP` is set: wake every sleeping worker and blocker."""
    lock(s)  # a thread registering to sleep sees the stop, or the bumped word, not neither
    for lane in range(lanes):
        s[LANES + LANE_FIELDS * lane + Q_FUTEX] += 1
    s[H_GEN] += 1
    unlock(s)
    for lane in range(lanes):
        futex_wake(s, LANES + LANE_FIELDS * lane + Q_FUTEX, 1 << 30)
    futex_wake(s, H_GEN, 1 << 30)


@njit(nogil=True, cache=True)
def wait(s, kind, target, spin_ns, sleep_ns):
    """`_wait`, counted in `H_BLOCKING` meanwhile."""
    fetch_add(s, H_BLOCKING, 1)
    steer(s)  # this thread's core is free now: a worker kept behind a busy one may run there
    held = _wait(s, kind, target, spin_ns, sleep_ns)
    fetch_add(s, H_BLOCKING, -1)
    return held


@njit(nogil=True, cache=True)
def _wait(s, kind, target, spin_ns, sleep_ns):
    """Until the condition holds (True) or about spin_ns + sleep_ns pass (False): spin with
    `pause` (a `sched_yield` every ~5 us, so a worker sharing this core runs), then sleep on the
    completions' futex word. kind 0: token `target` is done; kind 1: `target` ops are done;
    kind 2: every op below token `target` is done."""
    start = now_ns()
    # a spinning blocker takes a core: only while one is free of busy workers (on 2 cores, two
    # workers draining short ops ran no faster than one beside a spinning frontend)
    while now_ns() - start < spin_ns and load(s, H_BUSY) < s[H_CORES]:
        for _i in range(200):
            if holds(s, kind, target) or load(s, H_STOP):
                return holds(s, kind, target)
            pause()
        sched_yield()
    if sleep_ns <= 0:
        return holds(s, kind, target)
    lock(s)
    if holds(s, kind, target) or s[H_STOP]:
        unlock(s)
        return holds(s, kind, target)
    if s[H_SLEEPERS] == 0:  # what it waits for, so a completion wakes it only then
        s[H_WAIT_KIND], s[H_WAIT_TARGET] = kind, target
    else:
        s[H_WAIT_KIND] = -1
    s[H_SLEEPERS] += 1
    seen = s[H_GEN]
    unlock(s)
    futex_wait(s, H_GEN, seen, sleep_ns)
    lock(s)
    s[H_SLEEPERS] -= 1
    unlock(s)
    return holds(s, kind, target)
