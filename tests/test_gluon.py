"""Gluon on the shared `nd`: deferred initialisation, parameter names and initializers, the
layers' outputs against plain numpy, errors at the call, and one block on both backends.

Layers run on the real engine (one module-wide session); their outputs are compared with
numpy computed from the parameters the layers actually hold (`Parameter.data()`), with the
plain references of `nn_reference` for convolution, pooling and batch norm.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nn_reference import batch_norm, conv2d, pool2d

import asyncsim
import realexec
from asyncsim import autograd, gluon, init
from asyncsim.gluon import DeferredInitializationError, nn
from asyncsim.nd.ops import ShapeError

SETTINGS = settings(max_examples=25, deadline=None)
seeds = st.integers(0, 2**31 - 1)


@pytest.fixture(scope="module")
def nd():
    with realexec.session(workers=1) as nd:
        yield nd


def _data(nd, seed, shape):
    return nd.array(np.random.default_rng(seed).standard_normal(shape))


def _np(param):
    return param.data().asnumpy().astype(np.float64)


# -- deferred initialisation and parameters ---------------------------------------------------
@SETTINGS
@given(batch=st.integers(1, 4), width=st.integers(1, 6), units=st.integers(1, 5), seed=seeds)
def test_dense_takes_its_input_width_from_the_first_input(nd, batch, width, units, seed):
    """A Dense without in_units has weight (units, 0) until it first runs: data() before that is
    a DeferredInitializationError, and after it the weight is (units, width)."""
    net = nn.Dense(units)
    net.initialize()
    assert net.weight.shape == (units, 0)
    with pytest.raises(DeferredInitializationError, match=net.weight.name):
        net.weight.data()
    y = net(_data(nd, seed, (batch, width)))
    assert y.shape == (batch, units)
    assert net.weight.shape == (units, width)
    assert net.weight.data().shape == (units, width)
    assert net.bias.data().shape == (units,)


def test_shapes_are_inferred_through_a_network(nd):
    """Each layer of a LeNet-like Sequential takes its input size from the layer before it."""
    net = nn.Sequential()
    net.add(nn.Conv2D(4, kernel_size=3, activation="relu"), nn.MaxPool2D(2),
            nn.BatchNorm(), nn.Flatten(), nn.Dense(5))
    net.initialize()
    conv, _, bn, _, dense = (net[i] for i in range(5))
    for p in (conv.weight, bn.gamma, dense.weight):
        with pytest.raises(DeferredInitializationError):
            p.data()
    assert net(_data(nd, 0, (2, 3, 8, 8))).shape == (2, 5)
    assert conv.weight.data().shape == (4, 3, 3, 3)
    assert bn.gamma.data().shape == (4,)
    assert dense.weight.data().shape == (5, 4 * 3 * 3)


def test_a_parameter_before_initialize_says_so(nd):
    """Running a block whose parameters were never initialized fails at the call, naming the
    parameter and saying to call initialize()."""
    net = nn.Dense(2)
    with pytest.raises(RuntimeError, match=f"{net.weight.name}.*initialize"):
        net(nd.ones((1, 3)))


def test_collect_params_names(nd):
    """collect_params() gives every parameter of a block and its children, named
    <block>_<parameter> with the blocks numbered per type, and selects by a regular
    expression."""
    net = nn.Sequential()
    net.add(nn.Dense(4, activation="relu"), nn.Dense(2), nn.BatchNorm())
    params = net.collect_params()
    d0, d1, bn = net[0], net[1], net[2]
    assert re.fullmatch(r"dense\d+", d0.name) and re.fullmatch(r"dense\d+", d1.name)
    assert int(d1.name[5:]) == int(d0.name[5:]) + 1
    assert list(params) == [f"{d0.name}_weight", f"{d0.name}_bias", f"{d1.name}_weight",
                            f"{d1.name}_bias", f"{bn.name}_gamma", f"{bn.name}_beta",
                            f"{bn.name}_running_mean", f"{bn.name}_running_var"]
    assert all(p.name == key for key, p in params.items())
    assert list(net.collect_params(".*weight")) == [f"{d0.name}_weight", f"{d1.name}_weight"]


def test_initialize_with_normal(nd):
    """initialize(init=init.Normal(sigma)): weights of mean 0 and deviation sigma; biases stay
    zero (their own initializer)."""
    sigma = 0.3
    net = nn.Dense(200)
    net.initialize(init=init.Normal(sigma=sigma))
    net(nd.ones((1, 50)))
    w = _np(net.weight)
    assert abs(w.mean()) < 0.02
    assert abs(w.std() - sigma) < 0.02 * sigma * 2
    assert not _np(net.bias).any()


def test_initialize_again_keeps_values_unless_forced(nd):
    """A second initialize() keeps the values; force_reinit=True makes new ones with the new
    initializer."""
    net = nn.Dense(3)
    net.initialize(init=init.Normal(sigma=1.0))
    x = nd.ones((2, 4))
    net(x)
    first = _np(net.weight)
    net.initialize(init=init.Constant(7.0))
    net(x)
    np.testing.assert_array_equal(_np(net.weight), first)
    net.initialize(init=init.Constant(7.0), force_reinit=True)
    y = net(x)
    np.testing.assert_array_equal(_np(net.weight), np.full((3, 4), 7.0))
    np.testing.assert_allclose(y.asnumpy(), np.full((2, 3), 28.0))


def test_set_data_and_grad(nd):
    """Parameter.set_data writes new values; Parameter.grad() is the gradient of the last
    backward."""
    net = nn.Dense(2, in_units=3, use_bias=False)
    net.initialize()
    x = nd.array(np.arange(6.0).reshape(2, 3))
    net(x)
    net.weight.set_data(nd.array(np.ones((2, 3))))
    np.testing.assert_array_equal(_np(net.weight), np.ones((2, 3)))
    with autograd.record():
        y = net(x)
    y.backward()
    np.testing.assert_allclose(net.weight.grad().asnumpy(),
                               np.tile(np.arange(6.0).reshape(2, 3).sum(0), (2, 1)))


# -- layers against numpy ---------------------------------------------------------------------
@SETTINGS
@given(batch=st.integers(1, 3), shape=st.lists(st.integers(1, 3), min_size=1, max_size=3),
       units=st.integers(1, 4), act=st.sampled_from([None, "relu", "sigmoid", "tanh"]),
       seed=seeds)
def test_dense_output(nd, batch, shape, units, act, seed):
    """Dense: activation(flatten(x) W^T + b)."""
    net = nn.Dense(units, activation=act)
    net.initialize(init=init.Normal(1.0))
    x = np.random.default_rng(seed).standard_normal((batch, *shape))
    y = net(nd.array(x)).asnumpy()
    want = x.reshape(batch, -1) @ _np(net.weight).T + _np(net.bias)
    want = {None: want, "relu": np.maximum(want, 0), "sigmoid": 1 / (1 + np.exp(-want)),
            "tanh": np.tanh(want)}[act]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def test_dense_without_flatten_acts_on_the_last_axis(nd):
    """Dense(flatten=False) maps (..., in) to (..., units), its weight (units, in)."""
    net = nn.Dense(3, flatten=False)
    net.initialize(init=init.Normal(1.0))
    x = np.random.default_rng(4).standard_normal((2, 4, 5))
    y = net(nd.array(x)).asnumpy()
    assert net.weight.shape == (3, 5)
    np.testing.assert_allclose(y, x @ _np(net.weight).T + _np(net.bias), rtol=1e-4, atol=1e-5)


@st.composite
def conv_layer(draw):
    k = draw(st.integers(1, 3))
    stride, pad = draw(st.integers(1, 2)), draw(st.integers(0, 1))
    size = draw(st.integers(max(1, k - 2 * pad), 6))
    return (draw(st.integers(1, 2)), draw(st.integers(1, 3)), size, size), k, stride, pad


@SETTINGS
@given(case=conv_layer(), channels=st.integers(1, 3), use_bias=st.booleans(), seed=seeds)
def test_conv2d_output(nd, case, channels, use_bias, seed):
    """Conv2D: cross-correlation with strides and padding, plus the bias per channel."""
    shape, k, stride, pad = case
    net = nn.Conv2D(channels, kernel_size=k, strides=stride, padding=pad, use_bias=use_bias,
                    bias_initializer=init.Normal(1.0))
    net.initialize(init=init.Normal(1.0))
    x = np.random.default_rng(seed).standard_normal(shape)
    y = net(nd.array(x)).asnumpy()
    want = conv2d(x, _np(net.weight), (stride, stride), (pad, pad))
    if use_bias:
        want = want + _np(net.bias).reshape(1, -1, 1, 1)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@SETTINGS
@given(case=conv_layer(), kind=st.sampled_from(["max", "avg"]), seed=seeds)
def test_pooling_layers(nd, case, kind, seed):
    """MaxPool2D and AvgPool2D with pool size, strides and padding; the global poolings."""
    shape, k, stride, pad = case
    pad = min(pad, k // 2)  # pooling pads at most half the kernel
    layer = {"max": nn.MaxPool2D, "avg": nn.AvgPool2D}[kind]
    x = np.random.default_rng(seed).standard_normal(shape)
    y = layer(pool_size=k, strides=stride, padding=pad)(nd.array(x)).asnumpy()
    np.testing.assert_allclose(y, pool2d(x, kind, (k, k), (stride, stride), (pad, pad)),
                               rtol=1e-5, atol=1e-6)
    glob = {"max": nn.GlobalMaxPool2D, "avg": nn.GlobalAvgPool2D}[kind]()
    reduce = np.max if kind == "max" else np.mean
    np.testing.assert_allclose(glob(nd.array(x)).asnumpy(),
                               reduce(x, axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)


def test_default_pool_stride_is_the_pool_size(nd):
    """MaxPool2D(2) halves each side (strides default to the pool size, as in MXNet)."""
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    y = nn.MaxPool2D(2)(nd.array(x)).asnumpy()
    np.testing.assert_array_equal(y, [[[[5.0, 7.0], [13.0, 15.0]]]])


@SETTINGS
@given(shape=st.sampled_from([(4, 3), (2, 3, 2, 2), (3, 1, 2, 3)]), seed=seeds)
def test_batch_norm_layer(nd, shape, seed):
    """BatchNorm: batch statistics under record (and the running ones move by momentum),
    running statistics outside it."""
    net = nn.BatchNorm(momentum=0.9)
    net.initialize()
    x = np.random.default_rng(seed).standard_normal(shape) * 2 + 1
    xs = nd.array(x)
    y_infer = net(xs).asnumpy()  # running mean 0, variance 1: x / sqrt(1 + eps)
    np.testing.assert_allclose(y_infer, x / np.sqrt(1 + 1e-5), rtol=1e-5, atol=1e-6)
    with autograd.record():
        y = net(xs)
    gamma, beta = _np(net.gamma), _np(net.beta)
    np.testing.assert_allclose(y.asnumpy(), batch_norm(x, gamma, beta, 1e-5), rtol=1e-4,
                               atol=1e-4)
    axes = tuple(i for i in range(len(shape)) if i != 1)
    np.testing.assert_allclose(_np(net.running_mean), 0.1 * x.mean(axis=axes), rtol=1e-4,
                               atol=1e-6)
    np.testing.assert_allclose(_np(net.running_var), 0.9 + 0.1 * x.var(axis=axes), rtol=1e-4)


def test_flatten_and_activation(nd):
    """Flatten: (N, ...) -> (N, rest); Activation applies its function."""
    x = np.random.default_rng(1).standard_normal((2, 3, 2, 2))
    np.testing.assert_array_equal(nn.Flatten()(nd.array(x)).asnumpy(),
                                  x.reshape(2, 12).astype(np.float32))
    np.testing.assert_allclose(nn.Activation("relu")(nd.array(x)).asnumpy(),
                               np.maximum(x, 0), rtol=1e-6)
    np.testing.assert_allclose(nn.Activation("sigmoid")(nd.array(x)).asnumpy(),
                               1 / (1 + np.exp(-x)), rtol=1e-5)


def test_losses(nd):
    """L2Loss: half the squared error per example (a (N,) label for a (N, 1) prediction);
    SoftmaxCrossEntropyLoss: -log softmax at the label per example."""
    rng = np.random.default_rng(2)
    pred, label = rng.standard_normal((4, 1)), rng.standard_normal(4)
    l2 = gluon.loss.L2Loss()(nd.array(pred), nd.array(label)).asnumpy()
    np.testing.assert_allclose(l2, 0.5 * (pred[:, 0] - label) ** 2, rtol=1e-5)
    logits, classes = rng.standard_normal((4, 3)), np.array([0, 2, 1, 2])
    ce = gluon.loss.SoftmaxCrossEntropyLoss()(nd.array(logits), nd.array(classes)).asnumpy()
    log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    np.testing.assert_allclose(ce, -log_p[np.arange(4), classes], rtol=1e-5)


# -- errors at the call -----------------------------------------------------------------------
def test_wrong_input_width_names_the_block(nd):
    """A Dense built with in_units=4 given width 5 fails at the call with one ShapeError naming
    the block and both widths, and issues nothing."""
    net = nn.Sequential()
    net.add(nn.Dense(3, in_units=4))
    net.initialize()
    dense = net[0]
    x = nd.ones((2, 5))
    before = next(nd._op_ids)
    with pytest.raises(ShapeError, match=rf"^{dense.name}: .*\(3, 5\).*\(3, 4\)"):
        net(x)
    assert next(nd._op_ids) == before + 1  # nothing issued in between
    assert net(nd.ones((2, 4))).shape == (2, 3)


def test_conv_kernel_larger_than_the_image(nd):
    """A 5x5 kernel on a 3x3 image is a ShapeError at the call, naming the op and the shapes."""
    net = nn.Conv2D(2, kernel_size=5)
    net.initialize()
    with pytest.raises(ShapeError, match=r"conv2d: kernel \(5, 5\) is larger than the padded "
                                         r"input \(3, 3\)"):
        net(nd.ones((1, 1, 3, 3)))
    assert net(nd.ones((1, 1, 5, 5))).shape == (1, 2, 1, 1)


def test_conv2d_needs_images(nd):
    """Conv2D on a 2-d input names the block."""
    net = nn.Conv2D(2, kernel_size=1)
    net.initialize()
    with pytest.raises(ShapeError, match=rf"{net.name}: .*\(N, C, H, W\)"):
        net(nd.ones((2, 3)))


# -- one block, two backends -----------------------------------------------------------------
def test_the_same_block_is_recorded_and_run():
    """A network is not tied to a backend: recorded for the model, then run on the engine,
    each `nd` with its own parameters; the run's output is numpy's from the run's weights."""
    net = nn.Sequential()
    net.add(nn.Conv2D(2, kernel_size=3, activation="relu"), nn.AvgPool2D(2), nn.Dense(3))
    net.initialize(init=init.Normal(0.5))
    seen = {}

    def forward(nd):
        x = nd.array(np.linspace(-1, 1, 72).reshape(2, 1, 6, 6))
        seen["y"] = net(x).asnumpy()
        seen["params"] = {k: p.data().asnumpy() for k, p in net.collect_params().items()}

    program = asyncsim.record(forward)
    counts = program.counts()
    assert counts["conv2d"] == 1 and counts["pool2d"] == 1 and counts["dot"] == 1
    assert not seen["y"].any()  # a recorded blocker hands back zeros
    realexec.run(forward, workers=1)
    w = seen["params"]
    conv, dense = net[0].name, net[2].name
    x = np.linspace(-1, 1, 72).reshape(2, 1, 6, 6)
    h = np.maximum(conv2d(x, w[f"{conv}_weight"], (1, 1), (0, 0))
                   + w[f"{conv}_bias"].reshape(1, -1, 1, 1), 0)
    h = pool2d(h, "avg", (2, 2), (2, 2), (0, 0)).reshape(2, -1)
    want = h @ w[f"{dense}_weight"].T + w[f"{dense}_bias"]
    np.testing.assert_allclose(seen["y"], want, rtol=1e-4, atol=1e-5)
    assert asyncsim.record(forward).counts() == counts  # recorded again after the run
