"""realexec's CPU kernels compute what numpy computes, for every op of asyncsim.nd.ops.OPS.

Each test allocates `out` from `asyncsim.nd.ops.infer`, as the engine does, runs `KERNELS[name]` and
compares with numpy. Sizes stay small; the kernels compile once per dtype (numba caches them on
disk), so the first run of this file pays a few seconds of compilation.
"""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from asyncsim.nd.ops import INPLACE, OPS, infer
from realexec.cpu.kernels import KERNELS, set_blas_threads
from realexec.cpu.loops import ADD, COPY, DIV, EQUAL, MUL, SUB, binary_flat, scalar_flat

BINARY_CODES = (ADD, SUB, MUL, DIV, COPY, EQUAL)

DTYPES = st.sampled_from(["float32", "float64"])
RTOL = {"float32": 1e-6, "float64": 1e-13}
REDUCE_RTOL = {"float32": 1e-6, "float64": 1e-12}  # results are rounded to out's dtype
# no deadline: a cold run compiles inside the first example
kernel_settings = settings(max_examples=40, deadline=None)


def run(name, inputs, attrs=None, dtype=None):
    """Run op `name` the way the engine does: out allocated from infer (or the input, in place)."""
    attrs = attrs or {}
    dtypes = tuple(str(a.dtype) for a in inputs) if name != "array" else ()
    shapes = tuple(a.shape for a in inputs) if name != "array" else ()
    if dtype is not None:
        attrs = {**attrs, "dtype": dtype}
    shape, out_dtype = infer(name, shapes, dtypes, attrs)
    out = inputs[0] if name in INPLACE else np.empty(shape, out_dtype)
    KERNELS[name](tuple(inputs), out, attrs)
    return out


def values(dtype, shape, low=-1e3, high=1e3):
    return hnp.arrays(dtype, shape, elements=st.floats(low, high, width=32))


@st.composite
def broadcast_pairs(draw):
    """Two arrays of one dtype whose shapes broadcast (including equal shapes)."""
    dtype = draw(DTYPES)
    (a_shape, b_shape), _ = draw(hnp.mutually_broadcastable_shapes(
        num_shapes=2, min_dims=0, max_dims=3, max_side=4))
    return draw(values(dtype, a_shape)), draw(values(dtype, b_shape))


@st.composite
def one_array(draw, min_dims=0, low=-1e3, high=1e3):
    dtype = draw(DTYPES)
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=3, min_side=0, max_side=5))
    return draw(values(dtype, shape, low, high))


def test_every_op_has_a_kernel():
    """The kernel table covers exactly the op vocabulary."""
    assert set(KERNELS) == set(OPS)


def test_set_blas_threads_limits_blas():
    """set_blas_threads(1) leaves every BLAS that numpy loaded with one thread."""
    from threadpoolctl import threadpool_info, threadpool_limits

    before = {i["prefix"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
    set_blas_threads(1)
    try:
        blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
        assert blas and all(i["num_threads"] == 1 for i in blas)
    finally:
        threadpool_limits(limits=before)


@kernel_settings
@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5), dtype=DTYPES,
       value=st.floats(-1e3, 1e3, width=32))
def test_fills(shape, dtype, value):
    """ones, zeros and full give numpy's ones, zeros and full of the given shape and dtype."""
    attrs = {"shape": shape}
    for name, expected in [("ones", np.ones(shape, dtype)), ("zeros", np.zeros(shape, dtype)),
                           ("full", np.full(shape, value, dtype))]:
        out = run(name, (), {**attrs, "value": value}, dtype=dtype)
        assert out.dtype == dtype
        np.testing.assert_array_equal(out, expected)


@kernel_settings
@given(pair=broadcast_pairs(), name=st.sampled_from(["add", "sub", "mul", "div"]))
def test_binary_ops_broadcast_like_numpy(pair, name):
    """add, sub, mul, div equal numpy's, same shapes and broadcast shapes alike."""
    a, b = pair
    with np.errstate(all="ignore"):
        expected = getattr(np, {"sub": "subtract", "mul": "multiply", "div": "divide"}
                           .get(name, name))(a, b)
        out = run(name, (a, b))
    assert out.shape == expected.shape and out.dtype == expected.dtype
    np.testing.assert_allclose(out, expected, rtol=RTOL[str(a.dtype)])


