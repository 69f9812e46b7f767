"""CPU kernels of the tensor ops that training adds: `equal`, `sigmoid`, `tanh`, `relu_grad`,
`cast`, `sum_axis`, `argmax`, `broadcast_to`, `reshape` and the in-place `assign` and
`sgd_update`.

Same contract as `realexec.cpu.kernels`: `kernel(inputs, out, attrs)` writes into the
preallocated C-contiguous `out`; shapes and attrs were checked at issue (`sum_axis` gets sorted
non-negative axes, `argmax` one axis); in-place ops get `out is inputs[0]`.

Assumptions: loops are @njit(nogil=True, cache=True) and single-threaded; `equal`, copies and
broadcasts reuse the op-coded loops of `loops`; `cast` (two dtypes) is numpy's copy, which
also drops the GIL. `sum_axis` accumulates in float64. `argmax` gives the first largest
element's index as a float (the first NaN, if any, as numpy's argmax).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit

from realexec.cpu.loops import COPY, EQUAL, binary_flat, binary_strided, broadcast_plan

_jit = njit(nogil=True, cache=True, error_model="numpy")

SIGMOID, TANH = 0, 1


@_jit
def _unary(op, a, out):
    """out[i] = sigmoid(a[i]) or tanh(a[i]); sigmoid never overflows (exp of a non-positive)."""
    one = out.dtype.type(1)
    if op == SIGMOID:
        for i in range(out.size):
            x = a[i]
            if x >= 0:
                out[i] = one / (one + np.exp(-x))
            else:
                e = np.exp(x)
                out[i] = e / (one + e)
    else:
        for i in range(out.size):
            out[i] = np.tanh(a[i])


@_jit
def _relu_grad(a, g, out):
    zero = out.dtype.type(0)
    for i in range(out.size):
        out[i] = g[i] if a[i] > 0 else zero


@_jit
def _sgd_update(w, g, lr, rescale, wd):
    """w -= lr * (rescale * g + wd * w), worked out in float64 and rounded once into w."""
    for i in range(w.size):
        x = np.float64(w[i])
        w[i] = x - lr * (rescale * g[i] + wd * x)


@_jit
def _sum_axes(a, shape, out_strides, acc):
    """acc[...] += a, where a (C order, `shape`) is read whole and element index d-tuple goes to
    acc's flat position sum(index * out_strides) (stride 0 along the summed axes). The last
    axis is walked in one tight loop: a running sum when it is summed, a row add when kept."""
    ndim = shape.size
    n = shape[ndim - 1]
    step = out_strides[ndim - 1]
    index = np.zeros(ndim, np.int64)
    at = 0
    for row in range(a.size // n):
        base = row * n
        if step == 0:
            part = 0.0
            for k in range(n):
                part += a[base + k]
            acc[at] += part
        else:
            for k in range(n):
                acc[at + k] += a[base + k]
        d = ndim - 2
        while d >= 0:
            index[d] += 1
            at += out_strides[d]
            if index[d] < shape[d]:
                break
            at -= out_strides[d] * shape[d]
            index[d] = 0
            d -= 1


@_jit
def _argmax(a, out):
    """out[o, i] = the index k of the first largest a[o, k, i] (the first NaN, if any)."""
    outer, k_len, inner = a.shape
    for o in range(outer):
        for i in range(inner):
            best = a[o, 0, i]
            at = 0
            for k in range(1, k_len):
                v = a[o, k, i]
                if v > best or (v != v and best == best):
                    best = v
                    at = k
            out[o, i] = at


@functools.lru_cache(maxsize=512)
def _sum_plan(shape, axes):
    """(shape, out_strides) int64 vectors for `_sum_axes`: axes of length 1 dropped and
    neighbours merged where both are summed or both kept and contiguous in the output."""
    merged = []
    for d, n in enumerate(shape):
        if n == 1:
            continue
        stride = 0 if d in axes else math.prod(
            m for e, m in enumerate(shape) if e > d and e not in axes)
        if merged and merged[-1][1] == stride * n:
            merged[-1] = (merged[-1][0] * n, stride)
        else:
            merged.append((n, stride))
    if not merged:
        merged = [(1, 0)]  # one element: added to the one output element
    shape_v, strides_v = (np.array(col, np.int64) for col in zip(*merged, strict=True))
    return shape_v, strides_v


def _axes(attrs):
    axis = attrs["axis"]
    return (axis,) if isinstance(axis, int) else tuple(axis)


# ---- the wrappers the engine calls ----

def _equal_kernel(inputs, out, attrs):
    a, b = inputs
    if a.shape == b.shape:
        binary_flat(EQUAL, a.ravel(), b.ravel(), out.ravel())
    elif out.size:
        shape, a_strides, b_strides = broadcast_plan(a.shape, b.shape, out.shape)
        binary_strided(EQUAL, a.ravel(), a_strides, b.ravel(), b_strides, out.ravel(), shape)


def _unary_kernel(op):
    def unary(inputs, out, attrs):
        _unary(op, inputs[0].ravel(), out.ravel())
    return unary


def _relu_grad_kernel(inputs, out, attrs):
    a, g = inputs
    _relu_grad(a.ravel(), g.ravel(), out.ravel())


def _cast_kernel(inputs, out, attrs):
    np.copyto(out, inputs[0], casting="unsafe")


def _sum_axis_kernel(inputs, out, attrs):
    a = inputs[0]
    acc = np.zeros(out.size)
    if a.size:
        shape, strides = _sum_plan(a.shape, frozenset(_axes(attrs)))
        _sum_axes(a.ravel(), shape, strides, acc)
    out.ravel()[:] = acc


def _argmax_kernel(inputs, out, attrs):
    a = inputs[0]
    (axis,) = _axes(attrs)
    if a.shape[axis] == 0:
        raise ValueError(f"argmax: axis {axis} of shape {a.shape} is empty")
    if out.size:
        view = np.ascontiguousarray(a).reshape(
            math.prod(a.shape[:axis]), a.shape[axis], math.prod(a.shape[axis + 1:]))
        _argmax(view, out.reshape(view.shape[0], view.shape[2]))


def _broadcast_to_kernel(inputs, out, attrs):
    src = inputs[0]
    flat = src.ravel()
    if src.shape == out.shape:
        binary_flat(COPY, flat, flat, out.ravel())
    elif out.size:
        shape, strides, _ = broadcast_plan(src.shape, src.shape, out.shape)
        binary_strided(COPY, flat, strides, flat, strides, out.ravel(), shape)


def _copy_second_kernel(index):
    def copy(inputs, out, attrs):
        src = inputs[index].ravel()
        binary_flat(COPY, src, src, out.ravel())
    return copy


def _sgd_update_kernel(inputs, out, attrs):
    w, g = inputs
    _sgd_update(out.ravel(), g.ravel(), float(attrs["lr"]), float(attrs.get("rescale", 1.0)),
                float(attrs.get("wd", 0.0)))


TENSOR_KERNELS = {
    "equal": _equal_kernel,
    "sigmoid": _unary_kernel(SIGMOID),
    "tanh": _unary_kernel(TANH),
    "relu_grad": _relu_grad_kernel,
    "cast": _cast_kernel,
    "sum_axis": _sum_axis_kernel,
    "argmax": _argmax_kernel,
    "broadcast_to": _broadcast_to_kernel,
    "reshape": _copy_second_kernel(0),
    "assign": _copy_second_kernel(1),
    "sgd_update": _sgd_update_kernel,
}
