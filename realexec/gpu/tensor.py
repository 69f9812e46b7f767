"""numba.cuda kernels of the tensor ops a training step adds: sigmoid, tanh, relu_grad, cast,
reshape, assign, sgd_update, sum_axis and argmax (`KERNELS`, merged into `GPU_KERNELS`).

Same contract as `realexec.gpu.kernels`: `KERNELS[op](inputs, out, attrs, stream)` enqueues op
on stream; arrays are C-contiguous device arrays of float32 or float64 (cast: one of each), and
each kernel compiles once per dtype, on first use. Choices:
- elementwise ops are grid-stride loops over flat arrays; reshape and assign are
  device-to-device copies (a C-order reshape keeps the flat order);
- sum_axis accumulates in float64. The input's dims are merged into runs of kept and of summed
  dims (at most 4 of each after merging); with many terms per output a block sums each output
  through a shared-memory tree, with few (under THREADS) a thread sums one output alone
  (`launch.lanes_of`); few outputs of very many terms (a convolution's bias gradient) are cut
  in parts (`launch.parts_of`), a block each, and the parts' float64 sums added in order;
- argmax scans its axis with one thread per output (axes are short: classes of a batch),
  keeping the first largest value, as numpy; indices come out as floats, as in MXNet.
Units: elements.
"""

from __future__ import annotations

import math
from math import prod

from realexec.gpu.launch import (
    F64,
    MAX_BLOCKS,
    SCRATCH,
    THREADS,
    blocks,
    cuda,
    flat,
    float64,
    jit,
    lane_sum,
    lanes_of,
    launch,
    parts_of,
    split_rows,
)

SIGMOID, TANH, CAST = range(3)
MAX_DIMS = 4  # kept (and summed) runs of dims a sum_axis kernel takes after merging


@jit(cache=True)
def _unary_kernel(out, a, code, one):
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        x = a[i]
        if code == SIGMOID:
            # `one` has a's dtype (an int literal would promote float32 to float64); this
            # form overflows to exactly 0 or 1, never to NaN
            out[i] = one / (one + math.exp(-x))
        elif code == TANH:
            out[i] = math.tanh(x)
        else:
            out[i] = x  # cast: the store converts


@jit(cache=True)
def _relu_grad_kernel(out, a, g):
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        if a[i] > 0:
            out[i] = g[i]
        else:
            out[i] = 0


@jit(cache=True)
def _sgd_kernel(w, g, lr, rescale, wd):
    for i in range(cuda.grid(1), w.shape[0], cuda.gridsize(1)):
        w[i] -= lr * (rescale * g[i] + wd * w[i])


@jit(device=True, cache=True)
def _offset(index, shape, strides):
    """The offset (elements) of the index-th position, C order, of a 4-dim shape/strides."""
    at = 0
    for d in range(MAX_DIMS - 1, -1, -1):
        at += (index % shape[d]) * strides[d]
        index //= shape[d]
    return at


@jit(cache=True)
def _sum_axis_kernel(out, a, kept, kept_strides, summed, summed_strides, terms, alone):
    """Each output is a row of `terms` terms (see `launch.lanes_of`)."""
    buf = cuda.shared.array(THREADS, float64)
    first, step, lane, lanes = lanes_of(alone)
    for o in range(first, out.shape[0], step):
        base = _offset(o, kept, kept_strides)
        acc = 0.0
        for t in range(lane, terms, lanes):
            acc += float64(a[base + _offset(t, summed, summed_strides)])
        total = lane_sum(buf, lane, acc, alone)
        if lane == 0:
            out[o] = total


@jit(cache=True)
def _sum_parts_kernel(partials, a, kept, kept_strides, summed, summed_strides, terms, parts):
    """partials[o * parts + p] = the sum of part p of output o's `terms` terms, a block each."""
    buf = cuda.shared.array(THREADS, float64)
    lane = cuda.threadIdx.x
    span = (terms + parts - 1) // parts
    for b in range(cuda.blockIdx.x, partials.shape[0], cuda.gridDim.x):
        o, part = b // parts, b % parts
        base = _offset(o, kept, kept_strides)
        acc = 0.0
        for t in range(part * span + lane, min(terms, part * span + span), THREADS):
            acc += float64(a[base + _offset(t, summed, summed_strides)])
        acc = lane_sum(buf, lane, acc, False)
        if lane == 0:
            partials[b] = acc


