"""A property-based fuzz of the `nd` surface: random calls with random shapes, dtypes, devices
and values, valid and invalid, on the real engine (CPU) and on the recorder.

The property: every call either does what numpy does with the same arguments (same shape and
dtype; on the engine, the same values) or raises one of the toolkit's own errors at the call
(ShapeError, ValueError, TypeError, IndexError, or MemoryError for an array larger than this
machine) whose message names the op or the argument at fault; nothing fails later, at a blocker;
and after any sequence of such calls the session still computes correctly and `waitall` is
clean.

Examples: `FUZZ_EXAMPLES` per test (300 by default; set ASYNCSIM_FUZZ_EXAMPLES=5000 for a deep
run). Below the two fuzzes, one property per behaviour the fuzz once caught (they keep it
fixed).
"""

from __future__ import annotations

import math
import operator
import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import realexec
from asyncsim.nd.ops import ShapeError
from asyncsim.nd.record import record
from realexec import OpError

FUZZ_EXAMPLES = int(os.environ.get("ASYNCSIM_FUZZ_EXAMPLES", "200"))  # more: set it
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TOOLKIT_ERRORS = (ShapeError, ValueError, TypeError, IndexError, MemoryError)

# -- arguments --------------------------------------------------------------------------------
dims = st.integers(0, 4)
np_dims = dims.map(np.int64)  # a numpy shape's own dims
good_shapes = st.one_of(st.lists(dims, min_size=0, max_size=3).map(tuple), dims,
                        st.lists(np_dims, min_size=1, max_size=2).map(tuple))
bad_shapes = st.sampled_from([(-1,), (2, -3), (2.0,), ("a",), (None,), ((2,),), "ab",
                              (10**6, 10**6), (10**10, 10**10), (2**62,) * 2])
# neither an int nor a sequence of ints
odd_shapes = st.sampled_from([2.5, None, True, (True, 2), object()])
shapes = st.one_of(good_shapes, good_shapes, bad_shapes)
# the recorder has no data: a huge shape is a valid prediction, so its fuzz leaves them out
recordable_shapes = st.one_of(good_shapes, good_shapes, bad_shapes.filter(
    lambda s: not (isinstance(s, tuple) and any(isinstance(d, int) and d > 10**5 for d in s))))
dtypes = st.sampled_from(["float32", "float32", "float64", np.float32, None, "int32",
                          "float16", "bogus", 3])
values = st.floats(-1e3, 1e3, allow_nan=False, width=32)
scalars = st.one_of(values, st.integers(-5, 5), values.map(np.float32))
numpy_arrays = st.lists(values, min_size=1, max_size=3).map(lambda v: np.asarray(v, np.float32))
foreign = st.one_of(st.sampled_from([None, "x", [1.0, 2.0], {"a": 1}, object()]), numpy_arrays)
BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
          "div": operator.truediv}
IN_PLACE = {"add": operator.iadd, "sub": operator.isub, "mul": operator.imul,
            "div": operator.itruediv}
REDUCE = {"sum": np.sum, "mean": np.mean, "norm": lambda a: np.sqrt(np.sum(a.astype(np.float64)
                                                                            ** 2))}


def _as_np_shape(shape):
    return (shape,) if isinstance(shape, int) else shape


def _np_dtype(dtype):
    return np.dtype(dtype)


