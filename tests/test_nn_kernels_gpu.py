"""The GPU kernels of the training and CNN ops (and dot's transposes, and `graph`), checked
against the plain-numpy references of tests/nn_reference.py.

Runs under numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1, set by tests/conftest.py) or on a
real GPU. The simulator runs each CUDA thread as a Python thread (blocks of 32, grids of 2
blocks), so arrays are tiny: a few dozen to a few hundred elements, enough to send rows and
outputs around the grid-stride loops and both sum_axis kernels (fewer or more terms than a
block has threads).
"""

import types

import numpy as np
import pytest
from gpu_guard import require_gpu
from hypothesis import given, settings
from hypothesis import strategies as st

gpu = require_gpu()

from nn_reference import reference  # noqa: E402

from asyncsim.nd import ops  # noqa: E402
from realexec.gpu import graph as gpu_graph  # noqa: E402
from realexec.gpu import im2col as gpu_im2col  # noqa: E402
from realexec.gpu import launch as gpu_launch  # noqa: E402
from realexec.gpu import matmul as gpu_matmul  # noqa: E402

pytestmark = [pytest.mark.cudasim, pytest.mark.usefixtures("quick_simulator_barriers")]

TOL = {"float32": {"rtol": 2e-5, "atol": 2e-5}, "float64": {"rtol": 1e-10, "atol": 1e-10}}
DTYPES = ["float32", "float64"]


@pytest.fixture(scope="module")
def dev():
    """One pool and one stream for the module."""
    class Dev:
        pool = gpu.DevicePool(0)
        stream = gpu.cuda.stream()
    return Dev


def run(dev, name, hosts, attrs):
    """Run op `name` on copies of the host arrays; return the result on the host. Every
    buffer goes back to the pool, so a kernel path that leaks shows in live_bytes."""
    before = dev.pool.live_bytes
    shape, dtype = ops.infer(name, tuple(h.shape for h in hosts),
                             tuple(str(h.dtype) for h in hosts), attrs)
    inputs = []
    for h in hosts:
        d = dev.pool.alloc(h.shape, h.dtype)
        gpu.to_device(h.copy(order="C"), d, dev.stream)
        inputs.append(d)
    out = inputs[0] if name in ops.INPLACE else dev.pool.alloc(shape, dtype)
    gpu.GPU_KERNELS[name](tuple(inputs), out, attrs, dev.stream)
    result = np.empty(shape, dtype)
    gpu.to_host(out, result, dev.stream)
    dev.stream.synchronize()
    for d in {id(x): x for x in [*inputs, out]}.values():
        dev.pool.release(d)
    assert dev.pool.live_bytes == before
    return result


def check(dev, name, hosts, attrs, dtype=None):
    """The kernel's result has the op's shape and dtype and equals the reference."""
    got = run(dev, name, hosts, attrs)
    want = reference(name, hosts, attrs)
    dtype = dtype or str(hosts[0].dtype)
    assert got.dtype == dtype and got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, **TOL[dtype])
    return got


def uniform(shape, dtype, seed, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)


# -- tensor ops ------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the simulator's
@pytest.mark.parametrize("dtype", DTYPES)
def test_elementwise_ops(dev, dtype):
    """sigmoid, tanh (extreme inputs included), relu_grad, sgd_update, reshape and assign equal
    the references."""
    a = uniform((5, 9), dtype, 1, -6, 6)
    a[0, :3] = [-200.0, 0.0, 200.0]  # sigmoid saturates to 0 and 1, never NaN
    g = uniform((5, 9), dtype, 2)
    for name in ("sigmoid", "tanh"):
        assert np.isfinite(check(dev, name, (a,), {})).all()
    check(dev, "relu_grad", (a, g), {})
    check(dev, "sgd_update", (a, g), {"lr": 0.1, "rescale": 0.5, "wd": 0.01})
    check(dev, "reshape", (a,), {"shape": (3, 15)})
    check(dev, "assign", (a, g), {})


