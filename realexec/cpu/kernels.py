"""CPU kernels: the loops a realexec worker thread runs for each op of `asyncsim.nd.ops.OPS`.

`KERNELS[name](inputs, out, attrs)` computes op `name` into `out`, a preallocated C-contiguous
numpy array whose shape and dtype `asyncsim.nd.ops.infer` gave. Shapes, dtypes and attrs were
checked when the op was issued, so nothing is checked again here (dispatch cost matters: the
engine calls one of these per op). In-place ops (`asyncsim.nd.ops.INPLACE`: `setitem`,
`setitem_scalar`, `assign`, `sgd_update`, `bn_update`) get `out is inputs[0]`.

This module holds the table and the kernels of creation, arithmetic, copies, rows, reductions and
`dot`; the table takes the rest from `tensor_extra` (the tensor ops of training), `conv`,
`pool`, `nn` (softmaxes, cross-entropy, batch norm) and `graph` (a hybridized block as one op).

Assumptions:
- inputs have out's dtype (float32 or float64) and are C-contiguous; a non-contiguous input is
  still computed right, it only pays a copy in `ravel()`. `out` is C-contiguous (the pool's), so
  its `ravel()` is a view that writes through. The input of `array` is any host array and is
  converted as `np.copyto(..., casting="unsafe")` converts it.
- every loop is @njit(nogil=True, cache=True) and single-threaded: W worker threads run W kernels
  at once on W cores. `dot` (and the convolutions) call numpy's BLAS, which also drops the GIL;
  `set_blas_threads` keeps BLAS's own threads from oversubscribing the cores the workers use.
- few compiled signatures (compilation time counts): elementwise ops, fills and copies share the
  op-coded loops of `loops`.
- the out of an elementwise op may be its first input (`x += y`): every loop reads element i
  before writing it. error_model="numpy": x/0 gives inf or nan, as numpy does, not an exception.
- reductions accumulate in float64 in blocks, so their error grows slowly with the size.
- random ops seed numba's generator, which is per thread, inside the kernel: a result depends
  only on attrs['seed'], not on which worker runs it.
"""

from __future__ import annotations

import math

import numpy as np
import threadpoolctl
from numba import njit

from asyncsim.nd.ops import OPS
from realexec.cpu.conv import CONV_KERNELS
from realexec.cpu.graph import graph_kernel
from realexec.cpu.loops import (
    ADD,
    COPY,
    DIV,
    FILL,
    MAX,
    MUL,
    RDIV,
    RSUB,
    SUB,
    binary_flat,
    binary_strided,
    broadcast_plan,
    random_fill,
    random_seed,
    sampler_bounds,
    scalar_flat,
    sum64,
)
from realexec.cpu.nn import NN_KERNELS
from realexec.cpu.pool import POOL_KERNELS
from realexec.cpu.tensor_extra import TENSOR_KERNELS

_jit = njit(nogil=True, cache=True, error_model="numpy")


def _rows(a, attrs):
    """Flat view of rows start:stop of C-contiguous `a` (row `start` alone when squeezed)."""
    start = attrs["start"]
    stop = start + 1 if attrs.get("squeeze") else attrs["stop"]
    return a[start:stop].ravel()


# ---- the wrappers the engine calls: (inputs, out, attrs) -> None ----

def _fill_kernel(value):
    def fill(inputs, out, attrs):
        flat = out.ravel()
        scalar_flat(FILL, flat, value, flat)
    return fill


def _full_kernel(inputs, out, attrs):
    flat = out.ravel()
    scalar_flat(FILL, flat, float(attrs["value"]), flat)


def _scalar_kernel(op):
    # float(): an int scalar would otherwise compile a second signature
    def scalar_op(inputs, out, attrs):
        scalar_flat(op, inputs[0].ravel(), float(attrs["scalar"]), out.ravel())
    return scalar_op


def _relu_kernel(inputs, out, attrs):
    scalar_flat(MAX, inputs[0].ravel(), 0.0, out.ravel())


def _binary_kernel(op):
    def binary_op(inputs, out, attrs):
        a, b = inputs
        if a.shape == b.shape:
            binary_flat(op, a.ravel(), b.ravel(), out.ravel())
        elif out.size:
            shape, a_strides, b_strides = broadcast_plan(a.shape, b.shape, out.shape)
            binary_strided(op, a.ravel(), a_strides, b.ravel(), b_strides,
                            out.ravel(), shape)
    return binary_op


def _sampler_kernel(name):
    normal = name == "normal"

    def sample(inputs, out, attrs):
        first, second = sampler_bounds(name, attrs)
        random_fill(out.ravel(), normal, first, second, random_seed(attrs))
    return sample


def _array_kernel(inputs, out, attrs):
    # the host array may have any dtype and layout: numpy's copy converts it (and drops the GIL)
    np.copyto(out, inputs[0], casting="unsafe")


def _copy_kernel(inputs, out, attrs):
    src = inputs[0].ravel()
    binary_flat(COPY, src, src, out.ravel())


def _slice_kernel(inputs, out, attrs):
    src = _rows(inputs[0], attrs)
    binary_flat(COPY, src, src, out.ravel())


def _setitem_kernel(inputs, out, attrs):
    dst, src = inputs
    target_shape = dst.shape[1:]
    if not attrs.get("squeeze"):
        target_shape = (attrs["stop"] - attrs["start"],) + target_shape
    target = _rows(dst, attrs)
    flat_src = src.ravel()
    if src.shape == target_shape:
        binary_flat(COPY, flat_src, flat_src, target)
    elif target.size:
        shape, strides, _ = broadcast_plan(src.shape, src.shape, target_shape)
        binary_strided(COPY, flat_src, strides, flat_src, strides, target, shape)


def _setitem_scalar_kernel(inputs, out, attrs):
    target = _rows(inputs[0], attrs)
    scalar_flat(FILL, target, float(attrs["scalar"]), target)


def _sum_kernel(inputs, out, attrs):
    out[()] = sum64(inputs[0].ravel(), False)


def _mean_kernel(inputs, out, attrs):
    a = inputs[0]
    out[()] = sum64(a.ravel(), False) / a.size if a.size else np.nan


def _norm_kernel(inputs, out, attrs):
    out[()] = math.sqrt(sum64(inputs[0].ravel(), True))


def _dot_kernel(inputs, out, attrs):
    # numpy's BLAS call drops the GIL; `out=` writes the product in place, 0-d out included.
    # A transposed operand is a view: BLAS reads it transposed without a copy.
    a, b = inputs
    if attrs.get("transpose_a"):
        a = a.T
    if attrs.get("transpose_b"):
        b = b.T
    np.dot(a, b, out=out)


KERNELS = {
    "ones": _fill_kernel(1.0),
    "zeros": _fill_kernel(0.0),
    "full": _full_kernel,
    "uniform": _sampler_kernel("uniform"),
    "normal": _sampler_kernel("normal"),
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
    **TENSOR_KERNELS,
    **CONV_KERNELS,
    **POOL_KERNELS,
    **NN_KERNELS,
}
KERNELS["graph"] = graph_kernel(KERNELS, built=dict(KERNELS))

assert set(KERNELS) == set(OPS), set(OPS) ^ set(KERNELS)

def set_blas_threads(n: int) -> None:
    """Limit the threads of every BLAS numpy has loaded (OpenBLAS, MKL, ...) to n, process-wide
    and until changed again (threadpoolctl's limit outside a `with` is never undone)."""
    threadpoolctl.threadpool_limits(limits=int(n), user_api="blas")
