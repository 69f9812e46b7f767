"""Autograd on the real engine: every differentiable op's gradient, and the tape's rules.

Each op of `asyncsim.nd.ops` that has a `grad` is checked on random small shapes (hypothesis)
against central finite differences in float64, computed by running the op's forward on the same
engine with one input element moved at a time: the gradient of sum(f(x) * w) for a random `w`
passed as the head gradient, so that every output element weighs differently. `cast` and
`copyto`, whose gradients are the head gradient itself, are checked in closed form. The tape's
rules: backward of a non-scalar is of its sum, a leaf used twice gets the sum of its
gradients, backward without a record and in-place writes on recorded arrays fail at the call,
and recorded activations live until backward and no longer.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import realexec
from asyncsim import autograd
from asyncsim.nd.autograd import AutogradError
from asyncsim.nd.ops import OPS, broadcast

SETTINGS = settings(max_examples=40, deadline=None)
EPS = 1e-6


@pytest.fixture(scope="module")
def nd():
    with realexec.session(workers=1) as nd:
        yield nd


def _arrays(nd, values):
    return [nd.array(v, dtype="float64") for v in values]


def autograd_grads(nd, fn, values, weight):
    """The gradients autograd gives for sum(fn(*values) * weight), as numpy arrays."""
    xs = _arrays(nd, values)
    for x in xs:
        x.attach_grad()
    with autograd.record():
        y = fn(nd, *xs)
    y.backward(nd.array(weight, dtype="float64"))
    return [x.grad.asnumpy() for x in xs]


def numeric_grads(nd, fn, values, weight):
    """Central differences of sum(fn(*values) * weight), the forward run on the engine."""
    handles = []
    for i, v in enumerate(values):
        for j in range(v.size):
            for step in (EPS, -EPS):
                moved = [u.copy() for u in values]
                moved[i].flat[j] += step
                handles.append(fn(nd, *_arrays(nd, moved)))
    outputs = iter([(h.asnumpy() * weight).sum() for h in handles])
    grads = []
    for v in values:
        g = np.empty(v.shape)
        for j in range(v.size):
            g.flat[j] = (next(outputs) - next(outputs)) / (2 * EPS)
        grads.append(g)
    return grads


def check(nd, fn, values, rtol=1e-5, atol=1e-6, seed=0):
    """autograd's gradient of fn at `values` equals the finite-difference one."""
    values = [np.asarray(v, np.float64) for v in values]
    out_shape = fn(nd, *_arrays(nd, values)).shape
    weight = np.random.default_rng(seed).standard_normal(out_shape)
    got = autograd_grads(nd, fn, values, weight)
    want = numeric_grads(nd, fn, values, weight)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == values[i].shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"input {i}")


# -- strategies ------------------------------------------------------------------------------
seeds = st.integers(0, 2**31 - 1)
small_shapes = st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple)


def normal(seed, *shapes, away_from_zero=False):
    rng = np.random.default_rng(seed)
    out = []
    for shape in shapes:
        v = rng.standard_normal(shape)
        out.append(np.sign(v) * (0.5 + np.abs(v)) if away_from_zero else v)
    return out


@st.composite
def broadcast_pair(draw):
    """Two shapes numpy broadcasts together: each a shape with some leading axes dropped and
    some axes set to 1 (so either operand, or both, may be stretched)."""
    full = draw(small_shapes)

    def part():
        lead = draw(st.integers(0, len(full) - 1))
        return tuple(1 if draw(st.booleans()) else n for n in full[lead:])

    return part(), part()


# -- arithmetic ------------------------------------------------------------------------------
BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b,
          "mul": lambda a, b: a * b, "div": lambda a, b: a / b}


@SETTINGS
@given(op=st.sampled_from(sorted(BINARY)), shapes=broadcast_pair(), seed=seeds)
def test_binary_ops_with_broadcasting(nd, op, shapes, seed):
    """add, sub, mul, div: each operand gets the gradient summed back to its own shape."""
    a, b = normal(seed, *shapes, away_from_zero=True)
    check(nd, lambda F, x, y: BINARY[op](x, y), [a, b], seed=seed)