@jit(cache=True)
def _argmax_kernel(out, a, length, inner):
    for o in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        base = (o // inner) * length * inner + o % inner
        best = a[base]
        found = 0
        for j in range(1, length):
            v = a[base + j * inner]
            if v > best or (v != v and best == best):  # a NaN wins, as in numpy
                best = v
                found = j
        out[o] = found


def _sum_layout(shape, axes):
    """(kept, kept_strides, summed, summed_strides) for summing `shape` over `axes`: element
    strides of the C-contiguous input, with adjacent dims of one kind merged, each padded
    with (1, 0) to MAX_DIMS dims."""
    dims = {True: [], False: []}  # summed? -> [(size, stride)]
    stride, last = 1, None
    for d in reversed(range(len(shape))):
        n = shape[d]
        summed = d in axes
        if n != 1:
            runs = dims[summed]
            if last is summed and runs:  # adjacent to the previous dim of its kind: merge
                runs[0] = (runs[0][0] * n, runs[0][1])
            else:
                runs.insert(0, (n, stride))
            last = summed
        stride *= n
    for runs in dims.values():
        if len(runs) > MAX_DIMS:
            raise NotImplementedError(f"sum_axis: summing {shape} over {tuple(axes)} needs "
                                      f"{len(runs)} runs of dims; the GPU kernel takes {MAX_DIMS}")
        runs[:0] = [(1, 0)] * (MAX_DIMS - len(runs))
    kept, summed = dims[False], dims[True]
    return (tuple(n for n, _ in kept), tuple(s for _, s in kept),
            tuple(n for n, _ in summed), tuple(s for _, s in summed))


# ---- the ops ------------------------------------------------------------------------------------
def _unary(code):
    def run(inputs, out, attrs, stream):
        if out.size:
            a = inputs[0]
            launch(_unary_kernel, blocks(out.size, MAX_BLOCKS), THREADS, stream,
                   flat(out), flat(a), code, a.dtype.type(1))
    return run


def _relu_grad(inputs, out, attrs, stream):
    a, g = inputs
    if out.size:
        launch(_relu_grad_kernel, blocks(out.size, MAX_BLOCKS), THREADS, stream,
               flat(out), flat(a), flat(g))


def _copy_flat(inputs, out, attrs, stream):
    """reshape (a C-order copy keeps the flat order) and assign (out is inputs[0])."""
    src = inputs[-1]
    if out.size:
        flat(out).copy_to_device(flat(src), stream=stream or 0)


def _sgd_update(inputs, out, attrs, stream):
    w, g = inputs
    if w.size:
        scalar = w.dtype.type
        launch(_sgd_kernel, blocks(w.size, MAX_BLOCKS), THREADS, stream, flat(w), flat(g),
               scalar(attrs["lr"]), scalar(attrs.get("rescale", 1.0)),
               scalar(attrs.get("wd", 0.0)))


def _axes(attrs):
    axis = attrs["axis"]
    return (axis,) if isinstance(axis, int) else tuple(axis)


def _sum_axis(inputs, out, attrs, stream):
    a = inputs[0]
    if not out.size:
        return
    axes = _axes(attrs)
    terms = prod(a.shape[d] for d in axes)
    layout = _sum_layout(tuple(a.shape), set(axes))
    parts = parts_of(out.size, terms) if terms >= THREADS else 1
    if parts == 1:
        grid, alone = split_rows(out.size, terms)
        launch(_sum_axis_kernel, grid, THREADS, stream, flat(out), flat(a), *layout, terms, alone)
        return
    # few outputs of many terms (a convolution's bias gradient): each output's terms in parts,
    # a block each, summed into float64 partials, then the partials summed in part order
    partials = SCRATCH.view(stream, 0, (out.size, parts), F64)
    launch(_sum_parts_kernel, min(out.size * parts, MAX_BLOCKS), THREADS, stream,
           flat(partials), flat(a), *layout, terms, parts)
    grid, alone = split_rows(out.size, parts)
    launch(_sum_axis_kernel, grid, THREADS, stream, flat(out), flat(partials),
           *_sum_layout((out.size, parts), {1}), parts, alone)


def _argmax(inputs, out, attrs, stream):
    a = inputs[0]
    (axis,) = _axes(attrs)
    if not out.size:
        return
    length, inner = a.shape[axis], prod(a.shape[axis + 1:])
    if length == 0:
        raise ValueError(f"argmax: axis {axis} of shape {tuple(a.shape)} is empty")
    launch(_argmax_kernel, blocks(out.size, MAX_BLOCKS), THREADS, stream,
           flat(out), flat(a), length, inner)


KERNELS = {
    "sigmoid": _unary(SIGMOID),
    "tanh": _unary(TANH),
    "cast": _unary(CAST),
    "relu_grad": _relu_grad,
    "reshape": _copy_flat,
    "assign": _copy_flat,
    "sgd_update": _sgd_update,
    "sum_axis": _sum_axis,
    "argmax": _argmax,
}