@pytest.mark.parametrize("to", DTYPES)
def test_cast_between_dtypes(dev, to):
    """cast copies values into the other dtype (float64 -> float32 rounds)."""
    source = uniform((4, 7), "float64" if to == "float32" else "float32", 3)
    got = run(dev, "cast", (source,), {"dtype": to})
    assert got.dtype == to
    np.testing.assert_array_equal(got, source.astype(to))


@pytest.mark.parametrize("a_shape,b_shape", [((6, 5), (6, 5)), ((6, 5), (5,)), ((6, 1), (1, 5))])
def test_equal_broadcasts(dev, a_shape, b_shape):
    """equal gives 1.0 where the broadcast operands are equal and 0.0 elsewhere."""
    rng = np.random.default_rng(4)
    a = rng.integers(0, 3, a_shape).astype(np.float32)
    b = rng.integers(0, 3, b_shape).astype(np.float32)
    got = check(dev, "equal", (a, b), {})
    assert set(np.unique(got)) <= {0.0, 1.0}


@pytest.mark.parametrize("shape,to", [((5,), (3, 5)), ((4, 1), (2, 4, 6)), ((), (3, 2))])
def test_broadcast_to(dev, shape, to):
    """broadcast_to stretches rows, columns and scalars as numpy does."""
    check(dev, "broadcast_to", (uniform(shape, "float64", 5),), {"shape": to})


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(DTYPES),
       st.lists(st.integers(1, 6), min_size=1, max_size=4).filter(lambda s: np.prod(s) <= 300),
       st.booleans(), st.data())
def test_sum_axis_like_numpy(dev, dtype, shape, keepdims, data):
    """sum_axis over any sorted set of axes, kept as 1s or dropped, equals numpy's sum (short
    sums one thread per output, long ones a block per output)."""
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    attrs = {"axis": tuple(sorted(axes)), "keepdims": keepdims}
    check(dev, "sum_axis", (uniform(tuple(shape), dtype, 6),), attrs)


@pytest.mark.parametrize("shape,axis", [((40, 3), (0,)), ((2, 36, 2), (0, 2)), ((8, 2, 5), (0, 2)),
                                        ((4, 3, 11), (0, 2)), ((3, 0), (1,))])
@pytest.mark.parametrize("split", [False, True])
def test_sum_axis_long_and_empty(dev, monkeypatch, shape, axis, split):
    """Long sums (more terms than a block's threads, over separated axes) and sums of no terms
    (zeros); with `split` (forced at these sizes), the few long outputs cut in parts, a block
    each, and their partial sums added."""
    if split:
        monkeypatch.setattr(gpu_launch, "TARGET_BLOCKS", 12)
        monkeypatch.setattr(gpu_launch, "PART_ELEMENTS", 5)
    check(dev, "sum_axis", (uniform(shape, "float32", 7),), {"axis": axis, "keepdims": False})


def test_argmax_takes_the_first_largest(dev):
    """argmax along any axis gives float indices of the first largest value, with keepdims."""
    a = np.random.default_rng(8).integers(0, 3, (4, 5, 3)).astype(np.float32)  # many ties
    for axis in range(3):
        for keepdims in (False, True):
            check(dev, "argmax", (a,), {"axis": (axis,), "keepdims": keepdims})


# -- dot with transposes ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k,m", [(3, 5, 4), (40, 6, 33)])
@pytest.mark.parametrize("ta,tb", [(False, True), (True, False), (True, True)])
def test_dot_transposes(dev, dtype, n, k, m, ta, tb):
    """dot with transpose_a / transpose_b equals numpy's product of the transposes, through
    both matrix kernels (the small product and the one of two 32 x 32 tiles)."""
    a = uniform((k, n) if ta else (n, k), dtype, 9)
    b = uniform((m, k) if tb else (k, m), dtype, 10)
    check(dev, "dot", (a, b), {"transpose_a": ta, "transpose_b": tb})