SCALAR = {
    "add_scalar": lambda x, s: x + s, "radd": lambda x, s: s + x,
    "sub_scalar": lambda x, s: x - s, "rsub_scalar": lambda x, s: s - x,
    "mul_scalar": lambda x, s: x * s, "negate": lambda x, s: -x,
    "div_scalar": lambda x, s: x / s, "rdiv_scalar": lambda x, s: s / x,
}


@SETTINGS
@given(op=st.sampled_from(sorted(SCALAR)), shape=small_shapes, seed=seeds,
       scalar=st.floats(0.5, 3.0) | st.floats(-3.0, -0.5))
def test_scalar_ops(nd, op, shape, seed, scalar):
    """Arithmetic with a Python number on either side."""
    (x,) = normal(seed, shape, away_from_zero=True)
    check(nd, lambda F, a: SCALAR[op](a, scalar), [x], seed=seed)


@SETTINGS
@given(op=st.sampled_from(["relu", "sigmoid", "tanh"]), shape=small_shapes, seed=seeds)
def test_activations(nd, op, shape, seed):
    """relu (the input's sign picks the gradient), sigmoid and tanh (from their outputs)."""
    (x,) = normal(seed, shape)
    check(nd, lambda F, a: getattr(F, op)(a), [x], seed=seed)


@SETTINGS
@given(m=st.integers(1, 4), k=st.integers(1, 4), n=st.integers(1, 4),
       ta=st.booleans(), tb=st.booleans(), seed=seeds)
def test_dot_with_transposes(nd, m, k, n, ta, tb, seed):
    """dot of 2-d operands, each possibly transposed."""
    a, b = normal(seed, (k, m) if ta else (m, k), (n, k) if tb else (k, n))
    check(nd, lambda F, x, y: F.dot(x, y, transpose_a=ta, transpose_b=tb), [a, b], seed=seed)


@SETTINGS
@given(case=st.sampled_from(["vv", "vm", "mv"]), k=st.integers(1, 4), n=st.integers(1, 4),
       seed=seeds)
def test_dot_of_vectors(nd, case, k, n, seed):
    """dot with a 1-d operand: vector . vector, vector . matrix, matrix . vector."""
    shapes = {"vv": ((k,), (k,)), "vm": ((k,), (k, n)), "mv": ((n, k), (k,))}[case]
    check(nd, lambda F, x, y: F.dot(x, y), normal(seed, *shapes), seed=seed)


# -- reductions and shapes --------------------------------------------------------------------
@SETTINGS
@given(op=st.sampled_from(["sum", "mean", "norm"]), shape=small_shapes, seed=seeds)
def test_full_reductions(nd, op, shape, seed):
    """sum, mean and norm of every element (shape ())."""
    (x,) = normal(seed, shape, away_from_zero=True)
    check(nd, lambda F, a: getattr(a, op)(), [x], seed=seed)


@SETTINGS
@given(shape=small_shapes, data=st.data(), keepdims=st.booleans(), mean=st.booleans(),
       seed=seeds)
def test_sum_and_mean_over_axes(nd, shape, data, keepdims, mean, seed):
    """sum_axis (and mean over axes, a sum_axis times a number), with and without keepdims."""
    axis = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1,
                              max_size=len(shape), unique_by=lambda a: a % len(shape)))
    (x,) = normal(seed, shape)
    reduce = "mean" if mean else "sum"
    check(nd, lambda F, a: getattr(F, reduce)(a, axis=tuple(axis), keepdims=keepdims), [x],
          seed=seed)


@SETTINGS
@given(shapes=broadcast_pair(), seed=seeds)
def test_broadcast_to(nd, shapes, seed):
    """broadcast_to: the gradient is summed over the stretched axes."""
    target = broadcast("test", *shapes)
    (x,) = normal(seed, shapes[0])
    check(nd, lambda F, a: F.broadcast_to(a, target), [x], seed=seed)


