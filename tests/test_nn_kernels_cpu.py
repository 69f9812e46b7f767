"""realexec's CPU kernels of the training and CNN ops equal the plain-numpy references of
`nn_reference` on random shapes and geometries, in float32 and float64.

Each test allocates `out` from `asyncsim.nd.ops.infer`, as the engine does (the first input
itself for an in-place op), runs `KERNELS[name]` and compares with the float64 reference within
a tolerance of the dtype. Sizes stay small; data come from a drawn seed.
"""

import sys
import threading
import time
import weakref
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from nn_reference import reference

from asyncsim.nd.ops import INPLACE, infer
from realexec.cpu import conv
from realexec.cpu.graph import graph_kernel
from realexec.cpu.kernels import KERNELS

DTYPES = st.sampled_from(["float32", "float64"])
SEEDS = st.integers(0, 2**32 - 1)
TOL = {"float32": 1e-4, "float64": 1e-10}
# no deadline: a cold run compiles inside the first example
nn_settings = settings(max_examples=30, deadline=None)


def run(name, inputs, attrs):
    """Op `name` as the engine runs it; an in-place op writes its (copied) first input."""
    shapes = tuple(a.shape for a in inputs)
    shape, dtype = infer(name, shapes, tuple(str(a.dtype) for a in inputs), attrs)
    if name in INPLACE:
        inputs = (inputs[0].copy(),) + tuple(inputs[1:])
        out = inputs[0]
    else:
        out = np.empty(shape, dtype)
    KERNELS[name](tuple(inputs), out, attrs)
    return out


def assert_matches(name, inputs, attrs):
    """The kernel's result equals the reference within the dtype's tolerance."""
    got = run(name, inputs, attrs)
    expected = reference(name, inputs, attrs)
    tol = TOL[str(got.dtype)]
    finite = np.abs(expected[np.isfinite(expected)])
    scale = 1.0 + (finite.max() if finite.size else 0.0)
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * scale, err_msg=name)
    return got


@st.composite
def geometries(draw, max_channels=3):
    """A batch, channels and a window geometry whose kernel fits in the padded image."""
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    pad = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    image = tuple(draw(st.integers(max(1, k - 2 * p), 9)) for k, p in zip(kernel, pad, strict=True))
    return {
        "batch": draw(st.integers(1, 3)), "channels": draw(st.integers(1, max_channels)),
        "image": image, "kernel": kernel, "pad": pad,
        "stride": (draw(st.integers(1, 3)), draw(st.integers(1, 3))),
    }


def _window_attrs(geo):
    return {k: geo[k] for k in ("kernel", "stride", "pad")}


@nn_settings
@given(geo=geometries(), features=st.integers(1, 3), dtype=DTYPES, seed=SEEDS,
       compiled=st.booleans())
def test_convolutions_match_reference(geo, features, dtype, seed, compiled):
    """conv2d and both its gradients equal the loop reference for any stride, pad and kernel,
    run as one compiled call (BLAS by address) or as Python over the chunks."""
    with mock.patch.object(conv, "BLAS", conv.BLAS if compiled else None):
        _check_convolutions(geo, features, dtype, seed)


def _check_convolutions(geo, features, dtype, seed):
    rng = np.random.default_rng(seed)
    data_shape = (geo["batch"], geo["channels"], *geo["image"])
    weight_shape = (features, geo["channels"], *geo["kernel"])
    x = rng.standard_normal(data_shape).astype(dtype)
    w = rng.standard_normal(weight_shape).astype(dtype)
    attrs = _window_attrs(geo)
    y = assert_matches("conv2d", (x, w), attrs)
    g = rng.standard_normal(y.shape).astype(dtype)
    assert_matches("conv2d_grad_data", (g, w), {**attrs, "data_shape": data_shape})
    assert_matches("conv2d_grad_weight", (x, g), {**attrs, "weight_shape": weight_shape})


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("chunk_images", [1, 2])
def test_convolutions_in_several_chunks(monkeypatch, chunk_images, compiled):
    """A batch split into chunks of 1 or 2 images (the last one short) gives the one-chunk
    results: the weight gradient sums over the chunks."""
    if not compiled:
        monkeypatch.setattr(conv, "BLAS", None)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 2, 6, 7))
    w = rng.standard_normal((3, 2, 3, 2))
    attrs = {"kernel": (3, 2), "stride": (2, 1), "pad": (1, 0)}
    ho, wo = 3, 6
    monkeypatch.setattr(conv, "CHUNK_BYTES", chunk_images * 2 * 3 * 2 * ho * wo * x.itemsize)
    y = assert_matches("conv2d", (x, w), attrs)
    g = rng.standard_normal(y.shape)
    assert_matches("conv2d_grad_data", (g, w), {**attrs, "data_shape": x.shape})
    assert_matches("conv2d_grad_weight", (x, g), {**attrs, "weight_shape": w.shape})


