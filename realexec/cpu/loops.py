"""The compiled loops under the elementwise, copy and reduction kernels of `realexec.cpu.kernels`
(and of the training ops in `realexec.cpu.tensor_extra`).

Few compiled signatures (compilation time counts): every elementwise op, fill and copy runs
through two loops picked by an integer op code (`scalar_flat`, `binary_flat`) over 1-d views;
broadcasting runs through one strided loop (`binary_strided`) whose shape/stride vectors
`broadcast_plan` computes once per shape pair and caches. Every loop reads element i before
writing it, so out may be an input. Reductions (`sum64`) accumulate in float64 in blocks.
The samplers' loop (`random_fill`) is here too, with its seed and bounds read from attrs: the
Python kernels and the compiled worker call the same one.
All loops are @njit(nogil=True, cache=True, error_model="numpy") and single-threaded.
"""

from __future__ import annotations

import functools
import math
import random

import numpy as np
from numba import njit

# Op codes of the flat loops. A binary code applied to (a, scalar) means a OP scalar, so the
# broadcast loop can hand a row whose right operand is constant to the scalar loop unchanged.
ADD, SUB, MUL, DIV, COPY, RSUB, RDIV, MAX, FILL, EQUAL = range(10)

# Reduction block: partial sums of this many elements keep float64 rounding error small.
_BLOCK = 4096

_jit = njit(nogil=True, cache=True, error_model="numpy")
# The loop bodies are inlined into each aliasing case of their entry point below. Why: LLVM
# vectorises `out[i] = a[i] + s` only behind a runtime check that a and out do not overlap, and an
# in-place op (x += 1, out is a) fails it and ran the scalar loop, 3-5x slower than numpy's. When
# both arguments are one value, LLVM knows they alias exactly and vectorises without the check.
_body = njit(nogil=True, inline="always", error_model="numpy")


@_jit
def scalar_flat(op, a, scalar, out):
    """out[i] = a[i] OP s (RSUB, RDIV: s OP a[i]; MAX: np.maximum; FILL: s; COPY: a[i]; EQUAL:
    1 or 0), where s is the float64 `scalar` rounded to out's dtype first, as numpy treats a
    Python float. `a` may be `out` (in place)."""
    if a.ctypes.data == out.ctypes.data:
        _scalar_body(op, out, scalar, out)
    else:
        _scalar_body(op, a, scalar, out)


@_jit
def binary_flat(op, a, b, out):
    """out[i] = a[i] OP b[i] for ADD, SUB, MUL, DIV, EQUAL (1 or 0); COPY gives out[i] = a[i].
    `a` or `b` may be `out`; only `a` is fast (x += y; a case per alias would cost compile time)."""
    if a.ctypes.data == out.ctypes.data:
        _binary_body(op, out, b, out)
    else:
        _binary_body(op, a, b, out)


@_body
def _scalar_body(op, a, scalar, out):
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
    elif op == EQUAL:
        for i in range(n):
            out[i] = 1 if a[i] == s else 0
    else:
        for i in range(n):
            out[i] = a[i]


@_body
def _binary_body(op, a, b, out):
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
    elif op == EQUAL:
        for i in range(n):
            out[i] = 1 if a[i] == b[i] else 0
    else:
        for i in range(n):
            out[i] = a[i]


@_jit
def _binary_row(op, a, ia, sa, b, ib, sb, out):
    """One innermost row of a broadcast op; each operand's stride there is 1 or 0."""
    n = out.size
    if sa != 0 and sb != 0:
        binary_flat(op, a[ia:ia + n], b[ib:ib + n], out)
    elif sa != 0:
        scalar_flat(op, a[ia:ia + n], np.float64(b[ib]), out)
    elif sb != 0:
        # a is constant along the row: a OP b[i] is the reversed scalar op on b
        swapped = op
        if op == SUB:
            swapped = RSUB
        elif op == DIV:
            swapped = RDIV
        elif op == COPY:
            swapped = FILL
        scalar_flat(swapped, b[ib:ib + n], np.float64(a[ia]), out)
    else:
        scalar_flat(op, a[ia:ia + 1], np.float64(b[ib]), out[:1])
        scalar_flat(FILL, out, np.float64(out[0]), out)


@_jit
def binary_strided(op, a, a_strides, b, b_strides, out, shape):
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


@_jit
def random_fill(out, normal, p, q, seed):
    """Seed this thread's generator (numba's, one per thread), then fill `out` with
    normal(loc=p, scale=q) numbers or, when not `normal`, uniform(low=p, high=q) ones."""
    np.random.seed(seed)
    for i in range(out.size):
        out[i] = np.random.normal(p, q) if normal else np.random.uniform(p, q)


def random_seed(attrs: dict) -> int:
    """A sampler's seed: its `seed` attr as numba takes it (a uint32), or a fresh one (no seed
    means a fresh stream, as numpy's)."""
    seed = attrs.get("seed")
    return random.getrandbits(32) if seed is None else int(seed) & 0xFFFFFFFF


def sampler_bounds(name: str, attrs: dict) -> tuple[float, float]:
    """(loc, scale) of a "normal", (low, high) of a "uniform", with numpy's defaults."""
    if name == "normal":
        return float(attrs.get("loc", 0.0)), float(attrs.get("scale", 1.0))
    return float(attrs.get("low", 0.0)), float(attrs.get("high", 1.0))


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
def sum64(a, square):
    """Sum (of squares when `square`) of a 1-d array: float64 partial sums of _BLOCK elements,
    added up. (Blocks passed as slices: an index loop over start:stop does not vectorise.)"""
    total = 0.0
    for start in range(0, a.size, _BLOCK):
        total += _block_sum(a[start:start + _BLOCK], square)
    return total


@functools.lru_cache(maxsize=512)
def broadcast_plan(a_shape, b_shape, out_shape):
    """(shape, a_strides, b_strides) as int64 arrays for `binary_strided`: element strides of
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