@pytest.mark.parametrize("a_shape, b_shape", [((5, 3), (3,)), ((5, 1), (1, 3)), ((1, 3), (4, 1)),
                                              ((2, 1, 3), (4, 1)), ((1, 1), (1,)), ((), (2, 3))])
def test_binary_ops_named_broadcasts(a_shape, b_shape):
    """The broadcasts a network uses (bias add, outer products) equal numpy for all four ops."""
    rng = np.random.default_rng(1)
    a = rng.uniform(1, 2, a_shape).astype("float32")
    b = rng.uniform(1, 2, b_shape).astype("float32")
    for name, fn in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                     ("div", np.divide)]:
        np.testing.assert_allclose(run(name, (a, b)), fn(a, b), rtol=RTOL["float32"])
        np.testing.assert_allclose(run(name, (b, a)), fn(b, a), rtol=RTOL["float32"])


def test_binary_op_in_place_and_non_contiguous():
    """`a += b` (out is the first input) and a transposed (non-contiguous) input are right."""
    a = np.arange(12, dtype="float32").reshape(3, 4)
    b = np.arange(4, dtype="float32")
    expected = a + b
    KERNELS["add"]((a, b), a, {})
    np.testing.assert_array_equal(a, expected)
    c = np.arange(12, dtype="float64").reshape(4, 3).T
    np.testing.assert_array_equal(run("mul", (c, c)), c * c)


@st.composite
def flat_pair(draw):
    """Two 1-d arrays of one dtype and length, long enough for the vector loops' remainders."""
    dtype = draw(DTYPES)
    n = draw(st.integers(0, 70))
    return draw(values(dtype, n, 1.0, 1e3)), draw(values(dtype, n, 1.0, 1e3))


@kernel_settings
@given(pair=flat_pair(), code=st.sampled_from(range(10)), scalar=st.floats(1.0, 100.0))
def test_flat_loops_in_place_equal_out_of_place(pair, code, scalar):
    """Every op code of the flat loops gives the same bits whether out is a fresh array or an
    input (in place, its own vectorised path: see `realexec.cpu.loops`)."""
    a, b = pair
    expected = np.empty_like(a)
    scalar_flat(code, a, scalar, expected)
    inplace = a.copy()
    scalar_flat(code, inplace, scalar, inplace)
    np.testing.assert_array_equal(inplace, expected)
    if code in BINARY_CODES:
        binary_flat(code, a, b, expected)
        for alias in ("a", "b", "both"):
            x, y = a.copy(), (a.copy() if alias == "both" else b.copy())
            out = y if alias == "b" else x
            binary_flat(code, x, y, out)
            want = expected if alias != "both" else np.empty_like(a)
            if alias == "both":
                binary_flat(code, a, a.copy(), want)
            np.testing.assert_array_equal(out, want, err_msg=f"out is {alias}")


SCALAR_OPS = {
    "add_scalar": lambda a, s: a + s, "sub_scalar": lambda a, s: a - s,
    "rsub_scalar": lambda a, s: s - a, "mul_scalar": lambda a, s: a * s,
    "div_scalar": lambda a, s: a / s, "rdiv_scalar": lambda a, s: s / a,
}


@kernel_settings
@given(a=one_array(), scalar=st.floats(-100, 100), name=st.sampled_from(sorted(SCALAR_OPS)))
def test_scalar_ops_like_numpy(a, scalar, name):
    """Array-scalar ops equal numpy with a Python float (computed in the array's dtype)."""
    with np.errstate(all="ignore"):
        expected = SCALAR_OPS[name](a, scalar)
        out = run(name, (a,), {"scalar": scalar})
    assert out.dtype == a.dtype
    np.testing.assert_allclose(out, expected, rtol=RTOL[str(a.dtype)])


@kernel_settings
@given(a=one_array())
def test_relu_is_maximum_with_zero(a):
    """relu equals np.maximum(a, 0)."""
    np.testing.assert_array_equal(run("relu", (a,)), np.maximum(a, 0))


