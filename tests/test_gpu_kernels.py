"""The GPU kernels, pools, copies and events of realexec.gpu.kernels, checked against numpy.

Runs under numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1, which tests/conftest.py sets before
numba is imported) or on a real GPU; skipped when neither is usable. The simulator runs every
CUDA thread as a Python thread, so sizes are tiny: a few dozen elements, enough to cross the
simulator's blocks (32 threads, 2 blocks) and the tiles of both dot kernels (8x8 one output per
thread; 32x32 register-blocked, BK = 4).
"""

import math
import types

import numpy as np
import pytest
from gpu_guard import require_gpu
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays, mutually_broadcastable_shapes

gpu = require_gpu()

from asyncsim.nd import ops  # noqa: E402
from realexec.gpu import matmul as gpu_matmul  # noqa: E402

pytestmark = [pytest.mark.cudasim, pytest.mark.usefixtures("quick_simulator_barriers")]

FEW = settings(max_examples=10, deadline=None)
DTYPES = st.sampled_from(["float32", "float64"])
TOL = {"float32": {"rtol": 2e-6, "atol": 1e-6}, "float64": {"rtol": 1e-12, "atol": 1e-12}}


@pytest.fixture(scope="module")
def dev():
    """One pool, one pinned pool and one stream for the module."""
    class Dev:
        pool = gpu.DevicePool(0)
        pinned = gpu.PinnedPool()
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


def values(dtype, shape, low=-4.0, high=4.0):
    return arrays(dtype, shape, elements=st.floats(low, high, width=32))


def nonzero(dtype, shape):
    """Divisors kept away from zero, so the comparison is about division, not infinities."""
    magnitude = st.floats(0.25, 4.0, width=32)
    return arrays(dtype, shape, elements=st.one_of(magnitude, magnitude.map(lambda v: -v)))


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
SCALAR = {
    "add_scalar": lambda a, s: a + s,
    "sub_scalar": lambda a, s: a - s,
    "rsub_scalar": lambda a, s: s - a,
    "mul_scalar": lambda a, s: a * s,
    "div_scalar": lambda a, s: a / s,
    "rdiv_scalar": lambda a, s: s / a,
    "relu": lambda a, s: np.maximum(a, 0),
}


def test_availability_and_messages():
    """The backend reports itself usable; device errors name the device and the simulator."""
    assert gpu.available()
    assert gpu.device_error(0) == ""
    message = gpu.device_error(7)
    assert "gpu(7)" in message and "\n" not in message
    if gpu.on_simulator():
        assert "NUMBA_ENABLE_CUDASIM=1" in message
        with pytest.raises(RuntimeError, match="gpu\\(1\\)"):
            gpu.DevicePool(1)


def test_every_op_has_a_kernel():
    """Every op but the host copies ('array', 'copyto') has a GPU kernel, and nothing else."""
    assert set(gpu.GPU_KERNELS) == set(ops.OPS) - {"array", "copyto"}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 23)])
def test_fills(dev, dtype, shape):
    """ones, zeros and full write the value everywhere, in the asked dtype, any shape."""
    cases = [("ones", {}, 1.0), ("zeros", {}, 0.0), ("full", {"value": -2.5}, -2.5)]
    for name, attrs, want in cases:
        got = run(dev, name, (), {"shape": shape, "dtype": dtype, **attrs})
        assert got.dtype == dtype and got.shape == shape
        np.testing.assert_array_equal(got, np.full(shape, want, dtype))


@FEW
@given(st.sampled_from(sorted(BINARY)), DTYPES,
       mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4),
       st.data())
def test_binary_ops_broadcast_like_numpy(dev, name, dtype, shapes, data):
    """add/sub/mul/div equal numpy for any pair of broadcastable shapes."""
    a = data.draw(values(dtype, shapes.input_shapes[0]))
    b = data.draw(nonzero(dtype, shapes.input_shapes[1]))
    np.testing.assert_allclose(run(dev, name, (a, b), {}), BINARY[name](a, b), **TOL[dtype])


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("a_shape,b_shape", [((6, 5), (6, 5)), ((6, 5), (5,)),
                                             ((6, 1), (1, 5)), ((40,), (40,)),
                                             ((2, 1, 3, 1), (1, 2, 1, 3))])
