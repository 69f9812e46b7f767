"""A print is priced by the values numpy formats (`printed_bytes`), not by the array's bytes: a
large array prints summarised, its corners only, so it costs less than a 1000-element one; the
calibration fits a first print's latency at a later print's pace."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncsim
from asyncsim import Profile
from asyncsim.model.cost import Cost, printed_bytes
from realexec.calibration.fits import blocker_costs

T3 = 1e-6


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=0, max_size=3))
def test_printed_bytes_counts_the_values_numpy_prints(shape):
    """For every shape: the bytes of the numbers in numpy's own text of the array."""
    array = np.full(shape, 7.0, dtype=np.float32)
    text = np.array2string(array)
    assert printed_bytes(tuple(shape), array.nbytes) == text.count("7.") * 4


def test_a_summarised_print_is_priced_below_a_full_one():
    profile = Profile.ideal(t3=T3)
    profile.costs["frontend:print"] = Cost(latency=20e-6, bandwidth=4 / 1.6e-6)
    full = profile.blocker("print", 4000, shown=printed_bytes((1000,), 4000))
    large = 4 * 2**21
    summarised = profile.blocker("print", large, shown=printed_bytes((2**21,), large))
    assert full == pytest.approx(T3 + 20e-6 + 1000 * 1.6e-6)
    assert summarised == pytest.approx(T3 + 20e-6 + 6 * 1.6e-6)
    # asnumpy copies every byte: its price still goes with the array's bytes
    profile.costs["frontend:asnumpy"] = Cost(bandwidth=1e9)
    assert profile.blocker("asnumpy", large, shown=24) == pytest.approx(T3 + large / 1e9)


def test_the_model_prices_a_programs_print_by_its_shape():
    """Through `asyncsim.predict`: 2000 elements print summarised (6 values) and cost less than
    a 20 x 20 array, whose 400 values are all formatted."""
    def prints(nd, shape):
        x = nd.ones(shape)
        nd.waitall()
        with nd.benchmark("print"):
            repr(x)

    profile = Profile.ideal(t3=T3)
    profile.costs["frontend:print"] = Cost(latency=10e-6, bandwidth=4 / 1e-6)
    long = asyncsim.predict(prints, profile, shape=(2000,)).regions["print"]
    square = asyncsim.predict(prints, profile, shape=(20, 20)).regions["print"]
    assert long == pytest.approx(T3 + 10e-6 + 6e-6)
    assert square == pytest.approx(T3 + 10e-6 + 400e-6)


def test_a_first_print_keeps_the_later_pace_and_fits_its_latency():
    ready = [(8, 2e-6), (24, 2e-6), (64, 2e-6)]
    cold = [(24, 2e-6 + 200e-6 + 24 * 0.4e-6), (24, 2e-6 + 210e-6 + 24 * 0.4e-6),
            (64, 2e-6 + 190e-6 + 64 * 0.4e-6)]
    measured = {"wait_to_read": ready, "print": cold, "asnumpy": ready, "item": ready}
    costs = blocker_costs(measured, {"print": 1 / 0.4e-6})
    assert costs["frontend:print"].latency == pytest.approx(200e-6)
    assert costs["frontend:print"].bandwidth == pytest.approx(1 / 0.4e-6)
    # without a pace, two sizes decide the slope on their own: the noise of one point makes it
    free = blocker_costs(measured)["frontend:print"]
    assert not math.isclose(free.bandwidth, 1 / 0.4e-6, rel_tol=0.05)