@pytest.mark.simulator
def test_dot_transpose_shapes_reach_both_kernels_and_both_transposes(dev):
    """Under the simulator the products above take both kernels, and their operands both kinds
    of transpose: a strided view (small) and a C-contiguous copy (from COPY_MIN elements)."""
    chosen = {gpu_matmul.matmul_launch(n, m)[0] for n, m in ((3, 4), (40, 33))}
    assert chosen == {gpu_matmul._matmul_kernel, gpu_matmul._small_matmul_kernel}
    assert 5 * 4 < gpu_matmul.COPY_MIN <= 6 * 33
    small, large = dev.pool.alloc((5, 4), np.float32), dev.pool.alloc((6, 33), np.float32)
    view = gpu_matmul.transposed(small, dev.stream, 0)
    copy = gpu_matmul.transposed(large, dev.stream, 1)
    dev.stream.synchronize()
    assert view.shape == (4, 5) and not view._ary.flags.c_contiguous
    assert copy.shape == (33, 6) and copy._ary.flags.c_contiguous
    for arr in (small, large):
        dev.pool.release(arr)


# -- convolution and pooling -----------------------------------------------------------------------
GEOMETRIES = [((3, 3), (1, 1), (0, 0)), ((3, 2), (2, 1), (1, 1)), ((2, 2), (2, 2), (1, 0))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel,stride,pad", GEOMETRIES)
def test_convolution_and_its_gradients(dev, dtype, kernel, stride, pad):
    """conv2d, conv2d_grad_data and conv2d_grad_weight equal the loop references, with strides,
    padding and non-square kernels."""
    x = uniform((2, 2, 5, 6), dtype, 11)
    w = uniform((3, 2, *kernel), dtype, 12)
    geo = {"kernel": kernel, "stride": stride, "pad": pad}
    y = check(dev, "conv2d", (x, w), geo)
    g = uniform(y.shape, dtype, 13)
    check(dev, "conv2d_grad_data", (g, w), {**geo, "data_shape": x.shape})
    check(dev, "conv2d_grad_weight", (x, g), {**geo, "weight_shape": w.shape})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel,stride,pad", GEOMETRIES[:2])
def test_convolution_as_im2col_and_matrix_product(dev, monkeypatch, dtype, kernel, stride, pad):
    """The im2col path (forced here: the simulator's sizes are below its thresholds) equals the
    reference, with the batch cut in chunks of two images and one (a chunk of two spans two
    or more tiles: the tiled kernel; the first geometry's last chunk, one tile: the small
    kernel); and so does the weight gradient by the same chunks, each chunk's product added
    into the first's."""
    monkeypatch.setattr(gpu_im2col, "MIN_FILTERS", 1)
    monkeypatch.setattr(gpu_im2col, "MIN_WINDOW", 1)
    x = uniform((3, 2, 7, 8), dtype, 31)
    w = uniform((4, 2, *kernel), dtype, 32)
    # an int, not numpy's: a real GPU's device_array refuses a numpy integer size
    window, pixels = 2 * kernel[0] * kernel[1], int(np.prod(reference(
        "conv2d", (x[:1], w), {"stride": stride, "pad": pad}).shape[2:]))
    monkeypatch.setattr(gpu_im2col, "SCRATCH_ELEMENTS", 2 * window * pixels)
    geo = {"kernel": kernel, "stride": stride, "pad": pad}
    y = check(dev, "conv2d", (x, w), geo)
    g = uniform(y.shape, dtype, 33)
    check(dev, "conv2d_grad_weight", (x, g), {**geo, "weight_shape": w.shape})
    check(dev, "conv2d_grad_data", (g, w), {**geo, "data_shape": x.shape})


def test_im2col_is_for_large_layers():
    """Layers with few filters or a short window (LeNet's) keep the direct kernel."""
    assert not gpu_im2col.worth_it(6, 25) and not gpu_im2col.worth_it(64, 1)
    assert gpu_im2col.worth_it(64, 576)


@pytest.mark.parametrize("pool_type", ["max", "avg"])
@pytest.mark.parametrize("kernel,stride,pad", GEOMETRIES + [((5, 6), (1, 1), (0, 0))])
def test_pooling_and_its_gradient(dev, pool_type, kernel, stride, pad):
    """pool2d and pool2d_grad equal the references: max over windows (padding as -inf; ties
    route the gradient to the first largest element), avg counting padding as zeros; the
    last geometry is a global pool."""
    x = np.random.default_rng(14).integers(0, 4, (2, 3, 5, 6)).astype(np.float64)  # ties
    geo = {"pool_type": pool_type, "kernel": kernel, "stride": stride, "pad": pad}
    y = check(dev, "pool2d", (x,), geo)
    check(dev, "pool2d_grad", (x, uniform(y.shape, "float64", 15)), geo)


# -- softmax, cross-entropy, batch norm ------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", [((4, 40), 1), ((3, 4, 5), 1), ((3, 4, 5), 0), ((6, 5), 1)])
def test_softmax_family(dev, dtype, shape, axis):
    """softmax, log_softmax and their gradients (from the outputs) equal the references along
    any axis, rows longer than a block included."""
    a = uniform(shape, dtype, 16, -5, 5)
    g = uniform(shape, dtype, 17)
    for name in ("softmax", "log_softmax"):
        y = check(dev, name, (a,), {"axis": axis})
        check(dev, f"{name}_grad", (y, g), {"axis": axis})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("label_shape", ["(N,)", "(N, 1)"])
def test_softmax_cross_entropy(dev, dtype, label_shape):
    """softmax_ce and softmax_ce_grad equal the references, for labels as (N,) or (N, 1)."""
    logits = uniform((5, 7), dtype, 18, -4, 4)
    label = np.array([0, 6, 3, 3, 1], dtype)
    label = label if label_shape == "(N,)" else label[:, None]
    check(dev, "softmax_ce", (logits, label), {})
    check(dev, "softmax_ce_grad", (logits, label, uniform((5,), dtype, 19)), {})


def test_softmax_cross_entropy_with_a_bad_label_gives_nan(dev):
    """A label outside 0..K-1 makes that example's loss and gradient NaN; the other examples
    are untouched."""
    logits = uniform((3, 4), "float32", 20)
    label = np.array([1.0, 4.0, -1.0], np.float32)
    loss = run(dev, "softmax_ce", (logits, label), {})
    assert np.isnan(loss[1:]).all()
    np.testing.assert_allclose(loss[0], reference("softmax_ce", (logits[:1], label[:1]), {})[0],
                               rtol=1e-5)
    grad = run(dev, "softmax_ce_grad", (logits, label, np.ones(3, np.float32)), {})
    assert np.isnan(grad[1:]).all() and np.isfinite(grad[0]).all()


@pytest.mark.parametrize("dtype,shape,split",
                         [(d, s, False) for d in DTYPES for s in [(2, 3, 2, 3), (40, 2), (2, 5)]]
                         + [(DTYPES[0], (40, 2), True)])
def test_batch_norm_family(dev, monkeypatch, dtype, shape, split):
    """batch_norm, its gradients, batch_norm_infer and bn_update (mean and var, in place) equal
    the references, for images and for (N, C) features, with channels shorter and longer than
    a block, each channel a block or (split: the GPU's many values per channel, forced at this
    size) cut in three parts, the last one shorter."""
    if split:
        monkeypatch.setattr(gpu_launch, "TARGET_BLOCKS", 6)
        monkeypatch.setattr(gpu_launch, "PART_ELEMENTS", 13)
    x = uniform(shape, dtype, 21, -3, 5)
    channels = (shape[1],)
    gamma, beta = uniform(channels, dtype, 22), uniform(channels, dtype, 23)
    g = uniform(shape, dtype, 24)
    eps = {"eps": 1e-5}
    check(dev, "batch_norm", (x, gamma, beta), eps)
    check(dev, "batch_norm_grad", (x, gamma, g), eps)
    check(dev, "batch_norm_grad_gamma", (x, g), eps)
    mean, var = uniform(channels, dtype, 25), uniform(channels, dtype, 26, 0.5, 2)
    check(dev, "batch_norm_infer", (x, gamma, beta, mean, var), eps)
    for stat in ("mean", "var"):
        check(dev, "bn_update", (mean, x), {"momentum": 0.9, "stat": stat})


# -- graph -----------------------------------------------------------------------------------------
class FakeGraph:
    """A stand-in for a traced Graph: steps are (name, reads, out, attrs); `check` and
    `out_shape` are what `ops.infer` asks of attrs['graph']."""

    def __init__(self, inputs, steps, shapes, output, dtype="float32"):
        self.inputs, self.output = tuple(inputs), output
        self.ops = [types.SimpleNamespace(name=n, reads=tuple(r), out=o, attrs=a)
                    for n, r, o, a in steps]
        self.vars = {v: types.SimpleNamespace(shape=s, dtype=dtype) for v, s in shapes.items()}
        self.out_shape = shapes[output]

    def check(self, shapes):
        assert tuple(shapes) == tuple(self.vars[v].shape for v in self.inputs)


def mlp_graph():
    """2 * relu(x @ w^T + b) summed over the batch: a Dense layer's ops and a reduction."""
    steps = [("dot", (0, 1), 3, {"transpose_b": True}), ("add", (3, 2), 4, {}),
             ("relu", (4,), 5, {}), ("mul_scalar", (5,), 6, {"scalar": 2.0}),
             ("sum_axis", (6,), 7, {"axis": (0,), "keepdims": False})]
    shapes = {0: (4, 3), 1: (5, 3), 2: (5,), 3: (4, 5), 4: (4, 5), 5: (4, 5), 6: (4, 5), 7: (5,)}
    return FakeGraph((0, 1, 2), steps, shapes, 7)


def test_graph_runs_its_ops_in_order(dev):
    """The graph kernel gives what its member ops give, twice in a row (the second run reuses
    the temporaries' memory), without leaking pool memory."""
    graph = mlp_graph()
    x, w = uniform((4, 3), "float32", 27), uniform((5, 3), "float32", 28)
    b = uniform((5,), "float32", 29)
    want = 2.0 * np.maximum(x.astype(np.float64) @ w.T + b, 0).sum(axis=0)
    for _ in range(2):
        got = run(dev, "graph", (x, w, b), {"graph": graph})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert len(graph._gpu_plan.arenas) == 1


def test_graph_plan_reuses_freed_slots():
    """Temporaries share a slot once their last reader has run: a chain of four (4, 5)
    float32 temporaries needs two slots of 80 bytes; the plan is cached on the graph."""
    graph = mlp_graph()
    plan = gpu_graph.cached_plan(graph)
    assert gpu_graph.cached_plan(graph) is plan
    assert plan.slot_bytes == [80, 80]
    assert set(plan.temps) == {3, 4, 5, 6}
    assert {plan.temps[3][0], plan.temps[4][0]} == {0, 1}  # an op never writes its input's slot


def test_graph_whose_output_is_an_input(dev):
    """A graph that returns its input copies it into the op's output."""
    graph = FakeGraph((0,), [], {0: (3, 2)}, 0)
    x = uniform((3, 2), "float32", 30)
    np.testing.assert_array_equal(run(dev, "graph", (x,), {"graph": graph}), x)


def test_graph_refuses_in_place_ops():
    """An in-place op inside a graph fails when the plan is made, naming the op."""
    graph = FakeGraph((0, 1), [("assign", (0, 1), 0, {})], {0: (2,), 1: (2,)}, 0)
    with pytest.raises(ValueError, match="assign"):
        gpu_graph.make_plan(graph)