def test_binary_ops_on_common_shapes(dev, name, a_shape, b_shape):
    """The broadcasts the workloads use (same shape, a row vector, an outer combination),
    and one that keeps all four of the kernel's dims after merging."""
    rng = np.random.default_rng(1)
    a = rng.uniform(-2, 2, a_shape).astype(np.float32)
    b = rng.uniform(0.5, 2, b_shape).astype(np.float32)
    np.testing.assert_allclose(run(dev, name, (a, b), {}), BINARY[name](a, b), **TOL["float32"])


def test_broadcast_beyond_four_merged_dims_is_refused(dev):
    """A broadcast pattern needing five dims after merging fails, naming both shapes."""
    a = np.ones((2, 1, 2, 1, 2), np.float32)
    b = np.ones((1, 2, 1, 2, 1), np.float32)
    with pytest.raises(NotImplementedError, match=r"\(2, 1, 2, 1, 2\)"):
        run(dev, "add", (a, b), {})


@FEW
@given(st.sampled_from(sorted(SCALAR)), DTYPES, st.floats(0.5, 3.0), st.data())
def test_scalar_ops_like_numpy(dev, name, dtype, scalar, data):
    """a op s (and s - a, s / a, relu) equal numpy, the scalar taken in the array's dtype."""
    shape = data.draw(st.sampled_from([(), (7,), (3, 30)]))
    a = data.draw(nonzero(dtype, shape) if name == "rdiv_scalar" else values(dtype, shape))
    s = np.dtype(dtype).type(scalar)
    want = SCALAR[name](a, s)
    got = run(dev, name, (a,), {"scalar": scalar})
    np.testing.assert_allclose(got, want, **TOL[dtype])


@settings(max_examples=6, deadline=None)
@given(st.sampled_from(["sum", "mean", "norm"]), DTYPES,
       st.sampled_from([(1,), (5, 3), (130,)]), st.data())
def test_reductions_like_numpy(dev, name, dtype, shape, data):
    """sum, mean and norm give a 0-d result equal to numpy's (float64 accumulation)."""
    a = data.draw(values(dtype, shape))
    want = {"sum": np.sum, "mean": np.mean, "norm": np.linalg.norm}[name](a.astype(np.float64))
    got = run(dev, name, (a,), {})
    assert got.shape == () and got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == "float32" else 1e-12, atol=1e-6)


def test_reductions_of_empty_arrays(dev):
    """Over no elements, sum and norm are 0 and mean is NaN, as numpy gives."""
    empty = np.zeros((0, 3), np.float32)
    assert run(dev, "sum", (empty,), {}) == 0
    assert run(dev, "norm", (empty,), {}) == 0
    assert math.isnan(run(dev, "mean", (empty,), {}))


def dot_tolerance(dtype, k):
    """Float32 (or float64) rounding over k products of values up to 4 in magnitude."""
    eps = 1e-6 if dtype == "float32" else 1e-14
    return {"rtol": 10 * eps, "atol": 16 * eps * max(k, 1)}


# Sides around the simulator's tiles (dot's BM = BN = 32, TILE = 8): ones, edges, and past them.
SIDES = st.one_of(st.sampled_from([1, 2, 8, 31, 32, 33, 64, 65, 70]), st.integers(1, 70))


@settings(max_examples=12, deadline=None)
@given(DTYPES, SIDES, st.integers(1, 24), SIDES,
       st.sampled_from(["2x2", "1x2", "2x1", "1x1"]), st.data())
def test_dot_like_numpy(dev, dtype, n, k, m, kind, data):
    """The product equals numpy's for 2-d and 1-d operands, for any sides, across the tile
    edges of both kernels (small products take the one-output-per-thread kernel, larger ones
    the register-blocked one) and any depth (k steps of BK with a partial last one)."""
    a = data.draw(values(dtype, (k,) if kind[0] == "1" else (n, k)))
    b = data.draw(values(dtype, (k,) if kind[2] == "1" else (k, m)))
    want = np.dot(a.astype(np.float64), b.astype(np.float64))
    got = run(dev, "dot", (a, b), {})
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, **dot_tolerance(dtype, k))