class Case:
    """One example: the nd under test, its arrays beside numpy's, and the checks."""

    def __init__(self, nd, data, exact: bool):
        self.nd, self.data, self.exact = nd, data, exact
        self.arrays: list[tuple] = []  # (NDArray, numpy array it should equal)

    # -- the one check -------------------------------------------------------------------------
    def call(self, names: list, ours, theirs):
        """Run `theirs()` (numpy) and `ours()`; ours must match or raise a toolkit error that
        names one of `names` (the op, or the argument at fault)."""
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                expected = theirs()
        except Exception:  # numpy refuses: ours must refuse too
            expected = _REFUSED
        try:
            got = ours()
        except TOOLKIT_ERRORS as exc:
            assert not isinstance(exc, OpError), f"{names}: failed in the engine: {exc!r}"
            message = str(exc)
            assert any(str(n) in message for n in names), f"{names}: {type(exc).__name__}: {exc}"
            return None
        assert expected is not _REFUSED, f"{names}: numpy refuses, ours returned {got!r:.80}"
        return self.compare(names, got, expected)

    def compare(self, names, got, expected):
        nd = self.nd
        if isinstance(got, nd.NDArray):
            expected = np.asarray(expected)
            assert got.shape == expected.shape, (names, got.shape, expected.shape)
            assert got.dtype == expected.dtype.name, (names, got.dtype, expected.dtype)
            if self.exact:
                self.check_values(names, got.asnumpy(), expected)
            self.arrays.append((got, expected))
            return got
        if self.exact and got is not None:
            self.check_values(names, np.asarray(got), np.asarray(expected))
        return got

    @staticmethod
    def check_values(names, got, expected):
        scale = float(np.max(np.abs(expected[np.isfinite(expected)]), initial=1.0))
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5 * scale, equal_nan=True,
                                   err_msg=str(names))

    # -- drawing -------------------------------------------------------------------------------
    def pick(self):
        if not self.arrays:
            self.create()
        if not self.arrays:
            self.arrays.append((self.nd.ones((2, 3)), np.ones((2, 3), np.float32)))
        return self.data.draw(st.sampled_from(self.arrays))

    def operand(self):
        kind = self.data.draw(st.sampled_from(["array", "array", "scalar", "foreign"]))
        if kind == "array":
            return self.pick()
        value = self.data.draw(scalars if kind == "scalar" else foreign)
        return value, value

    # -- steps ---------------------------------------------------------------------------------
    def create(self):
        nd, draw = self.nd, self.data.draw
        name = draw(st.sampled_from(["ones", "zeros", "full", "array", "uniform", "normal"]))
        shape, dtype = draw(shapes if self.exact else recordable_shapes), draw(dtypes)
        ctx = draw(st.sampled_from([None, None, "cpu0", "str"]))
        ctx = {"cpu0": nd.cpu(0), "str": "cpu"}.get(ctx, ctx)
        value = draw(values)
        names = [name, "shape", "dtype", "data type", "context", str(shape)[:20], str(dtype)]
        if name == "array":
            data = np.asarray(draw(st.lists(values, min_size=0, max_size=6)), np.float64)
            if isinstance(shape, tuple) and all(type(d) is int for d in shape) \
                    and math.prod(shape) == data.size:
                data = data.reshape(shape)
            self.call(names, lambda: nd.array(data, ctx=ctx, dtype=dtype),
                      lambda: _context(ctx, np.asarray(data, dtype=_np_dtype(dtype))))
            return
        if name in ("uniform", "normal"):
            self.random(name, shape, dtype, ctx, names)
            return
        fill = {"ones": 1.0, "zeros": 0.0, "full": value}[name]
        ours = {"ones": lambda: nd.ones(shape, ctx=ctx, dtype=dtype),
                "zeros": lambda: nd.zeros(shape, ctx=ctx, dtype=dtype),
                "full": lambda: nd.full(shape, value, ctx=ctx, dtype=dtype)}[name]
        self.call(names, ours, lambda: _context(ctx, np.full(_huge_guard(shape), fill,
                                                             dtype=_np_dtype(dtype))))

    def random(self, name, shape, dtype, ctx, names):
        nd = self.nd
        make = nd.random.uniform if name == "uniform" else nd.random.normal
        try:
            got = make(shape=shape, ctx=ctx, dtype=dtype)
        except TOOLKIT_ERRORS as exc:
            assert any(str(n) in str(exc) for n in names), f"{names}: {exc}"
            return
        np_shape = _as_np_shape(shape)
        assert got.shape == tuple(np_shape) and got.dtype == np.dtype(dtype).name
        values_ = got.asnumpy() if self.exact else np.zeros(got.shape, got.dtype)
        if self.exact and name == "uniform":
            assert np.all((values_ >= 0) & (values_ <= 1)), values_
        self.arrays.append((got, values_))

    def binary(self):
        name = self.data.draw(st.sampled_from(sorted(BINARY)))
        in_place = self.data.draw(st.booleans())
        swap = self.data.draw(st.booleans())
        (a, a_np) = self.pick()
        (b, b_np) = self.operand()
        fn = (IN_PLACE if in_place else BINARY)[name]
        names = [name, "operand", "NDArray"]
        if in_place:
            expected = a_np.copy()
            self.mutate(a, a_np, names, lambda: fn(a, b),
                        lambda: _same_dtype(fn(expected, b_np), a_np))
            return
        if swap:
            a, a_np, b, b_np = b, b_np, a, a_np
        self.call(names, lambda: fn(a, b), lambda: _binary_np(fn, a_np, b_np))

    def mutate(self, a, a_np, names, ours, theirs):
        """An in-place call on `a`: on success `a` holds numpy's answer; on a refusal at the
        call it must still hold what it held (checked at the end)."""
        self.arrays = [(x, e) for x, e in self.arrays if x is not a]
        if self.call(names, ours, theirs) is None:
            self.arrays.append((a, a_np))

    def unary(self):
        name = self.data.draw(st.sampled_from(["relu", "nd.relu", "neg", "copy", "sum", "mean",
                                               "norm"]))
        a, a_np = self.pick()
        nd = self.nd
        ours = {"relu": lambda: a.relu(), "nd.relu": lambda: nd.relu(a), "neg": lambda: -a,
                "copy": lambda: a.copy(), "sum": lambda: a.sum(), "mean": lambda: a.mean(),
                "norm": lambda: a.norm()}[name]
        theirs = {"relu": lambda: np.maximum(a_np, 0), "nd.relu": lambda: np.maximum(a_np, 0),
                  "neg": lambda: -a_np, "copy": lambda: a_np.copy(),
                  "sum": lambda: _keep(np.sum(a_np, dtype=np.float64), a_np),
                  "mean": lambda: _keep(np.mean(a_np, dtype=np.float64), a_np),
                  "norm": lambda: _keep(REDUCE["norm"](a_np), a_np)}[name]
        self.call([name.split(".")[-1]], ours, theirs)

    def dot(self):
        (a, a_np), (b, b_np) = self.pick(), self.operand()
        self.call(["dot", "NDArray"], lambda: self.nd.dot(a, b), lambda: _dot_np(a_np, b_np))

    def index(self):
        a, a_np = self.pick()
        key = self.data.draw(keys)
        self.call(["index", "slice", "rows", "0-d", str(key)[:10]], lambda: a[key],
                  lambda: _rows_np(a_np, key))

    def setitem(self):
        a, a_np = self.pick()
        key = self.data.draw(keys)
        value, value_np = self.operand()
        expected = a_np.copy()

        def theirs():
            _rows_np(expected, key)  # the same keys as getitem
            expected[key] = value_np
            return expected

        def ours():
            a[key] = value
            return a

        self.mutate(a, a_np, ["setitem", "index", "slice", "rows", "assign", "0-d"], ours,
                    theirs)

    def move(self):
        a, a_np = self.pick()
        ctx = self.nd.cpu(0)
        how = self.data.draw(st.sampled_from(["copyto", "as_in_context"]))
        self.call([how], lambda: getattr(a, how)(ctx), lambda: a_np.copy())

    def blocker(self):
        a, a_np = self.pick()
        kind = self.data.draw(st.sampled_from(["item", "float", "wait_to_read", "len", "repr",
                                               "waitall", "bool"]))
        if kind == "wait_to_read":
            a.wait_to_read()
        elif kind == "waitall":
            self.nd.waitall()
        elif kind == "repr":
            assert "NDArray" in repr(a)
        elif kind == "len":
            self.call(["len", "0-d"], lambda: len(a), lambda: len(a_np))
        elif kind == "bool":
            self.call(["truth", "bool"], lambda: bool(a), lambda: bool(a_np))
        else:
            ours = a.item if kind == "item" else lambda: float(a)
            self.call(["item", "one element", "size"], ours, lambda: a_np.item())

    STEPS = ("create", "create", "binary", "binary", "unary", "dot", "index", "setitem", "move",
             "blocker")

    def run(self, steps: int):
        for _ in range(steps):
            getattr(self, self.data.draw(st.sampled_from(self.STEPS)))()
        if self.exact:
            for got, expected in self.arrays:  # nothing failed later, in the engine
                self.check_values("final", got.asnumpy(), np.asarray(expected))


