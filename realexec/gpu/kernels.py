"""The GPU half of realexec's op table: launches of numba.cuda kernels for the ops of
asyncsim.nd.ops.

`GPU_KERNELS[op](inputs, out, attrs, stream)` *enqueues* op `op` on `stream` and returns at
once: inputs are device arrays on the stream's device, `out` is preallocated with the shape and
dtype that `asyncsim.nd.ops.infer` gives (for setitem/setitem_scalar `out` is inputs[0], written
in place). 'array' and 'copyto' have no kernel: they are the `to_device`/`to_host` copies the
engine issues on the copy stream; 'copy', 'slice' and same-shape 'setitem' are device-to-device
memcpys. Dtypes: float32 and float64 (kernels compile once per dtype, on first use).

The elementwise, fill, random and reduction kernels are in `loops` (grid-stride loops over
flattened, C-contiguous arrays, so a launch's grid is capped: THREADS per block, at most
MAX_BLOCKS blocks, whatever the size). Choices to know:
- elementwise: one kernel per arity, the op picked by a code; broadcasting handles any shapes
  whose coalesced pattern has <= 4 dims (`_broadcast_layout` merges the dims that index both
  inputs alike, down to the kernel's 4).
- sum/mean/norm accumulate in float64 for both dtypes: two launches (per-block partial sums
  into a per-stream buffer, then one block into the 0-d output).
- dot: a register-blocked tiled product (BM x BN output tile per block, TM x TN per thread,
  k staged BK deep in double-buffered shared memory), accumulating in the inputs' dtype; 1-d
  operands are reshaped to a row or column, transposed ones (attrs transpose_a/transpose_b)
  are copied transposed into scratch, or are strided views when small (`matmul.transposed`).
  Its grid is 1-d (tiles numbered in groups of GROUP tile rows), so no grid-y limit applies.
  Products of fewer than MIN_TILES tiles (small or skinny: they would leave SMs idle) use a
  TILE x TILE one-output-per-thread kernel.
- uniform/normal: seeded inside the kernel from attrs['seed'] (see `loops`); the states
  buffer is cached per stream.
- the simulator runs one kernel at a time (numba's limitation), so launches take a lock there
  (`realexec.gpu.launch`, shared with the modules below).
The ops of training and CNNs have kernels in modules of their own, merged into GPU_KERNELS:
`tensor` (sigmoid, tanh, relu_grad, cast, reshape, assign, sgd_update, sum_axis, argmax), `nn`
(convolution, pooling), `norm` (softmax family, cross-entropy, batch norm) and `graph` (a
hybridized block's ops in order on one stream); `equal` and `broadcast_to` are here.
Kernels must be launched with the stream's device current (`device_context(i)`). Devices,
copies and events live in `runtime`, pools in `memory`; both are re-exported here: the engine
imports this.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from math import prod

import numpy as np

from realexec.gpu import graph as _graph
from realexec.gpu import nn as _nn
from realexec.gpu import norm as _norm
from realexec.gpu import tensor as _tensor
from realexec.gpu.launch import MAX_BLOCKS, PART_BLOCKS, THREADS
from realexec.gpu.launch import SIM as _SIM
from realexec.gpu.launch import blocks as _blocks
from realexec.gpu.launch import flat as _flat
from realexec.gpu.launch import launch as _launch
from realexec.gpu.loops import (
    ADD,
    DIV,
    EQUAL,
    MAX,
    MEAN,
    MUL,
    NORM,
    RDIV,
    RIGHT,
    RSUB,
    SUB,
    SUM,
    _binary_kernel,
    _broadcast_kernel,
    _fill_kernel,
    _random_kernel,
    _reduce_final_kernel,
    _reduce_partial_kernel,
    _scalar_kernel,
)
from realexec.gpu.matmul import matmul_launch, transposed
from realexec.gpu.memory import (  # noqa: F401 -- re-exported: the engine's one import
    DevicePool,
    PerStream,
    PinnedPool,
    device_pointer,
    size_class,
)
from realexec.gpu.runtime import (  # noqa: F401 -- re-exported: the engine's one import
    available,
    cuda,
    device_context,
    device_error,
    lane_context,
    on_simulator,
    record_event,
    to_device,
    to_host,
    wait_event,
)

if cuda is not None:
    from realexec.gpu.loops import xoroshiro128p_dtype

# ---- launching (_launch, _blocks, _flat: realexec.gpu.launch) --------------------------------
_RNG_STATES = PerStream(PART_BLOCKS * THREADS, xoroshiro128p_dtype if cuda else None)
_PARTIALS = PerStream(PART_BLOCKS, np.float64)


def _fill(out, value, stream) -> None:
    flat = _flat(out)
    if flat.size:
        _launch(_fill_kernel, _blocks(flat.size, MAX_BLOCKS), THREADS, stream,
                flat, out.dtype.type(value))


def _broadcast_layout(shape, a_shape, b_shape):
    """(shape, a_strides, b_strides) in elements, 4 dims, with runs of dims that index both
    inputs alike merged, so that most broadcasts become 1-3 dims."""
    ndim = len(shape)

    def strides(s):
        s = (1,) * (ndim - len(s)) + tuple(s)
        out, acc = [0] * ndim, 1
        for d in reversed(range(ndim)):
            out[d] = acc if s[d] != 1 else 0
            acc *= s[d]
        return out

    dims = []
    for n, sa, sb in zip(shape, strides(a_shape), strides(b_shape), strict=True):
        if n == 1:
            continue
        if dims and dims[-1][1] == sa * n and dims[-1][2] == sb * n:
            dims[-1] = (dims[-1][0] * n, sa, sb)
        else:
            dims.append((n, sa, sb))
    if len(dims) > 4:
        raise NotImplementedError(f"broadcasting {a_shape} with {b_shape} needs {len(dims)} "
                                  f"dims after merging; the GPU kernel takes 4")
    dims = [(1, 0, 0)] * (4 - len(dims)) + dims
    return tuple(zip(*dims, strict=True))


def _launch_broadcast(out_flat, a, b, code, shape, a_shape, b_shape, stream) -> None:
    layout = _broadcast_layout(shape, a_shape, b_shape)
    _launch(_broadcast_kernel, _blocks(out_flat.size, MAX_BLOCKS), THREADS, stream,
            out_flat, a, b, code, *layout)


# ---- the ops -----------------------------------------------------------------------------
def _constant(value):
    return lambda inputs, out, attrs, stream: _fill(out, value(attrs), stream)


def _random(normal: bool):
    def run(inputs, out, attrs, stream):
        flat = _flat(out)
        if not flat.size:
            return
        if normal:
            offset, scale = attrs.get("loc", 0.0), attrs.get("scale", 1.0)
        else:
            offset = attrs.get("low", 0.0)
            scale = attrs.get("high", 1.0) - offset
        seed = np.uint64(int(attrs.get("seed", 0)) & 0xFFFFFFFFFFFFFFFF)
        args = (flat, _RNG_STATES.get(stream), seed, out.dtype.type(offset),
                out.dtype.type(scale), normal)
        quiet = warnings.catch_warnings() if _SIM else contextlib.nullcontext()
        with quiet:  # the simulator runs uint64 hashing on numpy scalars, which warn on wrap
            if _SIM:
                warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)
            _launch(_random_kernel, _blocks(flat.size, PART_BLOCKS), THREADS, stream, *args)
    return run


def _binary(code):
    def run(inputs, out, attrs, stream):
        a, b = inputs
        if not out.size:
            return
        if a.shape == b.shape == out.shape:
            _launch(_binary_kernel, _blocks(out.size, MAX_BLOCKS), THREADS, stream,
                    _flat(out), _flat(a), _flat(b), code)
        else:
            _launch_broadcast(_flat(out), _flat(a), _flat(b), code, out.shape, a.shape, b.shape,
                              stream)
    return run


def _with_scalar(code, scalar=None):
    def run(inputs, out, attrs, stream):
        if out.size:
            s = out.dtype.type(attrs["scalar"] if scalar is None else scalar)
            _launch(_scalar_kernel, _blocks(out.size, MAX_BLOCKS), THREADS, stream,
                    _flat(out), _flat(inputs[0]), s, code)
    return run


def _reduce(mode):
    def run(inputs, out, attrs, stream):
        a = _flat(inputs[0])
        if not a.size:
            _fill(out, math.nan if mode == MEAN else 0.0, stream)
            return
        blocks = _blocks(a.size, PART_BLOCKS)
        partials = _PARTIALS.get(stream)
        _launch(_reduce_partial_kernel, blocks, THREADS, stream, a, partials, mode == NORM)
        _launch(_reduce_final_kernel, 1, THREADS, stream, partials, blocks, _flat(out), mode,
                float(a.size))
    return run


def _dot(inputs, out, attrs, stream):
    a, b = inputs
    if attrs.get("transpose_a"):
        a = transposed(a, stream, 0)
    if attrs.get("transpose_b"):
        b = transposed(b, stream, 1)
    a2 = a.reshape(1, a.shape[0]) if a.ndim == 1 else a
    b2 = b.reshape(b.shape[0], 1) if b.ndim == 1 else b
    n, m = a2.shape[0], b2.shape[1]
    if not n * m:
        return
    if not a2.shape[1]:
        _fill(out, 0.0, stream)
        return
    kernel, grid, block = matmul_launch(n, m)
    _launch(kernel, grid, block, stream, a2, b2, out.reshape(n, m), out.dtype.type(0))


def _rows(arr, attrs):
    """Rows start:stop of arr's first axis, as a flat contiguous view."""
    row = prod(arr.shape[1:])
    return _flat(arr)[attrs["start"] * row:attrs["stop"] * row]


