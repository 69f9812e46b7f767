"""Products priced per shape: a 2-d `dot` carries its (M, K, N) and transposes as its geometry
(`ops.tensor.dot_geometry`), a profile prices a product it timed by that timing and any other by
its fit over all, and calibration's layer products turn into such costs."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

import asyncsim
import realexec
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
