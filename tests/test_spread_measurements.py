"""Measuring on a machine whose speed moves: `central` (the trimmed mean that summarises rounds
of a microbenchmark), `busy` (a pause that keeps the cores at work), and kernel fits taken in
sweeps spread over time."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from realexec.calibration.microbench import _Bench, kernel_times
from realexec.calibration.steady import busy, central
from realexec.sessions import session

_samples = st.lists(st.floats(1e-7, 1.0, allow_nan=False), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(samples=_samples)
def test_central_lies_within_the_samples_and_ignores_order(samples):
    """The central value of any samples lies between their smallest and largest, and does not
    depend on the order they came in."""
    value = central(samples)
    assert min(samples) - 1e-12 <= value <= max(samples) + 1e-12
    assert central(list(reversed(samples))) == value


@given(samples=st.lists(st.floats(1e-6, 1e-3), min_size=1, max_size=4))
def test_central_of_a_few_samples_is_their_mean(samples):
    """Fewer than five samples are all kept: their plain mean."""
    assert central(samples) == pytest.approx(np.mean(samples), rel=1e-12)


def test_central_drops_the_extremes_a_mean_would_take_in():
    """Of two speeds mixed half and half, the central value is their mean; a stall a hundred
    times longer, one sample in ten, counts no more than one more sample of the slow speed."""
    mixed = [1.0, 2.0] * 5
    assert central(mixed) == 1.5
    base = [1.0, 2.0] * 4 + [1.5]
    assert central(base + [150.0]) == central(base + [2.0])


def test_busy_lasts_its_seconds_and_zero_returns_at_once():
    """`busy(s)` returns after s seconds (its worker threads joined), `busy(0)` at once."""
    start = time.perf_counter()
    busy(0.05, threads=2)
    took = time.perf_counter() - start
    assert 0.05 <= took < 2.0
    start = time.perf_counter()
    busy(0.0)
    assert time.perf_counter() - start < 0.01


def test_kernel_times_in_sweeps_give_one_time_per_size():
    """Sweeps over the sizes give one positive time per size, each the central value of the
    sweeps' low quantiles, larger for the larger copy."""
    with session(workers=1) as nd:
        bench = _Bench(nd, 1)

        def make(n):
            x = nd.ones((n,))
            return lambda: x + 1.0

        times = kernel_times(bench, make, (64, 2**20), repeats=3, name="add_scalar",
                             rounds=3, pause=0.0)
    assert len(times) == 2 and all(t > 0 for t in times)
    assert times[1] > times[0]