def _copy(inputs, out, attrs, stream):
    if out.size:
        _flat(out).copy_to_device(_flat(inputs[0]), stream=stream or 0)


def _slice(inputs, out, attrs, stream):
    if out.size:
        _flat(out).copy_to_device(_rows(inputs[0], attrs), stream=stream or 0)


def _setitem(inputs, out, attrs, stream):
    src = inputs[1]
    target = _rows(out, attrs)
    if not target.size:
        return
    if src.size == target.size:  # a valid broadcast of equal size is the same flat layout
        target.copy_to_device(_flat(src), stream=stream or 0)
    else:
        shape = (attrs["stop"] - attrs["start"],) + tuple(out.shape[1:])
        _launch_broadcast(target, target, _flat(src), RIGHT, shape, shape, src.shape, stream)


def _setitem_scalar(inputs, out, attrs, stream):
    _fill(_rows(out, attrs), attrs["scalar"], stream)


def _broadcast_to(inputs, out, attrs, stream):
    a = inputs[0]
    if out.size:
        _launch_broadcast(_flat(out), _flat(out), _flat(a), RIGHT, out.shape, out.shape, a.shape,
                          stream)


GPU_KERNELS = {
    "ones": _constant(lambda attrs: 1.0),
    "zeros": _constant(lambda attrs: 0.0),
    "full": _constant(lambda attrs: attrs["value"]),
    "uniform": _random(normal=False),
    "normal": _random(normal=True),
    "add": _binary(ADD),
    "sub": _binary(SUB),
    "mul": _binary(MUL),
    "div": _binary(DIV),
    "add_scalar": _with_scalar(ADD),
    "sub_scalar": _with_scalar(SUB),
    "rsub_scalar": _with_scalar(RSUB),
    "mul_scalar": _with_scalar(MUL),
    "div_scalar": _with_scalar(DIV),
    "rdiv_scalar": _with_scalar(RDIV),
    "relu": _with_scalar(MAX, scalar=0.0),
    "copy": _copy,
    "dot": _dot,
    "sum": _reduce(SUM),
    "mean": _reduce(MEAN),
    "norm": _reduce(NORM),
    "slice": _slice,
    "setitem": _setitem,
    "setitem_scalar": _setitem_scalar,
    "equal": _binary(EQUAL),
    "broadcast_to": _broadcast_to,
    **_tensor.KERNELS,
    **_nn.KERNELS,
    **_norm.KERNELS,
}
GPU_KERNELS["graph"] = _graph.graph_kernel(GPU_KERNELS)
