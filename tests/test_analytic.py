"""The book's closed forms and the vectorised pipeline solver, held to the op-by-op definition.

`reference` below is the model written out one op at a time (the definition in
asyncsim/analytic.py); every other answer must equal it. Integer-valued costs make float
arithmetic exact, so those comparisons are exact; general floats compare to rounding.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncsim.model.analytic import (
    async_time,
    book_async_time,
    pipeline,
    regime,
    sync_time,
)


def reference(t1, t2, t3, sync, waitall=True):
    """Op-by-op loop: returns (issue_end, lane_start, lane_end, frontend) lists and the total."""
    frontend_time = lane_free = 0.0
    rows = []
    for i in range(len(t1)):
        issue_end = frontend_time + t1[i]
        lane_start = max(lane_free, issue_end)
        lane_free = lane_start + t2[i]
        frontend_time = issue_end
        if sync[i]:
            frontend_time = max(frontend_time, lane_free) + t3
        rows.append((issue_end, lane_start, lane_free, frontend_time))
    if waitall:
        frontend_time = max(frontend_time, lane_free) + t3
    return np.array(rows).reshape(-1, 4).T, frontend_time


costs = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)
whole_costs = st.integers(min_value=0, max_value=1000).map(float)
counts = st.integers(min_value=1, max_value=300)


@given(n=counts, t1=costs, t2=costs, t3=costs)
def test_sync_time_is_a_blocker_after_every_op(n, t1, t2, t3):
    """n (t1 + t2 + t3) is the loop with a blocker after every op and no closing waitall."""
    _, total = reference([t1] * n, [t2] * n, t3, [True] * n, waitall=False)
    assert sync_time(n, t1, t2, t3) == pytest.approx(total, rel=1e-12, abs=1e-12)


@given(n=counts, t1=costs, t2=costs, t3=costs)
def test_async_time_is_back_to_back_ops_and_one_waitall(n, t1, t2, t3):
    """max(t1 + n t2, n t1 + t2) + t3 is the exact time of n issued ops closed by a waitall."""
    _, total = reference([t1] * n, [t2] * n, t3, [False] * n)
    assert async_time(n, t1, t2, t3) == pytest.approx(total, rel=1e-12, abs=1e-12)


@given(n=counts, t1=whole_costs, extra=whole_costs, t3=whole_costs)
def test_backend_bound_is_the_books_formula(n, t1, extra, t3):
    """With t2 >= t1 the lane never idles: time is the book's t1 + n t2 + t3, exactly."""
    t2 = t1 + extra
    _, total = reference([t1] * n, [t2] * n, t3, [False] * n)
    assert regime(n, t1, t2) == "backend-bound"
    assert async_time(n, t1, t2, t3) == book_async_time(n, t1, t2, t3) == total


@given(n=st.integers(min_value=2, max_value=300), t2=whole_costs, extra=whole_costs, t3=whole_costs)
def test_frontend_bound_is_issue_limited(n, t2, extra, t3):
    """With t1 > t2 the lane waits for each issue: time is n t1 + t2 + t3, exactly."""
    t1 = t2 + extra + 1.0
    _, total = reference([t1] * n, [t2] * n, t3, [False] * n)
    assert regime(n, t1, t2) == "frontend-bound"
    assert async_time(n, t1, t2, t3) == n * t1 + t2 + t3 == total


def test_books_condition_is_not_sufficient():
    """1000 t2 > 999 t1 with t2 < t1: the book's formula underestimates by 999 (t1 - t2)."""
    n, t1, t2, t3 = 1000, 1000.0, 999.5, 3.0
    assert n * t2 > (n - 1) * t1
    _, total = reference([t1] * n, [t2] * n, t3, [False] * n)
    assert regime(n, t1, t2) == "frontend-bound"
    assert async_time(n, t1, t2, t3) == total == n * t1 + t2 + t3
    assert total - book_async_time(n, t1, t2, t3) == (n - 1) * (t1 - t2)


def test_closed_forms_vectorise():
    """Arrays of n, t1, t2, t3 give elementwise answers equal to the scalar calls."""
    n = np.array([1, 10, 1000, 1000])
    t1 = np.array([2.0, 1.0, 1.0, 3.0])
    t2 = np.array([1.0, 2.0, 0.5, 3.0])
    t3 = 0.25
    for function in (sync_time, async_time, book_async_time):
        got = function(n, t1, t2, t3)
        assert got.shape == (4,)
        expected = [function(*args, t3) for args in zip(n, t1, t2, strict=True)]
        np.testing.assert_array_equal(got, expected)
    labels = regime(n, t1, t2)
    assert list(labels) == ["backend-bound", "backend-bound", "frontend-bound", "backend-bound"]


def test_no_ops_cost_only_the_waitall():
    """Zero ops: the closed form and the solver both charge the closing waitall alone."""
    assert async_time(0, 1.0, 2.0, 0.5) == 0.5
    assert sync_time(0, 1.0, 2.0, 0.5) == 0.0
    assert pipeline(1.0, 2.0, 0.5, n=0).total == 0.5
    assert pipeline(1.0, 2.0, 0.5, n=0, waitall=False).total == 0.0