def test_relu_propagates_nan():
    """relu keeps NaN, as np.maximum does, and zeroes -inf."""
    a = np.array([np.nan, -np.inf, -1.0, 2.0], "float32")
    np.testing.assert_array_equal(run("relu", (a,)), [np.nan, 0.0, 0.0, 2.0])


def reduce_tolerance(a):
    # a float64 reference; the kernel's float64 sum, rounded to a's dtype, is this close
    return REDUCE_RTOL[str(a.dtype)] * (np.abs(a.astype("float64")).sum() + 1e-30)


@kernel_settings
@given(a=one_array())
def test_reductions_like_numpy(a):
    """sum, mean and norm equal numpy's (in float64) and are 0-d arrays of a's dtype."""
    exact = a.astype("float64")
    for name, expected in [("sum", exact.sum()), ("norm", np.linalg.norm(exact))]:
        out = run(name, (a,))
        assert out.shape == () and out.dtype == a.dtype
        tol = reduce_tolerance(a) if name == "sum" else REDUCE_RTOL[str(a.dtype)] * expected
        np.testing.assert_allclose(out, expected, rtol=0, atol=tol)
    if a.size:
        np.testing.assert_allclose(run("mean", (a,)), exact.mean(), rtol=0,
                                   atol=reduce_tolerance(a) / a.size)
    else:
        assert np.isnan(run("mean", (a,)))


def test_reductions_over_many_blocks():
    """A float32 array longer than one accumulation block (with a ragged tail) sums as in float64,
    far closer than a float32 accumulator would."""
    a = np.random.default_rng(2).uniform(0, 1, 100_003).astype("float32")
    exact = a.astype("float64")
    np.testing.assert_allclose(run("sum", (a,)), exact.sum(), rtol=1e-7)
    np.testing.assert_allclose(run("mean", (a,)), exact.mean(), rtol=1e-7)
    np.testing.assert_allclose(run("norm", (a,)), np.sqrt((exact * exact).sum()), rtol=1e-7)


@kernel_settings
@given(data=st.data(), dtype=DTYPES, a_dims=st.sampled_from([1, 2]), b_dims=st.sampled_from([1, 2]))
def test_dot_like_numpy(data, dtype, a_dims, b_dims):
    """dot equals np.dot for every mix of 1-d and 2-d operands, the 0-d result included."""
    n, k, m = (data.draw(st.integers(0, 5)) for _ in range(3))
    a = data.draw(values(dtype, (n, k)[2 - a_dims:], -10, 10))
    b = data.draw(values(dtype, (k, m)[:b_dims], -10, 10))
    out = run("dot", (a, b))
    expected = np.dot(a.astype("float64"), b.astype("float64"))
    assert out.shape == np.shape(expected) and out.dtype == dtype
    np.testing.assert_allclose(out, expected, rtol=1e-5 if dtype == "float32" else 1e-12,
                               atol=1e-4 if dtype == "float32" else 1e-10)


@st.composite
def row_ranges(draw, a):
    start = draw(st.integers(0, a.shape[0]))
    stop = draw(st.integers(start, a.shape[0]))
    squeeze = start < a.shape[0] and draw(st.booleans())
    return {"start": start, "stop": start + 1 if squeeze else stop, "squeeze": squeeze}


@kernel_settings
@given(data=st.data(), a=one_array(min_dims=1))
def test_slice_like_numpy(data, a):
    """slice copies rows start:stop (row start alone when squeezed), as numpy indexing does."""
    attrs = data.draw(row_ranges(a))
    expected = a[attrs["start"]] if attrs["squeeze"] else a[attrs["start"]:attrs["stop"]]
    out = run("slice", (a,), attrs)
    np.testing.assert_array_equal(out, expected)
    assert not np.shares_memory(out, a)


@kernel_settings
@given(data=st.data(), dst=one_array(min_dims=1))
def test_setitem_writes_in_place(data, dst):
    """setitem writes src (broadcast as numpy does) into the given dst array itself."""
    attrs = data.draw(row_ranges(dst))
    rows = attrs["start"] if attrs["squeeze"] else slice(attrs["start"], attrs["stop"])
    target_shape = np.empty(dst.shape)[rows].shape
    # a src that broadcasts to the target: drop leading axes, then shrink some axes to 1
    kept = target_shape[data.draw(st.integers(0, len(target_shape))):]
    src_shape = tuple(1 if data.draw(st.booleans()) else n for n in kept)
    src = data.draw(values(str(dst.dtype), src_shape))
    expected = dst.copy()
    expected[rows] = src
    out = run("setitem", (dst, src), attrs)
    assert out is dst
    np.testing.assert_array_equal(dst, expected)