@SETTINGS
@given(shape=small_shapes, seed=seeds, data=st.data())
def test_reshape(nd, shape, seed, data):
    """reshape into the same elements in another shape (and flatten)."""
    size = int(np.prod(shape))
    target = data.draw(st.sampled_from([(size,), (1, size), (size, 1), (-1,), shape[::-1]]))
    (x,) = normal(seed, shape)
    check(nd, lambda F, a: a.reshape(target), [x], seed=seed)
    check(nd, lambda F, a: F.flatten(a), [x], seed=seed)


@SETTINGS
@given(shape=small_shapes, seed=seeds, data=st.data())
def test_slice_of_rows(nd, shape, seed, data):
    """x[i:j] and x[i]: the gradient lands in the rows taken, zeros elsewhere."""
    n = shape[0]
    start = data.draw(st.integers(0, n - 1))
    stop = data.draw(st.integers(start + 1, n))
    (x,) = normal(seed, shape)
    check(nd, lambda F, a: a[start:stop], [x], seed=seed)
    check(nd, lambda F, a: a[start], [x], seed=seed)


@SETTINGS
@given(shape=small_shapes, seed=seeds, to=st.sampled_from(["float32", "float64"]))
def test_cast_and_copies_pass_the_gradient_through(nd, shape, seed, to):
    """cast, copy and copyto: the input's gradient is the head gradient, in the input's dtype."""
    x_np, w = normal(seed, shape, shape)
    x = nd.array(x_np, dtype="float32")
    x.attach_grad()
    with autograd.record():
        y = x.astype(to).copy().copyto(nd.cpu())
    assert y.dtype == to
    y.backward(nd.array(w, dtype=to))
    assert x.grad.dtype == "float32"
    np.testing.assert_allclose(x.grad.asnumpy(), w.astype(np.float32), rtol=1e-6)


# -- neural-network ops -----------------------------------------------------------------------
@st.composite
def conv_case(draw):
    n, c, f = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad = (draw(st.integers(0, 1)), draw(st.integers(0, 1)))
    h = draw(st.integers(max(1, kh - 2 * pad[0]), 5))
    w = draw(st.integers(max(1, kw - 2 * pad[1]), 5))
    return (n, c, h, w), (f, c, kh, kw), stride, pad


@SETTINGS
@given(case=conv_case(), bias=st.booleans(), seed=seeds)
def test_convolution(nd, case, bias, seed):
    """conv2d with strides and padding: the data's and the weight's gradient (and the bias's,
    a broadcast add)."""
    data_shape, weight_shape, stride, pad = case
    values = normal(seed, data_shape, weight_shape, (weight_shape[0],))

    def conv(F, x, w, b=None):
        return F.Convolution(x, w, b, kernel=weight_shape[2:], num_filter=weight_shape[0],
                             stride=stride, pad=pad, no_bias=b is None)

    check(nd, conv, values if bias else values[:2], seed=seed)


