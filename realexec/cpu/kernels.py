"""CPU kernels: the loops a realexec worker thread runs for each op of `asyncsim.nd.ops.OPS`.

`KERNELS[name](inputs, out, attrs)` computes op `name` into `out`, a preallocated C-contiguous
numpy array whose shape and dtype `asyncsim.nd.ops.infer` gave. Shapes, dtypes and attrs were
checked when the op was issued, so nothing is checked again here (dispatch cost matters: the
engine calls one of these per op). In-place ops (`setitem`, `setitem_scalar`) get `out is
inputs[0]`.

Assumptions:
- inputs have out's dtype (float32 or float64) and are C-contiguous; a non-contiguous input is
  still computed right, it only pays a copy in `ravel()`. `out` is C-contiguous (the pool's), so
  its `ravel()` is a view that writes through. The input of `array` is any host array and is
  converted as `np.copyto(..., casting="unsafe")` converts it.
- every loop is @njit(nogil=True, cache=True) and single-threaded: W worker threads run W kernels
  at once on W cores. `dot` calls numpy's BLAS, which also drops the GIL; `set_blas_threads`
  keeps BLAS's own threads from oversubscribing the cores that the workers use.
- few compiled signatures (compilation time counts): every elementwise op, fill and copy runs
  through two loops picked by an integer op code (`_scalar_flat`, `_binary_flat`) over 1-d views;
  broadcasting runs through one strided loop whose shape/stride vectors are computed once per
  shape pair and cached.
- the out of an elementwise op may be its first input (`x += y`): every loop reads element i
  before writing it. error_model="numpy": x/0 gives inf or nan, as numpy does, not an exception.
- reductions accumulate in float64 in blocks, so their error grows slowly with the size.
- random ops seed numba's generator, which is per thread, inside the kernel: a result depends
  only on attrs['seed'], not on which worker runs it.
"""

from __future__ import annotations

import functools
import math
import random

import numpy as np
import threadpoolctl
from numba import njit

from asyncsim.nd.ops import OPS

# Op codes of the flat loops. A binary code applied to (a, scalar) means a OP scalar, so the
# broadcast loop can hand a row whose right operand is constant to the scalar loop unchanged.
ADD, SUB, MUL, DIV, COPY, RSUB, RDIV, MAX, FILL = range(9)

# Reduction block: partial sums of this many elements keep float64 rounding error small.
_BLOCK = 4096

_jit = njit(nogil=True, cache=True, error_model="numpy")


@_jit
def _scalar_flat(op, a, scalar, out):
    """out[i] = a[i] OP s (RSUB, RDIV: s OP a[i]; MAX: np.maximum; FILL: s; COPY: a[i]), where
    s is the float64 `scalar` rounded to out's dtype first, as numpy treats a Python float."""
    s = out.dtype.type(scalar)
    n = out.size
    if op == ADD:
        for i in range(n):
            out[i] = a[i] + s
    elif op == SUB:
        for i in range(n):
            out[i] = a[i] - s
    elif op == MUL:
        for i in range(n):
            out[i] = a[i] * s
    elif op == DIV:
        for i in range(n):
            out[i] = a[i] / s
    elif op == RSUB:
        for i in range(n):
            out[i] = s - a[i]
    elif op == RDIV:
        for i in range(n):
            out[i] = s / a[i]
    elif op == MAX:
        for i in range(n):
            x = a[i]
            # NaN propagates and max(-0.0, 0.0) is +0.0, as np.maximum gives
            out[i] = x if (x > s or x != x) else s
    elif op == FILL:
        for i in range(n):
            out[i] = s
    else:
        for i in range(n):
            out[i] = a[i]


@_jit
def _binary_flat(op, a, b, out):
    """out[i] = a[i] OP b[i] for ADD, SUB, MUL, DIV; COPY gives out[i] = a[i]."""
    n = out.size
    if op == ADD:
        for i in range(n):
            out[i] = a[i] + b[i]
    elif op == SUB:
        for i in range(n):
            out[i] = a[i] - b[i]
    elif op == MUL:
        for i in range(n):
            out[i] = a[i] * b[i]
    elif op == DIV:
        for i in range(n):
            out[i] = a[i] / b[i]
    else:
        for i in range(n):
            out[i] = a[i]


@_jit
def _binary_row(op, a, ia, sa, b, ib, sb, out):
    """One innermost row of a broadcast op; each operand's stride there is 1 or 0."""
    n = out.size
    if sa != 0 and sb != 0:
        _binary_flat(op, a[ia:ia + n], b[ib:ib + n], out)
    elif sa != 0:
        _scalar_flat(op, a[ia:ia + n], np.float64(b[ib]), out)
    elif sb != 0:
        # a is constant along the row: a OP b[i] is the reversed scalar op on b
        swapped = op
        if op == SUB:
            swapped = RSUB
        elif op == DIV:
            swapped = RDIV
        elif op == COPY:
            swapped = FILL
        _scalar_flat(swapped, b[ib:ib + n], np.float64(a[ia]), out)
    else:
        _scalar_flat(op, a[ia:ia + 1], np.float64(b[ib]), out[:1])
        _scalar_flat(FILL, out, np.float64(out[0]), out)