@pytest.mark.skipif(conv.BLAS is None, reason="numpy's BLAS cannot be called by address here")
@pytest.mark.parametrize("name", ["conv2d", "conv2d_grad_data", "conv2d_grad_weight"])
def test_a_convolution_runs_every_chunk_without_the_gil(monkeypatch, name):
    """While this thread holds the GIL (a Python loop, no switch for 10 s), a convolution on
    another thread still gets through every chunk: its last image's result appears. Python over
    the chunks stopped after the first, waiting for the GIL to call the next product."""
    monkeypatch.setattr(conv, "CHUNK_BYTES", 1)  # an image a chunk
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((6, 3, 8, 8)), rng.standard_normal((4, 3, 3, 3))
    attrs = {"kernel": (3, 3), "stride": (1, 1), "pad": (1, 1)}
    g = rng.standard_normal((6, 4, 8, 8))
    inputs, out, attrs = {
        "conv2d": ((x, w), np.zeros((6, 4, 8, 8)), attrs),
        "conv2d_grad_data": ((g, w), np.zeros(x.shape), {**attrs, "data_shape": x.shape}),
        "conv2d_grad_weight": ((x, g), np.zeros(w.shape), {**attrs, "weight_shape": w.shape}),
    }[name]
    # the last image's part: its output, its data gradient, the weight gradient's sum
    last = (lambda: out[-1].any()) if name != "conv2d_grad_weight" else None
    expected = reference(name, inputs, attrs)
    inside = threading.Event()

    def convolve():
        inside.set()
        KERNELS[name](inputs, out, attrs)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(10.0)
    try:
        thread = threading.Thread(target=convolve)
        thread.start()
        inside.wait()
        deadline = time.perf_counter() + 2.0
        done = (lambda: np.allclose(out, expected)) if last is None else last
        while not done() and time.perf_counter() < deadline:
            pass  # Python, holding the GIL
        finished = done()
    finally:
        sys.setswitchinterval(interval)
    thread.join()
    assert finished
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-10)


def test_convolutions_on_two_threads_at_once():
    """Two threads convolving different shapes at once each get their own workspace."""
    rng = np.random.default_rng(1)
    cases = [(rng.standard_normal((3, 2, 9, 9)), rng.standard_normal((2, 2, 3, 3))),
             (rng.standard_normal((2, 3, 5, 8)), rng.standard_normal((4, 3, 2, 4)))]
    attrs = {"kernel": None, "stride": (1, 1), "pad": (1, 1)}
    failures = []

    def convolve(x, w):
        try:
            for _ in range(30):
                assert_matches("conv2d", (x, w), {**attrs, "kernel": w.shape[2:]})
        except AssertionError as error:  # reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=convolve, args=case) for case in cases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


@nn_settings
@given(geo=geometries(), pool_type=st.sampled_from(["max", "avg"]), ties=st.booleans(),
       dtype=DTYPES, seed=SEEDS)