DOT_SHAPES = [(1, 17, 70), (70, 17, 1), (1, 5, 1), (33, 9, 31), (64, 8, 64), (65, 13, 33),
              (3, 40, 66), (66, 3, 40)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n,k,m", DOT_SHAPES)
def test_dot_on_edge_shapes(dev, dtype, n, k, m):
    """Row times matrix, matrix times column, 1x1 outputs, exact tile multiples and sides one
    past a tile each give numpy's product."""
    rng = np.random.default_rng(n * 10000 + k * 100 + m)
    a = rng.uniform(-4, 4, (n, k)).astype(dtype)
    b = rng.uniform(-4, 4, (k, m)).astype(dtype)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(run(dev, "dot", (a, b), {}), want, **dot_tolerance(dtype, k))


@pytest.mark.simulator
def test_dot_shapes_reach_both_kernels():
    """Under the simulator the edge shapes above run through both matrix-product kernels, so
    the tests check each of them."""
    chosen = {gpu_matmul.matmul_launch(n, m)[0] for n, _, m in DOT_SHAPES}
    assert chosen == {gpu_matmul._matmul_kernel, gpu_matmul._small_matmul_kernel}


def test_dot_kernel_choice_flips_at_min_tiles():
    """Below MIN_TILES output tiles dot takes the small kernel, from it on the tiled one, with
    one block of MM_THREADS threads per tile on a 1-d grid."""
    below = gpu_matmul.BM * (gpu_matmul.MIN_TILES - 1)
    assert gpu_matmul.matmul_launch(below, 1)[0] is gpu_matmul._small_matmul_kernel
    assert gpu_matmul.matmul_launch(below + 1, 1)[0] is gpu_matmul._matmul_kernel
    mm = gpu_matmul
    kernel, grid, block = mm.matmul_launch(mm.BM * 3, mm.BN * mm.MIN_TILES)
    assert kernel is gpu_matmul._matmul_kernel and grid == 3 * gpu_matmul.MIN_TILES
    assert block == mm.MM_THREADS


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tiled_dot_on_a_real_gpu(dev, dtype):
    """On a real GPU, a product of 81 tiles (past MIN_TILES, so the register-blocked kernel)
    with sides one past a tile and a partial last k-step equals numpy's."""
    n, k, m = 8 * gpu_matmul.BM + 1, 70, 8 * gpu_matmul.BN + 1
    assert gpu_matmul.matmul_launch(n, m)[0] is gpu_matmul._matmul_kernel
    rng = np.random.default_rng(3)
    a = rng.uniform(-4, 4, (n, k)).astype(dtype)
    b = rng.uniform(-4, 4, (k, m)).astype(dtype)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(run(dev, "dot", (a, b), {}), want, **dot_tolerance(dtype, k))


def _tiled_kernel_with(bm, bn, bk, tm, tn):
    """_matmul_kernel compiled with other tile constants (derived ones as the module
    derives them)."""
    vec = gpu_matmul.VEC
    threads = (bm // tm) * (bn // tn)
    constants = {
        "BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tn, "A_ROW": bm + 4,
        "ROW_STEP": bm * vec // tm, "COL_STEP": bn * vec // tn, "MM_THREADS": threads,
        "A_TILE": bk * (bm + 4), "B_TILE": bk * bn, "A_TILES": 2 * bk * (bm + 4),
        "B_TILES": 2 * bk * bn, "A_LOADS": bm * bk // threads, "B_LOADS": bk * bn // threads,
    }
    source = gpu_matmul._matmul_kernel.py_func
    scope = {**vars(gpu_matmul), **constants}
    function = types.FunctionType(source.__code__, scope, source.__name__)
    return gpu.cuda.jit(function), threads


@pytest.mark.simulator
@pytest.mark.parametrize("dtype,n,k,m", [("float32", 130, 11, 5), ("float64", 3, 9, 130)])
def test_tiled_kernel_with_the_real_gpus_tiles(dtype, n, k, m):
    """Under the simulator, the register-blocked kernel with the real GPU's constants (128x128
    tiles, BK = 8, 256 threads, 8x8 per thread) equals numpy's product across a tile's row
    edge and, in the other case, its column edge (two tiles each: the simulator runs a tile's
    256 threads as Python threads, some 5 s a tile here)."""
    kernel, threads = _tiled_kernel_with(128, 128, 8, 8, 8)
    rng = np.random.default_rng(7)
    a = rng.uniform(-4, 4, (n, k)).astype(dtype)
    b = rng.uniform(-4, 4, (k, m)).astype(dtype)
    out = gpu.cuda.device_array((n, m), dtype)
    tiles = -(-n // 128) * -(-m // 128)
    kernel[tiles, threads](gpu.cuda.to_device(a), gpu.cuda.to_device(b), out,
                           np.dtype(dtype).type(0))
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out.copy_to_host(), want, **dot_tolerance(dtype, k))


def test_dot_with_empty_inner_dimension(dev):
    """A (3, 0) x (0, 2) product is all zeros, as in numpy."""
    got = run(dev, "dot", (np.zeros((3, 0), np.float32), np.zeros((0, 2), np.float32)), {})
    np.testing.assert_array_equal(got, np.zeros((3, 2), np.float32))


def _row_range(data, n):
    start = data.draw(st.integers(0, n))
    return start, data.draw(st.integers(start, n))


@FEW
@given(DTYPES, st.sampled_from([(6,), (5, 3), (4, 2, 3)]), st.data())
def test_slice_and_copy(dev, dtype, shape, data):
    """slice copies rows start:stop (squeeze drops the axis for one row); copy is a copy."""
    a = data.draw(values(dtype, shape))
    start, stop = _row_range(data, shape[0])
    got = run(dev, "slice", (a,), {"start": start, "stop": stop, "squeeze": False})
    np.testing.assert_array_equal(got, a[start:stop])
    if start < shape[0]:
        got = run(dev, "slice", (a,), {"start": start, "stop": start + 1, "squeeze": True})
        np.testing.assert_array_equal(got, a[start])
    np.testing.assert_array_equal(run(dev, "copy", (a,), {}), a)


@FEW
@given(DTYPES, st.sampled_from([(6,), (5, 3), (4, 2, 3)]),
       st.sampled_from(["rows", "one row", "one value"]), st.data())
def test_setitem_in_place(dev, dtype, shape, kind, data):
    """setitem writes src (whole rows, or broadcast from one row or one value) into rows
    start:stop and leaves the other rows; setitem_scalar writes one value."""
    dst = data.draw(values(dtype, shape))
    start, stop = _row_range(data, shape[0])
    src_shape = {"rows": (stop - start,) + shape[1:], "one row": shape[1:], "one value": (1,)}
    src = data.draw(values(dtype, src_shape[kind]))
    want = dst.copy()
    want[start:stop] = src
    attrs = {"start": start, "stop": stop, "squeeze": False}
    np.testing.assert_array_equal(run(dev, "setitem", (dst, src), attrs), want)
    want[start:stop] = 9.5
    got = run(dev, "setitem_scalar", (want.copy(),), {**attrs, "scalar": 9.5})
    np.testing.assert_array_equal(got, want)


def test_setitem_one_squeezed_row(dev):
    """x[i] = v (squeeze) writes row i only."""
    dst = np.arange(12, dtype=np.float64).reshape(4, 3)
    src = np.array([7.0, 8.0, 9.0])
    want = dst.copy()
    want[2] = src
    got = run(dev, "setitem", (dst, src), {"start": 2, "stop": 3, "squeeze": True})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_uniform_is_in_range_and_seeded(dev, dtype):
    """uniform lies in [low, high], repeats for a seed, changes with the seed, and covers
    the range (mean near the middle)."""
    attrs = {"shape": (10, 20), "dtype": dtype, "low": -1.0, "high": 3.0, "seed": 11}
    first = run(dev, "uniform", (), attrs)
    assert first.dtype == dtype and first.min() >= -1.0 and first.max() <= 3.0
    assert abs(first.mean() - 1.0) < 0.3
    np.testing.assert_array_equal(run(dev, "uniform", (), attrs), first)
    other = run(dev, "uniform", (), {**attrs, "seed": 12})
    assert np.mean(other == first) < 0.01


def test_normal_has_its_mean_and_deviation(dev):
    """normal(loc=2, scale=0.5) over 300 draws has mean ~2 and deviation ~0.5, all finite."""
    got = run(dev, "normal", (), {"shape": (300,), "loc": 2.0, "scale": 0.5, "seed": 3})
    assert np.isfinite(got).all()
    assert abs(got.mean() - 2.0) < 0.1 and abs(got.std() - 0.5) < 0.1


def test_device_pool_reuses_by_size_class_and_counts_bytes():
    """A released buffer serves the next request of its size class; a live one is never
    handed out twice; live and peak bytes count the requested sizes."""
    pool = gpu.DevicePool(0)
    a = pool.alloc((10,), np.float32)  # 40 bytes, class 512
    assert (pool.live_bytes, pool.peak_bytes) == (40, 40)
    b = pool.alloc((100,), np.float32)  # 400 bytes, class 512 as well
    assert gpu.device_pointer(a) != gpu.device_pointer(b)
    assert (pool.live_bytes, pool.peak_bytes) == (440, 440)
    pointer = gpu.device_pointer(a)
    pool.release(a)
    assert (pool.live_bytes, pool.peak_bytes) == (400, 440)
    c = pool.alloc((2, 3), np.float64)  # 48 bytes: same class, same buffer
    assert gpu.device_pointer(c) == pointer
    assert c.shape == (2, 3) and c.dtype == np.float64
    d = pool.alloc((5000,), np.float32)  # another class: a new buffer
    assert gpu.device_pointer(d) not in (pointer, gpu.device_pointer(b))
    assert pool.reserved_bytes == 512 + 512 + gpu.size_class(20000)
    for x in (b, c, d):
        pool.release(x)
    assert pool.live_bytes == 0 and pool.peak_bytes == 400 + 48 + 20000
    with pytest.raises(ValueError, match="not allocated by this pool"):
        pool.release(d)
    pool.empty_cache()
    assert pool.reserved_bytes == 0 and pool.cached_bytes == 0


def test_pinned_pool_reuses_host_buffers():
    """Pinned host arrays have the asked shape/dtype and come back from the pool."""
    pool = gpu.PinnedPool()
    a = pool.alloc((4, 5), np.float64)
    assert isinstance(a, np.ndarray) and a.shape == (4, 5) and a.dtype == np.float64
    pointer = gpu.device_pointer(a)
    pool.release(a)
    b = pool.alloc((20,), np.float32)
    assert gpu.device_pointer(b) == pointer and pool.live_bytes == 80


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 1 << 40), st.integers(0, 1 << 40))
def test_size_classes(n, m):
    """A class holds the request, wastes under a quarter above 512 bytes, is its own class,
    and grows with the request."""
    c = gpu.size_class(n)
    assert c >= n and c >= 512 and (n <= 512 or c < 1.25 * n)
    assert gpu.size_class(c) == c
    if m >= n:
        assert gpu.size_class(m) >= c