@_jit
def _binary_strided(op, a, a_strides, b, b_strides, out, shape):
    """out (C order, `shape`) = a OP b, where a and b are read through element strides (0 where
    broadcast). The last axis is walked by the flat loops; the others by an odometer."""
    ndim = shape.size
    n = shape[ndim - 1]
    sa = a_strides[ndim - 1]
    sb = b_strides[ndim - 1]
    index = np.zeros(ndim, np.int64)
    ia = 0
    ib = 0
    for row in range(out.size // n):
        _binary_row(op, a, ia, sa, b, ib, sb, out[row * n:(row + 1) * n])
        d = ndim - 2
        while d >= 0:
            index[d] += 1
            ia += a_strides[d]
            ib += b_strides[d]
            if index[d] < shape[d]:
                break
            ia -= a_strides[d] * shape[d]
            ib -= b_strides[d] * shape[d]
            index[d] = 0
            d -= 1


# `reassoc` lets LLVM vectorise a float sum (several partial sums); NaN and inf still propagate.
_jit_reassoc = njit(nogil=True, cache=True, error_model="numpy", fastmath={"reassoc"})


@_jit_reassoc
def _block_sum(a, square):
    """Sum (of squares when `square`) of a short 1-d array, in float64."""
    part = 0.0
    if square:
        for i in range(a.size):
            x = np.float64(a[i])
            part += x * x
    else:
        for i in range(a.size):
            part += np.float64(a[i])
    return part


@_jit_reassoc
def _sum64(a, square):
    """Sum (of squares when `square`) of a 1-d array: float64 partial sums of _BLOCK elements,
    added up. (Blocks passed as slices: an index loop over start:stop does not vectorise.)"""
    total = 0.0
    for start in range(0, a.size, _BLOCK):
        total += _block_sum(a[start:start + _BLOCK], square)
    return total


@_jit
def _random(out, normal, p, q, seed):
    """Seed this thread's generator, then fill out with normal(loc=p, scale=q) numbers or,
    when not `normal`, with uniform(low=p, high=q) ones."""
    np.random.seed(seed)
    for i in range(out.size):
        out[i] = np.random.normal(p, q) if normal else np.random.uniform(p, q)


@functools.lru_cache(maxsize=512)
def _broadcast_plan(a_shape, b_shape, out_shape):
    """(shape, a_strides, b_strides) as int64 arrays for `_binary_strided`: element strides of
    C-contiguous a and b inside out_shape, 0 along broadcast axes; axes of length 1 dropped and
    neighbouring axes merged where both operands are contiguous (or both constant) across them."""
    ndim = len(out_shape)
    padded_a = (1,) * (ndim - len(a_shape)) + tuple(a_shape)
    padded_b = (1,) * (ndim - len(b_shape)) + tuple(b_shape)
    axes = []
    for d in range(ndim):
        if out_shape[d] == 1:
            continue
        sa = 0 if padded_a[d] == 1 else math.prod(padded_a[d + 1:])
        sb = 0 if padded_b[d] == 1 else math.prod(padded_b[d + 1:])
        n = out_shape[d]
        if axes and axes[-1][1] == sa * n and axes[-1][2] == sb * n:
            axes[-1] = (axes[-1][0] * n, sa, sb)
        else:
            axes.append((n, sa, sb))
    if not axes:
        axes = [(1, 0, 0)]
    shape, a_strides, b_strides = (np.array(col, np.int64) for col in zip(*axes, strict=True))
    return shape, a_strides, b_strides


def _rows(a, attrs):
    """Flat view of rows start:stop of C-contiguous `a` (row `start` alone when squeezed)."""
    start = attrs["start"]
    stop = start + 1 if attrs.get("squeeze") else attrs["stop"]
    return a[start:stop].ravel()


# ---- the wrappers the engine calls: (inputs, out, attrs) -> None ----

def _fill_kernel(value):
    def fill(inputs, out, attrs):
        flat = out.ravel()
        _scalar_flat(FILL, flat, value, flat)
    return fill


def _full_kernel(inputs, out, attrs):
    flat = out.ravel()
    _scalar_flat(FILL, flat, float(attrs["value"]), flat)


def _scalar_kernel(op):
    # float(): an int scalar would otherwise compile a second signature
    def scalar_op(inputs, out, attrs):
        _scalar_flat(op, inputs[0].ravel(), float(attrs["scalar"]), out.ravel())
    return scalar_op


def _relu_kernel(inputs, out, attrs):
    _scalar_flat(MAX, inputs[0].ravel(), 0.0, out.ravel())


def _binary_kernel(op):
    def binary_op(inputs, out, attrs):
        a, b = inputs
        if a.shape == b.shape:
            _binary_flat(op, a.ravel(), b.ravel(), out.ravel())
        elif out.size:
            shape, a_strides, b_strides = _broadcast_plan(a.shape, b.shape, out.shape)
            _binary_strided(op, a.ravel(), a_strides, b.ravel(), b_strides,
                            out.ravel(), shape)
    return binary_op


def _random_seed(attrs):
    seed = attrs.get("seed")
    # numba seeds with a uint32; no seed at all means a fresh stream, as numpy does
    return random.getrandbits(32) if seed is None else int(seed) & 0xFFFFFFFF


def _uniform_kernel(inputs, out, attrs):
    _random(out.ravel(), False, float(attrs.get("low", 0.0)), float(attrs.get("high", 1.0)),
            _random_seed(attrs))


def _normal_kernel(inputs, out, attrs):
    _random(out.ravel(), True, float(attrs.get("loc", 0.0)), float(attrs.get("scale", 1.0)),
            _random_seed(attrs))


def _array_kernel(inputs, out, attrs):
    # the host array may have any dtype and layout: numpy's copy converts it (and drops the GIL)
    np.copyto(out, inputs[0], casting="unsafe")


def _copy_kernel(inputs, out, attrs):
    src = inputs[0].ravel()
    _binary_flat(COPY, src, src, out.ravel())


def _slice_kernel(inputs, out, attrs):
    src = _rows(inputs[0], attrs)
    _binary_flat(COPY, src, src, out.ravel())


def _setitem_kernel(inputs, out, attrs):
    dst, src = inputs
    target_shape = dst.shape[1:]
    if not attrs.get("squeeze"):
        target_shape = (attrs["stop"] - attrs["start"],) + target_shape
    target = _rows(dst, attrs)
    flat_src = src.ravel()
    if src.shape == target_shape:
        _binary_flat(COPY, flat_src, flat_src, target)
    elif target.size:
        shape, strides, _ = _broadcast_plan(src.shape, src.shape, target_shape)
        _binary_strided(COPY, flat_src, strides, flat_src, strides, target, shape)


def _setitem_scalar_kernel(inputs, out, attrs):
    target = _rows(inputs[0], attrs)
    _scalar_flat(FILL, target, float(attrs["scalar"]), target)


def _sum_kernel(inputs, out, attrs):
    out[()] = _sum64(inputs[0].ravel(), False)


def _mean_kernel(inputs, out, attrs):
    a = inputs[0]
    out[()] = _sum64(a.ravel(), False) / a.size if a.size else np.nan


def _norm_kernel(inputs, out, attrs):
    out[()] = math.sqrt(_sum64(inputs[0].ravel(), True))


def _dot_kernel(inputs, out, attrs):
    # numpy's BLAS call drops the GIL; `out=` writes the product in place, 0-d out included
    np.dot(inputs[0], inputs[1], out=out)


KERNELS = {
    "ones": _fill_kernel(1.0),
    "zeros": _fill_kernel(0.0),
    "full": _full_kernel,
    "uniform": _uniform_kernel,
    "normal": _normal_kernel,
    "array": _array_kernel,
    **{name: _binary_kernel(op) for name, op in
       [("add", ADD), ("sub", SUB), ("mul", MUL), ("div", DIV)]},
    **{f"{name}_scalar": _scalar_kernel(op) for name, op in
       [("add", ADD), ("sub", SUB), ("rsub", RSUB), ("mul", MUL), ("div", DIV), ("rdiv", RDIV)]},
    "relu": _relu_kernel,
    "copy": _copy_kernel,
    "copyto": _copy_kernel,
    "dot": _dot_kernel,
    "sum": _sum_kernel,
    "mean": _mean_kernel,
    "norm": _norm_kernel,
    "slice": _slice_kernel,
    "setitem": _setitem_kernel,
    "setitem_scalar": _setitem_scalar_kernel,
}

assert set(KERNELS) == set(OPS), set(OPS) ^ set(KERNELS)

def set_blas_threads(n: int) -> None:
    """Limit the threads of every BLAS numpy has loaded (OpenBLAS, MKL, ...) to n, process-wide
    and until changed again (threadpoolctl's limit outside a `with` is never undone)."""
    threadpoolctl.threadpool_limits(limits=int(n), user_api="blas")


def warmup(dtypes=("float32",)) -> None:
    """Run every kernel once on tiny arrays of each dtype, so compilation (or loading numba's
    on-disk cache) happens here and not inside the first real op."""
    for dtype in dtypes:
        # one call per compiled loop: the other ops reuse these loops
        matrix = np.ones((2, 3), dtype)
        row = np.ones(3, dtype)
        scalar = np.empty((), dtype)
        rows = {"start": 0, "stop": 1}
        KERNELS["add"]((matrix, matrix), matrix, {})
        KERNELS["add"]((matrix, row), matrix, {})
        KERNELS["add_scalar"]((matrix,), matrix, {"scalar": 1.0})
        KERNELS["uniform"]((), matrix, {"low": 0.0, "high": 1.0, "seed": 0})
        KERNELS["normal"]((), matrix, {"loc": 0.0, "scale": 1.0, "seed": 0})
        KERNELS["sum"]((matrix,), scalar, {})
        KERNELS["norm"]((matrix,), scalar, {})
        KERNELS["dot"]((row, row), scalar, {})
        KERNELS["setitem"]((matrix, row[:1]), matrix, rows)