def test_pooling_matches_reference(geo, pool_type, ties, dtype, seed):
    """pool2d and pool2d_grad equal the reference: padding is -inf for max and zero in the
    average; with ties, max's gradient goes to the first largest element of each window."""
    rng = np.random.default_rng(seed)
    shape = (geo["batch"], geo["channels"], *geo["image"])
    x = rng.integers(0, 3, shape) if ties else rng.standard_normal(shape)
    x = x.astype(dtype)
    # pooling's padding is at most half its window (as MXNet and PyTorch require)
    pad = tuple(min(p, k // 2) for p, k in zip(geo["pad"], geo["kernel"], strict=True))
    assume(all(k <= n + 2 * p for k, n, p in zip(geo["kernel"], geo["image"], pad, strict=True)))
    attrs = {**_window_attrs(geo), "pad": pad, "pool_type": pool_type}
    y = assert_matches("pool2d", (x,), attrs)
    g = rng.standard_normal(y.shape).astype(dtype)
    assert_matches("pool2d_grad", (x, g), attrs)


@st.composite
def arrays_and_axis(draw):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    return shape, draw(st.integers(0, len(shape) - 1))


@nn_settings
@given(case=arrays_and_axis(), dtype=DTYPES, seed=SEEDS)
def test_softmax_family_matches_reference(case, dtype, seed):
    """softmax, log_softmax and their gradients (from the output) along any axis."""
    shape, axis = case
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(shape) * 10).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    for name in ("softmax", "log_softmax"):
        out = assert_matches(name, (a,), {"axis": axis})
        assert_matches(f"{name}_grad", (out, g), {"axis": axis})


@nn_settings
@given(batch=st.integers(1, 4), classes=st.integers(1, 5), column=st.booleans(), dtype=DTYPES,
       seed=SEEDS)
def test_softmax_cross_entropy_matches_reference(batch, classes, column, dtype, seed):
    """softmax_ce and its gradient, with labels of shape (N,) or (N, 1)."""
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((batch, classes)) * 10).astype(dtype)
    label = rng.integers(0, classes, (batch, 1) if column else batch).astype(dtype)
    g = rng.standard_normal(batch).astype(dtype)
    assert_matches("softmax_ce", (logits, label), {})
    assert_matches("softmax_ce_grad", (logits, label, g), {})


@pytest.mark.parametrize("bad", [-1.0, 3.0, 7.5, float("nan")])
@pytest.mark.parametrize("name", ["softmax_ce", "softmax_ce_grad"])
def test_softmax_cross_entropy_rejects_bad_labels(name, bad):
    """A label outside 0..K-1 raises a ValueError naming the op and the label."""
    logits = np.zeros((2, 3), np.float32)
    label = np.array([0.0, bad], np.float32)
    inputs = (logits, label) if name == "softmax_ce" else (logits, label, np.ones(2, np.float32))
    with pytest.raises(ValueError, match=rf"{name}: label {bad!r}"):
        run(name, inputs, {})


@st.composite
def channel_shapes(draw):
    return (draw(st.integers(1, 3)), draw(st.integers(1, 3)),
            *draw(st.lists(st.integers(1, 4), max_size=2)))


@nn_settings
@given(shape=channel_shapes(), eps=st.sampled_from([1e-5, 1e-3, 0.1]), momentum=st.floats(0, 1),
       dtype=DTYPES, seed=SEEDS)
def test_batch_norm_matches_reference(shape, eps, momentum, dtype, seed):
    """batch_norm, its gradients, the inference form and the in-place running updates."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    gamma, beta, mean = (rng.standard_normal(shape[1]).astype(dtype) for _ in range(3))
    var = rng.uniform(0.1, 2, shape[1]).astype(dtype)
    assert_matches("batch_norm", (x, gamma, beta), {"eps": eps})
    assert_matches("batch_norm_grad", (x, gamma, g), {"eps": eps})
    assert_matches("batch_norm_grad_gamma", (x, g), {"eps": eps})
    assert_matches("batch_norm_infer", (x, gamma, beta, mean, var), {"eps": eps})
    for stat in ("mean", "var"):
        running = mean.copy()
        attrs = {"momentum": momentum, "stat": stat}
        KERNELS["bn_update"]((running, x), running, attrs)
        np.testing.assert_allclose(running, reference("bn_update", (mean, x), attrs),
                                   rtol=TOL[dtype], atol=TOL[dtype] * 10)


@st.composite
def shaped(draw, min_dims=0):
    return tuple(draw(st.lists(st.integers(1, 4), min_size=min_dims, max_size=3)))


@nn_settings
@given(shape=shaped(), dtype=DTYPES, seed=SEEDS)
def test_elementwise_training_ops_match_reference(shape, dtype, seed):
    """sigmoid (also where exp overflows), tanh, relu_grad, equal and both casts."""
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(shape) * 50).astype(dtype)
    b = rng.integers(-1, 2, shape).astype(dtype)
    for name in ("sigmoid", "tanh"):
        assert_matches(name, (a,), {})
    assert_matches("relu_grad", (b, a), {})
    assert_matches("equal", (b, rng.integers(-1, 2, shape).astype(dtype)), {})
    assert_matches("equal", (b, b.reshape(-1)[:1]), {})  # broadcast
    other = "float64" if dtype == "float32" else "float32"
    np.testing.assert_array_equal(run("cast", (a,), {"dtype": other}), a.astype(other))


@nn_settings
@given(shape=shaped(min_dims=1), data=st.data(), keepdims=st.booleans(), dtype=DTYPES,
       seed=SEEDS)
def test_axis_reductions_match_reference(shape, data, keepdims, dtype, seed):
    """sum_axis over any set of axes, and argmax along one (the first maximum on ties)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-2, 3, shape).astype(dtype) + rng.standard_normal(shape).astype(dtype)
    summed = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    assert_matches("sum_axis", (a,), {"axis": summed, "keepdims": keepdims})
    axis = data.draw(st.integers(0, len(shape) - 1))
    tied = rng.integers(0, 2, shape).astype(dtype)
    for values in (a, tied):
        assert_matches("argmax", (values,), {"axis": (axis,), "keepdims": keepdims})