class _Refused:
    def __repr__(self) -> str:
        return "<numpy refused>"


_REFUSED = _Refused()
keys = st.one_of(st.integers(-5, 5), st.slices(5), st.sampled_from(
    [slice(None, None, 2), slice(4, 1), (0, 0), 1.0, None, "a", Ellipsis, np.int64(1)]))


def _context(ctx, result):
    """numpy has no contexts: only nd.cpu()/None are valid ones."""
    if ctx is not None and not hasattr(ctx, "device_type"):
        raise TypeError("not a context")
    return result


def _huge_guard(shape):
    """numpy would allocate a huge valid shape; ours refuses it with MemoryError at the call,
    which is the toolkit's error: treat it as numpy refusing too."""
    np_shape = _as_np_shape(shape)
    if isinstance(np_shape, tuple) and all(isinstance(d, int) for d in np_shape):
        if np.prod([max(d, 0) for d in np_shape], dtype=object) > 10**8:
            raise MemoryError("too big to compare")
    return np_shape


def _same_dtype(result, like):
    if isinstance(result, np.ndarray) and result.dtype != like.dtype:
        raise TypeError("in place into another dtype")
    if np.shape(result) != like.shape:
        raise ValueError("in place into another shape")
    return result


def _is_array(x) -> bool:
    return isinstance(x, np.ndarray)


