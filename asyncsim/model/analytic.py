"""The book's closed forms for asynchronous execution, and an exact vectorised pipeline solver.

The model (the same one `asyncsim.simulate` runs, reduced to a linear pipeline): one frontend
thread and one execution lane. Op i (1..n) costs the frontend t1_i to issue; it may start on the
lane once its issue has ended and the lane is free, and holds the lane for t2_i:

    issue end   f_i = F_{i-1} + t1_i            (F: frontend time, F_0 = 0)
    lane end    e_i = max(e_{i-1}, f_i) + t2_i  (e_0 = 0)

A blocker after op i (`wait_to_read` on its result, or `waitall`, the same thing in a linear
pipeline) makes the frontend wait for e_i and then pay t3 to return, even if the op was already
done: F_i = max(f_i, e_i) + t3. Without a blocker F_i = f_i. MXNet's NaiveEngine (`mode='sync'`)
runs each op inside its issuing call, which is exactly a blocker after every op.

Assumptions: costs are finite and non-negative. Units: whatever unit the costs are given in
(seconds throughout the project); results are in the same unit. Everything is pure numpy and
vectorises over arrays; nothing here loops over ops in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "PipelineResult",
    "async_time",
    "book_async_time",
    "pipeline",
    "regime",
    "sync_time",
]


def sync_time(n, t1, t2, t3):
    """Time of n ops with a blocker after every op: ``n (t1 + t2 + t3)``.

    This is the book's "without asynchronous programming" total, 1000 (t1 + t2 + t3) for its
    loop of 1000 ``y = x + 1`` each followed by ``y.wait_to_read()``: every op is issued (t1),
    runs while the frontend waits (t2) and hands its result back (t3), and nothing overlaps.
    MXNet's NaiveEngine (``mode='sync'``) costs the same. A closing ``waitall`` after such a loop
    is one more blocker and adds one more t3. Vectorises over arrays of n, t1, t2, t3.
    """
    n, t1, t2, t3 = np.broadcast_arrays(*map(np.asarray, (n, t1, t2, t3)))
    return n * (t1 + t2 + t3)


def async_time(n, t1, t2, t3):
    """Exact time of n ops issued back to back and closed by one ``waitall``.

    ``max(t1 + n t2, n t1 + t2) + t3`` for n >= 1 (n = 0 costs just the ``waitall``, t3).

    With constant costs op j is issued at j t1 and the lane ends at
    e_n = max_j (j t1 + (n - j + 1) t2), a linear function of j, so the maximum sits at an end:

    - j = 1, ``t1 + n t2 + t3`` (backend-bound, the book's formula): the lane starts after the
      first issue and never idles again;
    - j = n, ``n t1 + t2 + t3`` (frontend-bound): the lane keeps waiting for the next issue and
      the run ends one t2 after the last issue.

    The exercise: why does the book assume 1000 t2 > 999 t1? Its formula t1 + 1000 t2 + t3
    says the backend finishes last. The frontend is done issuing at 1000 t1; a lane that never
    idles is done at t1 + 1000 t2. The latter is the later one exactly when 1000 t2 > 999 t1;
    otherwise the frontend is the bottleneck and the time is at least 1000 t1 + t2 + t3. That
    condition is necessary but not sufficient: for the lane never to idle, op i must be issued
    (at i t1) before op i - 1 ends (at t1 + (i - 1) t2), i.e. t2 >= t1. When
    999/1000 t1 < t2 < t1 the book's condition holds but the lane starves from the start, and the
    exact time n t1 + t2 + t3 exceeds the book's by (n - 1)(t1 - t2). See `regime`.
    """
    n, t1, t2, t3 = np.broadcast_arrays(*map(np.asarray, (n, t1, t2, t3)))
    busy_lane = t1 + n * t2
    busy_frontend = n * t1 + t2
    return np.where(n > 0, np.maximum(busy_lane, busy_frontend) + t3, t3)


def book_async_time(n, t1, t2, t3):
    """The book's asynchronous total ``t1 + n t2 + t3``, valid only when the backend is the
    bottleneck (t2 >= t1, or n = 1); kept to compare against `async_time`."""
    n, t1, t2, t3 = np.broadcast_arrays(*map(np.asarray, (n, t1, t2, t3)))
    return t1 + n * t2 + t3


def regime(n, t1, t2):
    """'backend-bound' when the lane dominates n back-to-back ops, else 'frontend-bound'.

    Backend-bound means ``t1 + n t2 >= n t1 + t2``, i.e. (n - 1)(t2 - t1) >= 0: the lane is
    never idle after the first issue and `async_time` is the book's t1 + n t2 + t3. For n >= 2
    that is t2 >= t1, a stronger condition than the book's n t2 > (n - 1) t1 (see `async_time`).
    Ties (t1 == t2, or n == 1) count as backend-bound: both formulas give the same time there.
    Returns a str for scalar inputs and an array of str otherwise.
    """
    n, t1, t2 = np.broadcast_arrays(*map(np.asarray, (n, t1, t2)))
    labels = np.where((n - 1) * (t2 - t1) >= 0, "backend-bound", "frontend-bound")
    return str(labels) if labels.ndim == 0 else labels


@dataclass(frozen=True)
class PipelineResult:
    """Per-op times of a linear pipeline (arrays of length n, index i is op i + 1).

    issue_end: f_i, when the frontend finished issuing op i.
    lane_start, lane_end: when op i held the lane.
    frontend: the frontend's time after op i's call and, if one follows, its blocker.
    total: the frontend's time after the closing ``waitall`` (or after the last op without one).
    """

    issue_end: np.ndarray
    lane_start: np.ndarray
    lane_end: np.ndarray
    frontend: np.ndarray
    total: float


def _costs(values, n: int, name: str) -> np.ndarray:
    array = np.broadcast_to(np.asarray(values, dtype=np.float64), (n,))
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise ValueError(f"pipeline: {name} must be finite and non-negative")
    return array


def _length(n, *arrays) -> int:
    lengths = {np.size(a) for a in arrays if a is not None and np.ndim(a) > 0}
    if n is not None:
        lengths.add(int(n))
    if len(lengths) != 1:
        raise ValueError(f"pipeline: cannot tell n from lengths {sorted(lengths)}; pass n=")
    return lengths.pop()


def pipeline(t1, t2, t3=0.0, sync=None, *, n=None, waitall=True) -> PipelineResult:
    """Solve a linear pipeline exactly, in O(n) numpy passes (10**7 ops in about 0.2 s).

    t1, t2: per-op issue and lane costs, arrays of length n or scalars broadcast to n.
    t3: the cost of a blocker, a scalar or an array (t3[i] for the blocker after op i; the
    closing ``waitall`` costs t3[-1]). sync: optional booleans, sync[i] puts a blocker after
    op i. waitall: close the run with a ``waitall`` after the last op, as the book's loops do
    (a sync[-1] blocker and the closing ``waitall`` are two blockers and cost 2 t3).
    n: needed only when every other argument is a scalar.

    How: the queue recursion e_i = max(e_{i-1}, f_i) + t2_i unrolls to
    e_i = S_i + max_{j<=i} (f_j - S_{j-1}) with S the cumulative t2, one cumsum and one
    ``np.maximum.accumulate`` once the issue ends f are known. Blockers are what make f depend
    on e. Cut the ops into segments that end at a blocker: inside segment k the frontend runs
    free, so f_j = T_j + off_k with T the cumulative t1 and off_k one offset per segment. The
    blocker ending segment k at op b restarts the frontend at e_b + t3, and
    e_b = S_b + off_k + max_{j in k} (T_j - S_{j-1}) (the max is an ``np.maximum.reduceat``), so
    off_{k+1} = off_k + S_b - T_b + max_{j in k}(T_j - S_{j-1}) + t3_b: the offsets are a
    cumsum over segments. The global running max needs no reset at segment starts: the first op
    after a blocker has f_j - S_{j-1} = (e_b - S_b) + t3 + t1_j, which is at least every earlier
    term. Each step is exact max/plus algebra; results differ from the op-by-op loop only by
    float rounding of the cumulative sums (relative error about n * 1e-16 in the worst case).
    """
    n = _length(n, t1, t2, t3, sync)
    if n == 0:
        empty = np.zeros(0)
        close = _costs(t3, np.size(t3), "t3")[-1] if waitall and np.size(t3) else 0.0
        return PipelineResult(empty, empty, empty, empty, float(close))
    t1 = _costs(t1, n, "t1")
    t2 = _costs(t2, n, "t2")
    t3 = _costs(t3, n, "t3")
    blocked = np.zeros(n, dtype=bool)
    if sync is not None:
        blocked = np.broadcast_to(np.asarray(sync, dtype=bool), (n,))

    # Fresh n-long temporaries dominate the cost at 10**7 ops, hence the in-place steps.
    issued = np.cumsum(t1)  # T_i
    lane_work = np.cumsum(t2)  # S_i
    lane_work_before = np.subtract(lane_work, t2)  # S_{i-1}

    blockers = np.flatnonzero(blocked)
    issue_end = issued
    if blockers.size:
        segment_starts = np.concatenate(([0], blockers + 1))
        segment_starts = segment_starts[segment_starts < n]
        slack = np.subtract(issued, lane_work_before)  # T_j - S_{j-1}
        closed = np.maximum.reduceat(slack, segment_starts)[: blockers.size]
        del slack
        jumps = lane_work[blockers] - issued[blockers] + closed + t3[blockers]
        offsets = np.concatenate(([0.0], np.cumsum(jumps)))[: segment_starts.size]
        segment_sizes = np.diff(segment_starts, append=n)
        issue_end += np.repeat(offsets, segment_sizes)

    lane_end = np.subtract(issue_end, lane_work_before)
    np.maximum.accumulate(lane_end, out=lane_end)
    lane_end += lane_work
    del lane_work, lane_work_before
    lane_start = issue_end.copy()
    np.maximum(lane_start[1:], lane_end[:-1], out=lane_start[1:])
    frontend = issue_end.copy()
    frontend[blockers] = np.maximum(issue_end[blockers], lane_end[blockers]) + t3[blockers]

    total = frontend[-1]
    if waitall:
        total = max(total, lane_end[-1]) + t3[-1]
    return PipelineResult(issue_end, lane_start, lane_end, frontend, float(total))