@nn_settings
@given(shape=shaped(), data=st.data(), dtype=DTYPES, seed=SEEDS)
def test_reshapes_and_assign_match_reference(shape, data, dtype, seed):
    """broadcast_to stretches length-1 and new leading axes; reshape is a C-order copy;
    assign writes the second input into the first, in place."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape).astype(dtype)
    target = tuple(data.draw(st.integers(1, 3)) if n == 1 else n for n in shape)
    target = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2))) + target
    assert_matches("broadcast_to", (a,), {"shape": target})
    assert_matches("reshape", (a,), {"shape": (a.size,)})
    dst = np.zeros(shape, dtype)
    KERNELS["assign"]((dst, a), dst, {})
    np.testing.assert_array_equal(dst, a)


@nn_settings
@given(rows=st.integers(1, 4), inner=st.integers(1, 4), cols=st.integers(1, 4),
       transpose_a=st.booleans(), transpose_b=st.booleans(), dtype=DTYPES, seed=SEEDS)
def test_dot_with_transposes_matches_reference(rows, inner, cols, transpose_a, transpose_b,
                                               dtype, seed):
    """dot reads an operand transposed when transpose_a / transpose_b say so."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((inner, rows) if transpose_a else (rows, inner)).astype(dtype)
    b = rng.standard_normal((cols, inner) if transpose_b else (inner, cols)).astype(dtype)
    assert_matches("dot", (a, b), {"transpose_a": transpose_a, "transpose_b": transpose_b})


@nn_settings
@given(shape=shaped(), lr=st.floats(0, 1), rescale=st.floats(0, 2), wd=st.floats(0, 0.1),
       dtype=DTYPES, seed=SEEDS)