def _binary_np(fn, a, b):
    if _is_array(a) and _is_array(b) and a.dtype != b.dtype:
        raise TypeError("mixed dtypes")
    if not (_is_array(a) or _is_array(b)):
        raise TypeError("no array")
    for x in (a, b):
        if not (_is_array(x) or isinstance(x, int | float | np.floating)) or isinstance(x, bool):
            raise TypeError("foreign operand")
    like = a if _is_array(a) else b
    other = b if like is a else a
    if not _is_array(other):
        other = like.dtype.type(other)
    return fn(a, other) if like is a else fn(other, b)


def _dot_np(a, b):
    if not (_is_array(a) and _is_array(b)) or a.dtype != b.dtype:
        raise TypeError("dot takes arrays of one dtype")
    if a.ndim not in (1, 2) or b.ndim not in (1, 2):
        raise ValueError("1-d or 2-d")
    return np.dot(a, b)


def _keep(value, like):
    return np.asarray(value, like.dtype)


def _rows_np(a, key):
    """numpy's a[key], restricted to what the first-axis indexing of nd supports."""
    if a.ndim == 0:
        raise IndexError("0-d")
    if isinstance(key, int | np.integer) and not isinstance(key, bool):
        return a[int(key)].copy()
    if isinstance(key, slice) and key.step in (None, 1):
        return a[key].copy()
    raise IndexError("unsupported key")


def _check_usable(nd):
    fresh = nd.ones((2, 2)) + 1
    np.testing.assert_array_equal(fresh.asnumpy(), np.full((2, 2), 2, np.float32))
    nd.waitall()


# -- the properties ----------------------------------------------------------------------------
@FUZZ
@given(data=st.data(), steps=st.integers(1, 12))
def test_engine_calls_match_numpy_or_fail_at_the_call(data, steps):
    """On the real engine (CPU, 2 workers): every call matches numpy or raises a toolkit error
    at the call naming the op or argument; values read back later agree; the session stays
    usable."""
    with realexec.session(workers=2) as nd:
        Case(nd, data, exact=True).run(steps)
        _check_usable(nd)


@FUZZ
@given(data=st.data(), steps=st.integers(1, 12))
def test_recorded_calls_match_numpy_shapes_or_fail_at_the_call(data, steps):
    """The recorder (no data) takes the same calls: the same shapes and dtypes as numpy, or the
    same call-time errors; recording goes on afterwards."""

    def workload(nd):
        Case(nd, data, exact=False).run(steps)
        nd.ones((2,)) + 1

    program = record(workload)
    assert program.ops


# -- behaviours the fuzz caught, one property each ----------------------------------------------
@FUZZ
@given(source=st.lists(values, min_size=1, max_size=6))
def test_array_copies_its_source_at_the_call(source):
    """nd.array(src) holds src's values at the call, whatever src becomes afterwards."""
    src = np.asarray(source, np.float32)
    with realexec.session(workers=1) as nd:
        a = nd.array(src)
        before = src.copy()
        src += 1
        np.testing.assert_array_equal(a.asnumpy(), before)


@FUZZ
@given(shape=st.lists(dims, min_size=1, max_size=2).map(tuple))
def test_numpy_operands_raise_type_error(shape):
    """An NDArray on the left of a numpy array raises TypeError at the call (numpy broadcast
    our operator over its elements into an object array)."""
    with realexec.session(workers=1) as nd:
        a, b = nd.ones(shape), np.ones(shape, np.float32)
        with pytest.raises(TypeError):
            _ = a + b


def test_a_numpy_array_on_the_left_names_the_op():
    """np_array + NDArray raises TypeError naming the operator or NDArray (numpy's fallback says
    'Concatenation operation is not implemented for NumPy arrays')."""
    with realexec.session(workers=1) as nd:
        with pytest.raises(TypeError, match=r"NDArray|\+|add"):
            _ = np.ones(3, np.float32) + nd.ones((3,))


