"""The compiled engine's shared state, laid out: one int64 array holding the op table, the
successor edges, each lane's ready queue and the workers' places (`new_state`).

Why one array: a compiled call from Python costs ~25 ns per argument to unbox, so everything a
worker and the frontend share is one argument; Python reads single items through an `array('q')`
over the same memory (`realexec.engine.native`).

Layout: a header of counters, a header per lane, then the op records of `cap` slots (op token t
lives in slot t % cap; `at(slot, field)`), the edge pool, per lane a ring of `cap` slots, and the
placement words (`realexec.engine.placement`). An op's state is PENDING (waiting for its
predecessors), QUEUED, RUNNING or DONE. What the compiled functions do over it is in
`realexec.engine.table` (push, complete, pop) and `realexec.engine.placement` (steering).

Units: words (int64) for every offset; nanoseconds for times (`atomics.now_ns`).
"""

from __future__ import annotations

from array import array

import numpy as np
from numba import njit

# header: words written by different threads sit on different 64-byte cache lines
H_LOCK, H_EFREE, H_ECOUNT = 0, 1, 2  # taken together, under the lock
H_NEXT, H_FRONT_CPU = 8, 9  # written by the frontend's push: the next token, its core
H_DONE, H_LOW, H_GEN = 16, 17, 18  # written by completions
H_SLEEPERS, H_WAIT_KIND, H_WAIT_TARGET = 24, 25, 26  # blockers asleep, and what one waits for
H_STOP, H_CAP, H_NEDGES, H_SPIN_NS, H_CORES = 32, 33, 34, 35, 36  # read-mostly
H_GEMM = 37  # read-mostly: the sgemm and dgemm addresses (H_GEMM + dtype; 0: none)
H_PLACES = 39  # read-mostly: where the workers' cores are kept (`realexec.engine.placement`);
# 0: workers are not moved
H_BUSY, H_SPINNING = 40, 41  # worker threads running ops now, and idle ones spinning
H_BLOCKING = 42  # threads inside `wait` (a frontend there leaves its core to the workers)
H_WORKERS = 43  # worker indices seen by `placement.busy` (one past the highest)
LANES, LANE_FIELDS, MAX_LANES = 48, 8, 16  # a lane's header: a cache line
Q_HEAD, Q_TAIL, Q_FUTEX, Q_SLEEPERS, Q_SPINNERS = range(5)
OPS = LANES + LANE_FIELDS * MAX_LANES
# an op record: these fields, contiguous, then padding to 3 cache lines (the frontend writes a
# record while a worker stamps the one before it). F_OP, F_NAME (an index into the engine's
# names) and F_ISSUE..F_ISSUED (the push's own span) are for the trace only: the frontend reads
# them out in blocks, never per op
(F_TOKEN, F_STATE, F_PENDING, F_SUCC, F_LANE, F_KIND, F_CODE, F_DTYPE, F_N, F_A, F_B, F_OUT,
 F_SCALAR, F_START, F_END, F_WORKER, F_FAILED, F_OP, F_NAME, F_ISSUE, F_ISSUED) = range(21)
STRIDE = 24
PENDING, QUEUED, RUNNING, DONE = 1, 2, 3, 4
FAILED_OWN, FAILED_INHERITED = 1, 2
EDGES_PER_OP = 4  # the edge pool: a successor list entry per dependency in flight
# after the rings: the cores the process may use and a scratch mask (cpu_set_t, 1024 bits each);
# per worker the core it runs an op on now, plus one (idle: minus the core it went idle on, plus
# one; 0: it never ran); and per worker its thread id
# (0: not to be steered; negative: steered, its affinity to be given back at its next op);
# `realexec.engine.placement`
MASK_WORDS, MAX_WORKERS = 16, 64
PLACE_WORDS = 2 * MASK_WORDS + 2 * MAX_WORKERS


def new_state(cap: int, spin_ns: int, cores: int = 1 << 20,
              gemm: tuple[int, int] | None = None) -> tuple[array, np.ndarray]:
    """A fresh state for `cap` op slots (a power of two), for a process on `cores` cores, whose
    workers multiply matrices through `gemm` (sgemm and dgemm addresses, `realexec.cpu.blas`):
    the `array('q')` Python reads and a numpy view of the same memory for compiled code."""
    assert cap & (cap - 1) == 0, cap
    nedges = EDGES_PER_OP * cap
    size = places_at(cap, nedges) + PLACE_WORDS
    buf = array("q", bytes(8 * size))
    state = np.frombuffer(buf, np.int64)
    state[H_CAP], state[H_NEDGES], state[H_SPIN_NS] = cap, nedges, spin_ns
    state[H_CORES] = cores
    if gemm is not None:
        state[H_GEMM], state[H_GEMM + 1] = gemm
    state[H_FRONT_CPU] = -1  # no push yet
    state[OPS + F_TOKEN: OPS + STRIDE * cap: STRIDE] = -1
    edges = OPS + STRIDE * cap
    state[edges: edges + nedges] = np.arange(1, nedges + 1)  # the free list: each to the next
    state[edges + nedges - 1] = -1
    state[H_EFREE] = 0
    return buf, state  # H_PLACES = 0: `placement.allow` turns moves on


def places_at(cap: int, nedges: int) -> int:
    """Where the placement words start (after the header, the records, the edges and the
    rings) in a state of `cap` slots and `nedges` edges."""
    return OPS + STRIDE * cap + 2 * nedges + MAX_LANES * cap


@njit(nogil=True, cache=True, inline="always")
def at(slot, f):
    """Where field `f` of the op in `slot` is."""
    return OPS + slot * STRIDE + f