def check_against_reference(t1, t2, t3, sync, waitall, exact):
    result = pipeline(np.array(t1), np.array(t2), t3, np.array(sync), waitall=waitall)
    columns, total = reference(t1, t2, t3, sync, waitall)
    got = (result.issue_end, result.lane_start, result.lane_end, result.frontend)
    scale = max(total, 1.0)
    names = ("issue_end", "lane_start", "lane_end", "frontend")
    for name, mine, theirs in zip(names, got, columns, strict=True):
        if exact:
            np.testing.assert_array_equal(mine, theirs, err_msg=name)
        else:
            np.testing.assert_allclose(mine, theirs, rtol=1e-12, atol=1e-12 * scale, err_msg=name)
    assert result.total == (total if exact else pytest.approx(total, rel=1e-12, abs=1e-12 * scale))


whole_ops = st.lists(st.tuples(whole_costs, whole_costs, st.booleans()), min_size=1, max_size=200)
float_ops = st.lists(st.tuples(costs, costs, st.booleans()), min_size=1, max_size=200)


@given(ops=whole_ops, t3=whole_costs, waitall=st.booleans())
def test_pipeline_equals_the_loop_exactly(ops, t3, waitall):
    """Random costs and blockers (whole numbers, so no rounding): every array equals the loop."""
    t1, t2, sync = map(list, zip(*ops, strict=True))
    check_against_reference(t1, t2, t3, sync, waitall, exact=True)


@given(ops=float_ops, t3=costs, waitall=st.booleans())
def test_pipeline_equals_the_loop_to_rounding(ops, t3, waitall):
    """Random float costs and blockers: every array equals the loop to float rounding."""
    t1, t2, sync = map(list, zip(*ops, strict=True))
    check_against_reference(t1, t2, t3, sync, waitall, exact=False)


@given(ops=float_ops, t3=costs)
def test_pipeline_timeline_is_consistent(ops, t3):
    """An op starts after its issue and after the previous op, and holds the lane for t2."""
    t1, t2, sync = map(np.array, zip(*ops, strict=True))
    result = pipeline(t1, t2, t3, sync)
    tolerance = 1e-12 * max(result.total, 1.0)
    assert np.all(result.lane_start >= result.issue_end - tolerance)
    assert np.all(result.lane_start[1:] >= result.lane_end[:-1] - tolerance)
    np.testing.assert_allclose(result.lane_end - result.lane_start, t2, atol=2 * tolerance)
    assert result.total >= result.lane_end[-1] + t3 - tolerance


@given(n=counts, t1=costs, t2=costs, t3=costs)
def test_pipeline_with_constant_costs_equals_closed_forms(n, t1, t2, t3):
    """Scalar costs broadcast to n ops reproduce async_time and sync_time."""
    free = pipeline(t1, t2, t3, n=n)
    assert free.total == pytest.approx(async_time(n, t1, t2, t3), rel=1e-12, abs=1e-12)
    blocked = pipeline(t1, t2, t3, sync=True, n=n, waitall=False)
    assert blocked.total == pytest.approx(sync_time(n, t1, t2, t3), rel=1e-12, abs=1e-12)
    closed = pipeline(t1, t2, t3, sync=True, n=n)
    assert closed.total == pytest.approx(sync_time(n, t1, t2, t3) + t3, rel=1e-12, abs=1e-12)


def test_pipeline_on_a_hundred_thousand_ops():
    """10**5 random ops with random blockers: the total equals the loop's; constant costs equal
    the closed form in both regimes."""
    rng = np.random.default_rng(12)
    n = 10**5
    t1 = rng.exponential(1e-5, n)
    t2 = rng.exponential(1e-5, n)
    sync = rng.random(n) < 0.01
    _, total = reference(t1.tolist(), t2.tolist(), 2e-5, sync.tolist())
    assert pipeline(t1, t2, 2e-5, sync).total == pytest.approx(total, rel=1e-10)
    for issue, run in ((1e-5, 3e-5), (3e-5, 1e-5)):
        expected = async_time(n, issue, run, 2e-5)
        assert pipeline(issue, run, 2e-5, n=n).total == pytest.approx(expected, rel=1e-10)


def test_pipeline_per_op_t3():
    """An array t3 charges each blocker its own cost, and the closing waitall t3[-1]."""
    result = pipeline([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [10.0, 20.0, 30.0], [True, True, False])
    # op 1 ends at 3, +10 -> 13; op 2 issued 14 ends 16, +20 -> 36; op 3 ends 39, +30 -> 69
    np.testing.assert_array_equal(result.frontend, [13.0, 36.0, 37.0])
    assert result.total == 69.0


def test_pipeline_rejects_bad_input():
    """Negative or non-finite costs and an undeterminable n are refused, naming the problem."""
    with pytest.raises(ValueError, match="t1"):
        pipeline([1.0, -1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="t2"):
        pipeline([1.0, 1.0], [1.0, np.inf])
    with pytest.raises(ValueError, match="n="):
        pipeline(1.0, 1.0)
    with pytest.raises(ValueError, match="n="):
        pipeline([1.0, 1.0], [1.0, 1.0, 1.0])