@FUZZ
@given(shape=good_shapes)
def test_bool_of_an_array_is_numpys_or_a_clear_error(shape):
    """bool(array) is numpy's answer for one element and a ValueError otherwise (it was True
    for any array, zeros included)."""
    with realexec.session(workers=1) as nd:
        a = nd.zeros(shape)
        if int(np.prod(_as_np_shape(shape))) == 1:
            assert bool(a) is False
        else:
            with pytest.raises(ValueError, match="truth"):
                bool(a)


@pytest.mark.parametrize("shape", [(10**10, 10**10), (2**62, 4), (2**31,) * 3])
def test_shape_overflowing_int64_is_a_shape_error_at_the_call(shape):
    """A shape whose byte count does not fit in int64 is a ShapeError at the call, on both
    backends (the recorder took it, and simulate priced it as a negative size)."""
    with pytest.raises(ShapeError, match="ones"):
        record(lambda nd: nd.ones(shape))
    with realexec.session(workers=1) as nd:
        with pytest.raises(ShapeError, match="ones"):
            nd.ones(shape)


def test_recording_a_blocker_on_a_huge_array_allocates_nothing():
    """Predicting a (10**6, 10**6) array's wait_to_read records the blocker without allocating
    4 TB of zeros."""
    program = record(lambda nd: nd.ones((10**6, 10**6)).wait_to_read())
    assert len(program.instrs) >= 2


@FUZZ
@given(shape=odd_shapes)
def test_odd_shapes_are_errors_naming_the_op(shape):
    """nd.ones(2.5), nd.ones(None), nd.ones(True): an error at the call naming the op (they
    raised "'float' object is not iterable", or took True as 1)."""
    with realexec.session(workers=1) as nd:
        with pytest.raises((ShapeError, TypeError), match="ones"):
            nd.ones(shape)


def test_unknown_device_type_is_named_in_the_error():
    """A Context of an unknown device type fails at the call naming that type."""
    from asyncsim.nd.ndarray import Context

    with realexec.session(workers=1) as nd:
        with pytest.raises(ValueError, match="tpu"):
            nd.ones((2,), ctx=Context("tpu", 0))


@pytest.mark.parametrize("attribute, value", [("shape", (100000,)), ("dtype", "float64"),
                                              ("nbytes", 1 << 30)])
def test_an_arrays_description_cannot_be_rewritten(attribute, value):
    """Assigning an NDArray's shape (or dtype, or byte count) raises AttributeError: the next
    op would trust it and its kernel read past the buffer."""
    with realexec.session(workers=1) as nd:
        a = nd.ones((2, 3))
        with pytest.raises(AttributeError):
            setattr(a, attribute, value)
        np.testing.assert_array_equal((a + 1).asnumpy(), np.full((2, 3), 2, np.float32))


def test_iterating_a_0d_array_is_a_type_error():
    """iter() over a 0-d array raises TypeError as numpy's does (it gave an empty list)."""
    with realexec.session(workers=1) as nd:
        with pytest.raises(TypeError):
            list(nd.ones((3,)).sum())


@pytest.mark.parametrize("ctx", [0, "", False])
def test_a_falsy_ctx_is_not_taken_for_the_default(ctx):
    """ctx=0 (or '' or False) is not a context: TypeError, as ctx='cpu' is (it silently meant
    the default device)."""
    with realexec.session(workers=1) as nd:
        with pytest.raises(TypeError, match="context"):
            nd.ones((2,), ctx=ctx)


def test_a_bool_index_is_not_row_one():
    """a[True] is numpy's (a new axis: shape (1, 2, 3)) or an IndexError; it was a[1]."""
    with realexec.session(workers=1) as nd:
        a = nd.ones((2, 3))
        try:
            row = a[True]
        except IndexError:
            return
        assert row.shape == (1, 2, 3)


@pytest.mark.parametrize("name, call", [
    ("add", lambda nd: nd.ones((2,)) + 10**400),
    ("full", lambda nd: nd.full((2,), "x")),
    ("uniform", lambda nd: nd.random.uniform("a", 1, shape=(2,))),
])
def test_bad_scalars_fail_naming_the_op(name, call):
    """A scalar that is no float (a Python int beyond float, a string) fails at the call with
    a toolkit error naming the op (it was OverflowError or float()'s own message)."""
    with realexec.session(workers=1) as nd:
        with pytest.raises((ValueError, TypeError), match=name):
            call(nd)


def test_whole_slice_of_a_0d_array_is_an_index_error():
    """a[:] of a 0-d array raises IndexError as any other index of it does (and as numpy's
    does); it returned the array."""
    with realexec.session(workers=1) as nd:
        with pytest.raises(IndexError):
            nd.ones((3,)).sum()[:]