def test_kernel_then_event_then_copy_on_another_stream(dev):
    """A kernel on stream A, an event, and a copy on stream B that waits on it see the
    kernel's result (no host wait between them)."""
    a_stream, b_stream = gpu.cuda.stream(), gpu.cuda.stream()
    x = dev.pool.alloc((50,), np.float32)
    y = dev.pool.alloc((50,), np.float32)
    gpu.GPU_KERNELS["full"]((), x, {"shape": (50,), "value": 3.0}, a_stream)
    gpu.GPU_KERNELS["add_scalar"]((x,), y, {"scalar": 1.0}, a_stream)
    done = gpu.record_event(a_stream)
    gpu.wait_event(done, b_stream)
    host = dev.pinned.alloc((50,), np.float32)
    gpu.to_host(y, host, b_stream)
    b_stream.synchronize()
    np.testing.assert_array_equal(host, np.full(50, 4.0, np.float32))
    for arr in (x, y):
        dev.pool.release(arr)
    dev.pinned.release(host)


def test_copies_check_shapes(dev):
    """Host<->device copies refuse mismatched shapes or dtypes, naming both."""
    d = dev.pool.alloc((3,), np.float32)
    with pytest.raises(ValueError, match=r"\(4,\)"):
        gpu.to_device(np.zeros(4, np.float32), d, dev.stream)
    with pytest.raises(ValueError, match="float64"):
        gpu.to_host(d, np.zeros(3, np.float64), dev.stream)
    dev.pool.release(d)
