"""Products priced per shape: a 2-d `dot` carries its (M, K, N) and transposes as its geometry
(`ops.tensor.dot_geometry`), a profile prices a product it timed by that timing, one near a timed
one (`asyncsim.model.products`) at that one's rate and any other by its fit over all, and
calibration's layer products and its sweep's squares turn into such costs."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

import asyncsim
import realexec
from asyncsim.model import products
from asyncsim.model.profile import Cost, Profile
from asyncsim.nd import ops
from realexec.calibration import fits, training


@given(st.integers(1, 64), st.integers(1, 64), st.integers(1, 64), st.booleans(), st.booleans())
def test_a_products_geometry_is_its_shape_and_transposes(m, k, n, ta, tb):
    a = (k, m) if ta else (m, k)
    b = (n, k) if tb else (k, n)
    attrs = {"transpose_a": ta, "transpose_b": tb}
    geometry = ops.geometry("dot", (a, b), attrs)
    dims, *flags = geometry.split("-")
    assert tuple(map(int, dims.split("x"))) == (m, k, n)
    assert flags == [f for f, on in (("ta", ta), ("tb", tb)) if on]
    shape, _ = ops.infer("dot", (a, b), ("float32", "float32"), attrs)
    assert shape == (m, n)
    assert ops.flops("dot", (a, b), shape) == 2.0 * m * k * n


def test_a_product_with_a_vector_has_no_geometry():
    assert ops.geometry("dot", ((3,), (3, 4)), {}) == ""
    assert ops.geometry("dot", ((2, 3), (3,)), {}) == ""


def layer(nd):
    """A dense layer as Gluon's computes it (weight transposed), and the same product plainly."""
    x = nd.ones((8, 16))
    w = nd.ones((32, 16))
    nd.dot(x, w, transpose_b=True)
    nd.dot(x, nd.ones((16, 32)))


def test_a_profile_prices_a_timed_shape_by_its_timing_and_others_by_the_fit():
    program = asyncsim.record(layer)
    timed, other = (op for op in program.ops if op.name == "dot")
    assert timed.geometry == "8x16x32-tb" and other.geometry == "8x16x32"
    assert timed.flops == other.flops
    base = Profile.ideal(t1=1e-9, t3=0.0, workers=1)
    costs = {**base.costs, "cpu:dot": Cost(peak=1e9),
             f"cpu:dot@{timed.geometry}": Cost(peak=timed.flops / 1e-3)}
    profile = dataclasses.replace(base, costs=costs)
    assert profile.cost(timed) == pytest.approx(1e-3)
    assert profile.cost(other) == pytest.approx(other.flops / 1e9)
    assert profile.rule(timed)[0] == "cpu:dot@8x16x32-tb"


def test_calibrations_layer_products_become_costs_of_their_own_shape():
    with realexec.session(workers=1) as nd:
        calls = training.cases(nd, (), (), (), ((4, 8, 16, "ta"), (4, 8, 16, "tb")))
    geometries = [ops.geometry(name, tuple(a.shape for a in inputs), attrs)
                  for name, inputs, attrs in calls]
    assert geometries == ["4x8x16-ta", "4x8x16-tb"]
    measured = {"dot": {"points": [[1e3, 1e6, 1e-4], [4e3, 8e6, 5e-4], [1.6e4, 6.4e7, 3e-3]],
                        "geometries": {"4x8x16-ta": [1e3, 1024.0, 2e-5]}}}
    costs = fits.op_costs(measured)
    own = costs["cpu:dot@4x8x16-ta"]
    assert own.time(0.0, 1024.0) == pytest.approx(2e-5)
    assert "cpu:dot@4x8x16-tb" not in costs  # not timed: the fit prices it


def _product(m, k, n, tb=False):
    """The one product of an (m, k) by (k, n) matmul, recorded."""
    def work(nd):
        w = nd.ones((n, k)) if tb else nd.ones((k, n))
        nd.dot(nd.ones((m, k)), w, transpose_b=tb)
    return next(op for op in asyncsim.record(work).ops if op.name == "dot")


def _priced(rates: dict) -> Profile:
    """A profile whose formula runs at 1 GFLOP/s and whose timed products run at `rates`."""
    base = Profile.ideal(t1=1e-9, t3=0.0, workers=1)
    costs = {**base.costs, "cpu:dot": Cost(peak=1e9)}
    costs.update({f"cpu:dot@{g}": Cost(peak=rate) for g, rate in rates.items()})
    return dataclasses.replace(base, costs=costs)


sides = st.floats(0.25, 4.0)


@given(sides, sides, sides)
def test_a_product_near_a_timed_one_runs_at_its_rate_and_others_by_the_fit(a, b, c):
    m, k, n = (max(1, round(256 * f)) for f in (a, b, c))
    op = _product(m, k, n)
    profile = _priced({"256x256x256": 7e10})
    expected = op.flops / (7e10 if op.flops >= products.NEAR_FLOPS and max(
        m, k, n) <= 512 and min(m, k, n) >= 128 else 1e9)
    assert profile.cost(op) == pytest.approx(expected)


def test_a_product_far_from_every_timed_one_or_small_is_priced_by_the_formula():
    profile = _priced({"256x256x256": 7e10})
    far, small = _product(256, 256, 1024), _product(40, 40, 40)  # N 4x; 128 kFLOP
    assert profile.rule(far)[0] == profile.rule(small)[0] == "cpu:dot"


def test_the_nearest_timed_product_wins_and_a_transpose_counts_as_a_doubling():
    profile = _priced({"1024x1024x1024": 2e11, "512x512x512": 1e11, "2000x2000x2000-tb": 3e11})
    assert profile.rule(_product(900, 900, 900))[0] == "cpu:dot@1024x1024x1024"
    assert profile.rule(_product(600, 600, 600))[0] == "cpu:dot@512x512x512"
    # as near in size as the square, but transposed: the square wins; transposed, the other
    assert profile.rule(_product(1400, 1400, 1400))[0] == "cpu:dot@1024x1024x1024"
    assert profile.rule(_product(1900, 1900, 1900, tb=True))[0] == "cpu:dot@2000x2000x2000-tb"


def test_a_timing_added_later_is_seen():
    profile = _priced({"512x512x512": 1e11})
    op = _product(1000, 1000, 1000)
    assert profile.rule(op)[0] == "cpu:dot@512x512x512"
    profile.costs["cpu:dot@1024x1024x1024"] = Cost(peak=2e11)
    assert profile.rule(op)[0] == "cpu:dot@1024x1024x1024"


def test_calibrations_sweep_of_squares_becomes_costs_of_their_own_shape():
    sweep = {"sizes": [64, 128, -128], "seconds": [4e-6, 3e-5, 2e-6]}
    geometries = fits.dot_geometries(sweep)
    assert list(geometries) == ["64x64x64", "128x128x128", "1x128x128"]
    measured = {"dot": {"points": [[1e3, 1e6, 1e-4], [4e3, 8e6, 5e-4]], "geometries": {}}}
    costs = fits.op_costs(measured, extra={"dot": geometries})
    square = costs["cpu:dot@128x128x128"]
    assert square.time(0.0, 2.0 * 128**3) == pytest.approx(3e-5)
    assert len(measured["dot"]["points"]) == 2  # the sweep is fitted along, not added to them
