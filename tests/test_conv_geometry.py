"""Convolutions priced per geometry: the three convolution ops of one layer carry its shape
without the batch (`ops.geometry`), a profile prices a geometry it timed by that timing and any
other by its fit over all, calibration turns a timed call into such a cost (and two at once into
its crowding), and the model stretches a crowded convolution."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncsim
from asyncsim import autograd
from asyncsim.model.profile import Cost, Profile, ProfileError
from asyncsim.nd import ops
from realexec.calibration import fits

CONV_OPS = ("conv2d", "conv2d_grad_data", "conv2d_grad_weight")


def layer(nd, batch, channels, side, filters, kernel, stride, pad):
    """One convolution layer forward and backward: its three convolution ops."""
    x = nd.ones((batch, channels, side, side))
    w = nd.ones((filters, channels, kernel, kernel))
    b = nd.zeros((filters,))
    for a in (x, w):
        a.attach_grad()
    with autograd.record():
        y = nd.Convolution(x, w, b, kernel=(kernel, kernel), stride=(stride, stride),
                           pad=(pad, pad), num_filter=filters)
        loss = nd.relu(y)
    loss.backward()


def named(shape) -> dict:
    return dict(zip(("batch", "channels", "side", "filters", "kernel", "stride", "pad"), shape,
                    strict=True))


geometries = st.tuples(st.integers(1, 6), st.integers(1, 4), st.integers(3, 9),
                       st.integers(1, 5), st.sampled_from([1, 3]), st.integers(1, 2),
                       st.integers(0, 1))


@settings(max_examples=25, deadline=None)
@given(shape=geometries, other_batch=st.integers(1, 6))
def test_a_layers_three_convolutions_share_a_geometry_that_ignores_the_batch(shape, other_batch):
    program = asyncsim.record(layer, **named(shape))
    convs = [op for op in program.ops if op.name in CONV_OPS]
    assert sorted(op.name for op in convs) == sorted(CONV_OPS)
    assert len({op.geometry for op in convs}) == 1
    _, channels, side, filters, kernel, stride, pad = shape
    assert convs[0].geometry == (f"{channels}x{side}x{side}-{filters}x{kernel}x{kernel}"
                                 f"-s{stride}x{stride}-p{pad}x{pad}")
    assert all(op.geometry == "" for op in program.ops if op.name not in CONV_OPS)
    again = asyncsim.record(layer, batch=other_batch, channels=channels, side=side,
                            filters=filters, kernel=kernel, stride=stride, pad=pad)
    assert {op.geometry for op in again.ops if op.name in CONV_OPS} == {convs[0].geometry}


def with_costs(profile: Profile, costs: dict) -> Profile:
    return dataclasses.replace(profile, costs={**profile.costs, **costs})


def _conv_op(nd_shape=(4, 2, 8, 3, 3, 1, 1)):
    program = asyncsim.record(layer, **named(nd_shape))
    return next(op for op in program.ops if op.name == "conv2d")


def test_a_profile_prices_a_timed_geometry_by_its_own_cost_and_others_by_the_fit(tmp_path):
    op = _conv_op()
    other = _conv_op((4, 2, 8, 5, 3, 1, 1))  # five filters: a geometry not timed
    own = Cost(peak=1e9)
    profile = with_costs(Profile.ideal(), {"cpu:conv2d": Cost(peak=5e10),
                                           f"cpu:conv2d@{op.geometry}": own})
    assert profile.rule(op) == (f"cpu:conv2d@{op.geometry}", own)
    assert profile.cost(op) == pytest.approx(op.flops / 1e9)
    assert profile.rule(other)[0] == "cpu:conv2d"
    path = tmp_path / "profile.json"
    profile.save(path)
    assert Profile.load(path).rule(op)[0] == f"cpu:conv2d@{op.geometry}"


@pytest.mark.parametrize("key", ["cpu:add@1x2x2-1x1x1-s1x1-p0x0", "frontend:conv2d@1x2",
                                 "cpu:conv2d@"])
def test_a_geometry_key_names_a_convolution_on_a_device(key):
    with pytest.raises(ProfileError, match="GEOMETRY"):
        with_costs(Profile.ideal(), {key: Cost(latency=1e-6)})


def test_calibration_prices_a_geometry_by_its_timed_call_in_proportion_to_its_images():
    """A geometry timed at one batch gives back that time at that batch, and twice the time
    (less the latency once) at twice the images; the fit over every point stays as the
    fallback."""
    small, large = _conv_op((2, 2, 8, 3, 3, 1, 1)), _conv_op((4, 2, 8, 3, 3, 1, 1))
    other = _conv_op((2, 4, 8, 6, 3, 1, 1))
    seconds = 3e-4
    measured = {"conv2d": {
        "points": [[small.nbytes, small.flops, seconds], [other.nbytes, other.flops, 9e-4],
                   [2 * other.nbytes, 2 * other.flops, 1.7e-3]],
        "geometries": {small.geometry: [small.nbytes, small.flops, seconds]}}}
    costs = fits.op_costs(measured)
    own = costs[f"cpu:conv2d@{small.geometry}"]
    assert own.time(small.nbytes, small.flops) == pytest.approx(seconds)
    assert own.time(large.nbytes, large.flops) == pytest.approx(2 * seconds - own.latency)
    assert "cpu:conv2d" in costs and f"cpu:conv2d@{other.geometry}" not in costs


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.9, 2.5), min_size=1, max_size=6))
def test_every_convolution_geometry_takes_the_median_crowd_of_all_pairs(slowdowns):
    """One crowd for every measured geometry's forward and gradients: the median over every
    pair's (slowdown - 1), within [0, 1] for two workers; under 5% it is noise and none is set.
    The elementwise runs set only the memory-bound costs."""
    geometries = [f"{k + 1}x8x8-3x3x3-s1x1-p1x1" for k in range(len(slowdowns))]
    costs = {"cpu:elementwise": Cost(bandwidth=1e10), "cpu:conv2d": Cost(peak=1e10),
             **{f"cpu:{name}@{g}": Cost(peak=1e10) for name in CONV_OPS for g in geometries}}
    measured = {f"conv2d{'_grad' if k % 2 else ''}@{g}": {"alone": 1e-3, "together": 1e-3 * s}
                for k, (g, s) in enumerate(zip(geometries, slowdowns, strict=True))}
    measured["elementwise 1024"] = {"alone": 1e-4, "together": 1.5e-4}
    fits.set_crowding(costs, measured, workers=2)
    crowds = sorted(min(1.0, max(0.0, s - 1.0)) for s in slowdowns)
    n = len(crowds)
    median = (crowds[(n - 1) // 2] + crowds[n // 2]) / 2
    expected = median if median > 0.05 else 0.0
    for name in CONV_OPS:
        for g in geometries:
            assert costs[f"cpu:{name}@{g}"].crowd == pytest.approx(expected)
    assert costs["cpu:conv2d"].crowd == 0.0  # the formula over all geometries: no crowd


def test_the_model_stretches_a_crowded_convolution_priced_by_flops_alone():
    """Two convolutions of a crowded geometry issued together on two workers: each runs beside
    the other and takes (1 + crowd) of its flops time; without the crowd both take it plainly."""
    def pair(nd):
        x, w = nd.ones((2, 2, 8, 8)), nd.ones((3, 2, 3, 3))
        nd.waitall()
        with nd.benchmark("pair"):
            nd.invoke("conv2d", x, w, kernel=(3, 3), stride=(1, 1), pad=(1, 1))
            nd.invoke("conv2d", x, w, kernel=(3, 3), stride=(1, 1), pad=(1, 1))
            nd.waitall()

    program = asyncsim.record(pair)
    op = next(op for op in program.ops if op.name == "conv2d")
    base = Profile.ideal(t1=1e-9, t3=0.0, workers=2).replace(dispatch=1e-12)
    flops_time = 1e-3

    def exec_times(crowd):
        cost = Cost(peak=op.flops / flops_time, crowd=crowd)
        trace = asyncsim.simulate(program, with_costs(base, {f"cpu:conv2d@{op.geometry}": cost}))
        return sorted(s.duration for s in trace.spans_of(kind="exec") if s.name == "conv2d")

    assert exec_times(0.5) == pytest.approx([1.5 * flops_time] * 2, rel=1e-6)
    assert exec_times(0.0) == pytest.approx([flops_time, flops_time])


def test_the_convolutions_and_products_have_a_geometry():
    assert set(ops.GEOMETRY) == {*CONV_OPS, "dot"}
    assert ops.geometry("relu", ((2, 3),), {}) == ""