@kernel_settings
@given(data=st.data(), dst=one_array(min_dims=1), scalar=st.floats(-1e3, 1e3, width=32))
def test_setitem_scalar_writes_in_place(data, dst, scalar):
    """setitem_scalar sets rows start:stop of the given array itself to the scalar."""
    attrs = {**data.draw(row_ranges(dst)), "scalar": scalar}
    expected = dst.copy()
    expected[attrs["start"] if attrs["squeeze"] else slice(attrs["start"], attrs["stop"])] = scalar
    assert run("setitem_scalar", (dst,), attrs) is dst
    np.testing.assert_array_equal(dst, expected)


@kernel_settings
@given(a=one_array())
def test_copies_equal_their_source(a):
    """copy and copyto give an equal array that does not share memory with the source."""
    for name in ("copy", "copyto"):
        out = run(name, (a,))
        np.testing.assert_array_equal(out, a)
        assert not np.shares_memory(out, a)


def test_array_converts_any_host_array():
    """array copies a host array of another dtype and layout, converting as numpy does."""
    host = np.arange(6, dtype="int64").reshape(2, 3).T
    out = run("array", (host,), {"shape": (3, 2)}, dtype="float32")
    assert out.dtype == "float32"
    np.testing.assert_array_equal(out, host)


RANDOM = {"uniform": {"low": -2.0, "high": 3.0}, "normal": {"loc": 1.0, "scale": 2.0}}


@pytest.mark.parametrize("name", sorted(RANDOM))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_random_is_deterministic_by_seed(name, dtype):
    """The same seed gives the same numbers, also on another thread; another seed does not."""
    attrs = {"shape": (1000,), **RANDOM[name]}
    first = run(name, (), {**attrs, "seed": 7}, dtype)
    np.testing.assert_array_equal(run(name, (), {**attrs, "seed": 7}, dtype), first)
    other_thread = []
    thread = threading.Thread(
        target=lambda: other_thread.append(run(name, (), {**attrs, "seed": 7}, dtype)))
    thread.start()
    thread.join()
    np.testing.assert_array_equal(other_thread[0], first)
    assert not np.array_equal(run(name, (), {**attrs, "seed": 8}, dtype), first)


def test_random_distributions():
    """uniform lies in [low, high] with mean (low+high)/2 and deviation (high-low)/sqrt(12);
    normal has mean loc and deviation scale (100k samples: 5-sigma-wide bounds)."""
    u = run("uniform", (), {"shape": (100_000,), "seed": 3, **RANDOM["uniform"]}, "float32")
    assert u.min() >= -2.0 and u.max() <= 3.0
    assert abs(u.mean() - 0.5) < 0.03
    assert abs(u.std() - 5 / np.sqrt(12)) < 0.02
    g = run("normal", (), {"shape": (100_000,), "seed": 3, **RANDOM["normal"]}, "float64")
    assert abs(g.mean() - 1.0) < 0.04
    assert abs(g.std() - 2.0) < 0.03


def test_two_threads_run_long_kernels_concurrently():
    """Two threads each running a chain of large kernels at once both finish with the values that
    the same chain gives when run alone."""
    size = 2_000_000

    def chain(seed):
        x = run("normal", (), {"shape": (size,), "seed": seed, "loc": 0.0, "scale": 1.0})
        y = run("add", (x, run("mul_scalar", (x,), {"scalar": 3.0})))
        return y, run("sum", (y,))

    alone = [chain(seed) for seed in (11, 12)]
    results = [None, None]
    start = threading.Barrier(2)

    def worker(i):
        start.wait()
        results[i] = chain(11 + i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for (y, total), (y_alone, total_alone) in zip(results, alone, strict=True):
        np.testing.assert_array_equal(y, y_alone)
        assert total == total_alone