@st.composite
def pool_case(draw):
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad = tuple(draw(st.integers(0, k // 2)) for k in kernel)  # at most half the kernel
    h = draw(st.integers(max(1, kernel[0] - 2 * pad[0]), 5))
    w = draw(st.integers(max(1, kernel[1] - 2 * pad[1]), 5))
    return (draw(st.integers(1, 2)), draw(st.integers(1, 2)), h, w), kernel, stride, pad


@SETTINGS
@given(case=pool_case(), pool_type=st.sampled_from(["max", "avg"]),
       global_pool=st.booleans(), seed=seeds)
def test_pooling(nd, case, pool_type, global_pool, seed):
    """Max pooling (to each window's largest element) and average pooling (padding counted),
    with strides and padding, and global pooling."""
    shape, kernel, stride, pad = case
    (x,) = normal(seed, shape)
    check(nd, lambda F, a: F.Pooling(a, kernel=kernel, pool_type=pool_type, stride=stride,
                                     pad=pad, global_pool=global_pool), [x], seed=seed)


@SETTINGS
@given(shape=small_shapes, log=st.booleans(), seed=seeds, data=st.data())
def test_softmax_and_log_softmax(nd, shape, log, seed, data):
    """softmax and log_softmax along any axis (their gradients come from their outputs)."""
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    (x,) = normal(seed, shape)
    fn = "log_softmax" if log else "softmax"
    check(nd, lambda F, a: getattr(F, fn)(a, axis=axis), [x], seed=seed)


@SETTINGS
@given(n=st.integers(1, 4), k=st.integers(1, 4), column=st.booleans(), seed=seeds)
def test_softmax_cross_entropy(nd, n, k, column, seed):
    """softmax_ce of logits with class-index labels, (N,) or (N, 1); the labels take none."""
    (logits,) = normal(seed, (n, k))
    labels = np.random.default_rng(seed).integers(0, k, size=(n, 1) if column else (n,))

    def ce(F, x):
        return F.softmax_cross_entropy(x, F.array(labels, dtype="float64"))

    check(nd, ce, [logits], seed=seed)


@SETTINGS
@given(shape=st.sampled_from([(2, 1), (3, 2), (4, 3), (2, 2, 2, 2), (2, 1, 3, 1), (1, 2, 2, 3)]),
       seed=seeds)
def test_batch_norm(nd, shape, seed):
    """Training-mode batch norm: the data's, gamma's and beta's gradients."""
    c = shape[1]
    x, gamma, beta = normal(seed, shape, (c,), (c,))

    def bn(F, data, g, b):
        return F.invoke("batch_norm", data, g, b, eps=1e-5)

    check(nd, bn, [x, gamma, beta], rtol=1e-4, atol=1e-5, seed=seed)


@SETTINGS
@given(shape=st.sampled_from([(2, 1), (3, 2), (2, 2, 2, 2), (1, 3, 2, 1)]), seed=seeds)
def test_batch_norm_with_running_statistics(nd, shape, seed):
    """Inference-mode batch norm (use_global_stats): the data's, gamma's and beta's gradients,
    the running mean and variance held fixed."""
    c = shape[1]
    x, gamma, beta, mean, var = normal(seed, shape, (c,), (c,), (c,), (c,))

    def bn(F, data, g, b):
        return F.invoke("batch_norm_infer", data, g, b, F.array(mean, dtype="float64"),
                        F.array(np.abs(var) + 0.5, dtype="float64"), eps=1e-5)

    check(nd, bn, [x, gamma, beta], rtol=1e-4, atol=1e-5, seed=seed)


def test_every_differentiable_op_is_checked():
    """The tests above cover exactly the ops that define a gradient (a new op's gradient
    needs a test here)."""
    covered = {"add", "sub", "mul", "div", "add_scalar", "sub_scalar", "rsub_scalar",
               "mul_scalar", "div_scalar", "rdiv_scalar", "relu", "sigmoid", "tanh", "dot",
               "sum", "mean", "norm", "sum_axis", "broadcast_to", "reshape", "slice", "cast",
               "copy", "copyto", "conv2d", "pool2d", "softmax", "log_softmax", "softmax_ce",
               "batch_norm", "batch_norm_infer"}
    assert {name for name, d in OPS.items() if d.grad is not None} == covered


# -- the tape's rules -------------------------------------------------------------------------
@SETTINGS
@given(shape=small_shapes, seed=seeds)
def test_backward_of_a_non_scalar_is_of_its_sum(nd, shape, seed):
    """y.backward() on a non-scalar y gives the gradients of y.sum().backward()."""
    (x_np,) = normal(seed, shape)
    grads = []
    for reduce in (False, True):
        x = nd.array(x_np, dtype="float64")
        x.attach_grad()
        with autograd.record():
            y = nd.tanh(x) * x
            if reduce:
                y = y.sum()
        y.backward()
        grads.append(x.grad.asnumpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)
    t = np.tanh(x_np)
    np.testing.assert_allclose(grads[0], t + x_np * (1 - t * t), rtol=1e-10)


@SETTINGS
@given(shape=small_shapes, seed=seeds)
def test_gradients_of_a_leaf_used_twice_add_up(nd, shape, seed):
    """A leaf read by several ops gets the sum of their gradients: d(x*x + 3x + relu(x))."""
    (x_np,) = normal(seed, shape)
    check(nd, lambda F, a: a * a + a * 3.0 + F.relu(a), [x_np], seed=seed)
    x = nd.array(x_np, dtype="float64")
    x.attach_grad()
    with autograd.record():
        y = x * x + x * 3.0 + nd.relu(x)
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * x_np + 3 + (x_np > 0), rtol=1e-12)


def test_an_intermediate_read_by_a_later_op_gets_both_gradients(nd):
    """a = 2x; b = 3a; h = a + b: a's gradient (1 + 3) is complete before it reaches x,
    whichever operand order h has."""
    for order in (0, 1):
        x = nd.array(np.array([1.0, -1.0]))
        x.attach_grad()
        with autograd.record():
            a = x * 2.0
            b = a * 3.0
            h = a + b if order == 0 else b + a
        h.backward()
        np.testing.assert_allclose(x.grad.asnumpy(), [8.0, 8.0])


STEPS = {"add": lambda F, a, b: a + b, "mul": lambda F, a, b: a * b,
         "sub": lambda F, a, b: a - b, "tanh": lambda F, a, b: F.tanh(a),
         "sigmoid": lambda F, a, b: F.sigmoid(a), "scale": lambda F, a, b: a * 0.5}


@st.composite
def expressions(draw):
    """A random expression DAG: each step applies an op to earlier nodes (leaves or results,
    counted back from the newest, so that an op often reads a result and what it was made
    from), so results are read by several later ops."""
    leaves = draw(st.integers(1, 3))
    steps = draw(st.lists(st.tuples(st.sampled_from(sorted(STEPS)), st.integers(0, 3),
                                    st.integers(0, 3)), min_size=1, max_size=8))
    return leaves, steps, draw(st.booleans())


def evaluate(F, expression, *leaves):
    """The expression's value: its last result, plus (when `gather`) every other result, so
    that each is read again."""
    _, steps, gather = expression
    nodes = list(leaves)
    for op, i, j in steps:
        nodes.append(STEPS[op](F, nodes[-1 - i % len(nodes)], nodes[-1 - j % len(nodes)]))
    head = nodes[-1]
    for result in nodes[len(leaves):-1] if gather else ():
        head = head + result
    return head


@SETTINGS
@given(expression=expressions(), shape=small_shapes, seed=seeds)
def test_random_expression_graphs(nd, expression, shape, seed):
    """Any DAG of recorded ops, with leaves and results read several times, gets the
    finite-difference gradient at every leaf."""
    values = normal(seed, *[shape] * expression[0])
    check(nd, lambda F, *xs: evaluate(F, expression, *xs), values, seed=seed)


def test_backward_writes_fresh_gradients_each_time(nd):
    """Each backward overwrites .grad (grad_req='write'), it does not accumulate."""
    x = nd.array(np.array([1.0, 2.0]), dtype="float64")
    x.attach_grad()
    for scale in (2.0, 5.0):
        with autograd.record():
            y = (x * scale).sum()
        y.backward()
        np.testing.assert_allclose(x.grad.asnumpy(), [scale, scale])


def test_backward_of_an_unrecorded_array_raises(nd):
    """backward outside record (or of an array no leaf reaches) fails at the call."""
    x = nd.array(np.ones(3))
    x.attach_grad()
    y = (x * 2).sum()  # not recorded
    with pytest.raises(AutogradError, match="not recorded"):
        y.backward()
    plain = nd.ones((3,))
    with autograd.record():
        z = (plain * 2).sum()  # no input needs a gradient
    with pytest.raises(AutogradError, match="not recorded"):
        z.backward()


def test_head_gradient_of_the_wrong_shape_raises(nd):
    """A head gradient must have the head's shape."""
    x = nd.ones((3,))
    x.attach_grad()
    with autograd.record():
        y = x * 2
    with pytest.raises(AutogradError, match="head_grad"):
        y.backward(nd.ones((2,)))


@pytest.mark.parametrize("write", ["iadd", "setitem", "setitem_scalar"])
def test_in_place_write_on_a_recorded_array_raises(nd, write):
    """+=, a[:] = b and a[:] = 1 on a leaf or a recorded result fail at the call, naming the op,
    and the array keeps its values."""
    x = nd.array(np.arange(3.0))
    x.attach_grad()
    with autograd.record():
        y = x * 2
        for target in (x, y):
            with pytest.raises(AutogradError, match="in-place"):
                if write == "iadd":
                    target += 1
                elif write == "setitem":
                    target[:] = nd.ones((3,))
                else:
                    target[:] = 1.0
    np.testing.assert_array_equal(x.asnumpy(), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(y.asnumpy(), [0.0, 2.0, 4.0])
    x[:] = 5.0  # outside record, as a manual SGD step does: allowed
    np.testing.assert_array_equal(x.asnumpy(), [5.0] * 3)


def test_recorded_activations_live_until_backward(nd):
    """An intermediate result whose handle is dropped stays alive (on the engine too) while the
    tape holds it, and goes at backward; without record it goes at once."""
    backend = nd._backend
    x = nd.array(np.linspace(-1, 1, 64).reshape(8, 8))
    x.attach_grad()
    gc.collect()  # arrays of earlier tests held in cycles go now, not during the count
    before = len(backend.vars)
    with autograd.record():
        hidden = nd.relu(x * 2.0)
        y = (hidden * hidden).sum()
    alive = weakref.ref(hidden)
    del hidden
    gc.collect()
    assert alive() is not None  # held by y's tape node
    assert len(backend.vars) >= before + 3  # x * 2, relu, the square (y aside)
    y.backward()
    gc.collect()
    assert alive() is None
    nd.waitall()  # (the engine takes a drop at its next push or blocker)
    assert len(backend.vars) == before + 1  # y alone
    np.testing.assert_allclose(x.grad.asnumpy(), 8 * np.maximum(np.linspace(-1, 1, 64), 0)
                               .reshape(8, 8), rtol=1e-6)
    hidden = nd.relu(x * 2.0)  # not recorded: nothing holds the intermediate
    unrecorded = weakref.ref(hidden)
    y = (hidden * hidden).sum()
    del hidden
    gc.collect()
    assert unrecorded() is None


def test_recorded_activations_show_in_the_measured_memory():
    """The engine's live bytes stay high between a recorded forward and its backward, and fall
    after it: the memory curve of a training step."""
    n = 256 * 1024  # 1 MiB of float32 per activation

    def step(nd):
        x = nd.ones((n,))
        x.attach_grad()
        with nd.benchmark("forward"):
            with autograd.record():
                h = x
                for _ in range(4):
                    h = nd.tanh(h)  # each tanh output is saved for its gradient
                y = h.sum()
            del h
            nd.waitall()
        with nd.benchmark("backward"):
            y.backward()
            del y
            nd.waitall()

    trace = realexec.run(step, workers=1)
    marks = {label: (a, b) for label, a, b in trace.marks}
    t, live = trace.memory_curve("cpu")
    at_forward_end = live[np.searchsorted(t, marks["forward"][1], side="right") - 1]
    at_end = live[-1]
    assert at_forward_end >= 5 * 4 * n  # x, four tanh outputs (plus x.grad and y)
    assert at_end <= 2 * 4 * n + 64  # x and x.grad