def test_sgd_update_writes_in_place(shape, lr, rescale, wd, dtype, seed):
    """sgd_update changes its first input to w - lr * (rescale * g + wd * w)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    attrs = {"lr": lr, "rescale": rescale, "wd": wd}
    target = w.copy()
    KERNELS["sgd_update"]((target, g), target, attrs)
    np.testing.assert_allclose(target, reference("sgd_update", (w, g), attrs),
                               rtol=TOL[dtype], atol=TOL[dtype])


# -- the graph kernel on a fake traced block ------------------------------------------------------
def fake_graph(inputs, ops, output, shapes):
    """A traced block with the members the graph kernel reads; ops as (name, reads, out, attrs)."""
    return SimpleNamespace(
        inputs=tuple(inputs), output=output,
        ops=[SimpleNamespace(name=n, reads=tuple(r), out=o, attrs=a) for n, r, o, a in ops],
        vars={v: SimpleNamespace(shape=s, dtype="float64") for v, s in shapes.items()})


def test_graph_runs_its_ops_in_order():
    """A graph relu(x @ w) + b, summed per row, equals the ops run one by one, twice (the
    second run uses the cached plan)."""
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 5)), rng.standard_normal(5)
    graph = fake_graph(
        ["x", "w", "b"],
        [("dot", ["x", "w"], "h", {}), ("relu", ["h"], "r", {}), ("add", ["r", "b"], "s", {}),
         ("sum_axis", ["s"], "y", {"axis": (1,), "keepdims": False})],
        "y", {"x": (4, 3), "w": (3, 5), "b": (5,), "h": (4, 5), "r": (4, 5), "s": (4, 5),
              "y": (4,)})
    expected = (np.maximum(x @ w, 0) + b).sum(axis=1)
    for _ in range(2):
        out = np.empty(4)
        KERNELS["graph"]((x, w, b), out, {"graph": graph})
        np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_graph_drops_temporaries_after_their_last_read():
    """In a chain x -> t1 -> t2 -> t3 -> y, t1 is freed before the op writing t3 runs, and
    the last op writes straight into the graph's out."""
    seen = {}
    alive_at_third = []

    def recording_relu(inputs, out, attrs):
        seen[len(seen)] = weakref.ref(out)
        if len(seen) == 3:
            alive_at_third.append(seen[0]() is not None)
        KERNELS["relu"](inputs, out, attrs)

    names = ["x", "t1", "t2", "t3", "y"]
    graph = fake_graph(["x"], [("relu", [names[i]], names[i + 1], {}) for i in range(4)], "y",
                       dict.fromkeys(names, (3,)))
    x = np.array([-1.0, 0.5, 2.0])
    out = np.empty(3)
    graph_kernel({"relu": recording_relu})((x,), out, {"graph": graph})
    assert alive_at_third == [False]
    assert seen[3]() is out
    np.testing.assert_array_equal(out, np.maximum(x, 0))


def test_graph_returning_an_input_copies_it():
    """A graph whose output is one of its inputs copies that input into out."""
    graph = fake_graph(["x"], [], "x", {"x": (2,)})
    out = np.empty(2)
    KERNELS["graph"]((np.array([1.0, 2.0]),), out, {"graph": graph})
    np.testing.assert_array_equal(out, [1.0, 2.0])


def test_graph_rejects_in_place_ops():
    """An in-place op inside a graph fails with an error naming the op."""
    graph = fake_graph(["w", "g"], [("sgd_update", ["w", "g"], "w", {"lr": 0.1})], "w",
                       {"w": (2,), "g": (2,)})
    with pytest.raises(ValueError, match="sgd_update"):
        KERNELS["graph"]((np.zeros(2), np.zeros(2)), np.empty(2), {"graph": graph})


def test_a_graph_of_native_ops_runs_in_one_compiled_call(monkeypatch):
    """relu(x @ w + b), every op one the compiled worker runs itself: the graph runs as one
    compiled call (`native_ops.run_steps`), twice over the same temporaries, with numpy's
    result; a member kernel replaced since makes it run step by step instead."""
    from realexec.cpu import native_ops, worker

    if worker.GEMM_ADDRESSES is None:
        pytest.skip("numpy's BLAS is not the ILP64 OpenBLAS the worker calls")
    calls = []
    real = native_ops.run_steps
    monkeypatch.setattr(native_ops, "run_steps", lambda *a: (calls.append(1), real(*a)))
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 5)), rng.standard_normal(5)
    graph = fake_graph(
        ["x", "w", "b"],
        [("dot", ["x", "w"], "h", {}), ("add", ["h", "b"], "s", {}), ("relu", ["s"], "y", {})],
        "y", {"x": (4, 3), "w": (3, 5), "b": (5,), "h": (4, 5), "s": (4, 5), "y": (4, 5)})
    expected = np.maximum(x @ w + b, 0)
    for _ in range(2):
        out = np.empty((4, 5))
        KERNELS["graph"]((x, w, b), out, {"graph": graph})
        np.testing.assert_allclose(out, expected, rtol=1e-12)
    assert len(calls) == 2
    patched = {**KERNELS, "relu": lambda inputs, out, attrs: KERNELS["relu"](inputs, out, attrs)}
    out = np.empty((4, 5))
    graph_kernel(patched, built=dict(KERNELS))((x, w, b), out, {"graph": graph})
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    assert len(calls) == 2
