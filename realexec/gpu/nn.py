"""numba.cuda kernels of convolution and pooling, forward and backward (`KERNELS`, merged into
`GPU_KERNELS`), with the semantics of `asyncsim.nd.ops.nn`.

Same contract as `realexec.gpu.kernels`: `KERNELS[op](inputs, out, attrs, stream)` enqueues op
on stream; arrays are 4-d C-contiguous (N, C, H, W) device arrays of float32 or float64, and
kernels compile once per dtype on first use. The direct kernels, written for correctness first:
- conv2d, conv2d_grad_data, pool2d: one output element per thread (grid-stride), summing its
  window in the arrays' dtype (as `dot` does); the data gradient *gathers* from every output
  position whose window covers the element, so no atomics and the result is deterministic.
  A convolution with many filters and a long window (`im2col.worth_it`) runs instead, in all
  three directions, as im2col (or col2im) and the tiled matrix product (`realexec.gpu.im2col`);
- conv2d_grad_weight: one block per weight element, its threads taking the (n, ho, wo)
  positions in turn, summed in float64 through a shared-memory tree (the sums are long:
  N * Ho * Wo terms; under THREADS terms, one thread per weight element instead);
- pool2d_grad gathers too: an element gets the gradient of each window it is the first
  largest element of (max; padding counts as -inf), or g / (kh * kw) of each window covering
  it (avg, padding counted as zeros: MXNet's count_include_pad).
Units: elements.
"""

from __future__ import annotations

import math

from realexec.gpu import im2col
from realexec.gpu.im2col import covering as _covering
from realexec.gpu.im2col import nchw as _nchw
from realexec.gpu.launch import (
    MAX_BLOCKS,
    THREADS,
    blocks,
    cuda,
    float64,
    jit,
    lane_sum,
    lanes_of,
    launch,
    split_rows,
)


@jit(cache=True)
def _conv2d_kernel(x, w, out, sh, sw, ph, pw, zero):
    n_, f_, ho_, wo_ = out.shape
    c_, h_, w_ = x.shape[1], x.shape[2], x.shape[3]
    kh, kw = w.shape[2], w.shape[3]
    for e in range(cuda.grid(1), n_ * f_ * ho_ * wo_, cuda.gridsize(1)):
        wo = e % wo_
        ho = (e // wo_) % ho_
        f = (e // (wo_ * ho_)) % f_
        n = e // (wo_ * ho_ * f_)
        top, left = ho * sh - ph, wo * sw - pw
        acc = zero
        for c in range(c_):
            for i in range(kh):
                h = top + i
                if 0 <= h < h_:
                    for j in range(kw):
                        col = left + j
                        if 0 <= col < w_:
                            acc += x[n, c, h, col] * w[f, c, i, j]
        out[n, f, ho, wo] = acc


@jit(cache=True)
def _conv2d_grad_data_kernel(g, w, dx, sh, sw, ph, pw, zero):
    n_, c_, h_, w_ = dx.shape
    f_, ho_, wo_ = g.shape[1], g.shape[2], g.shape[3]
    kh, kw = w.shape[2], w.shape[3]
    for e in range(cuda.grid(1), n_ * c_ * h_ * w_, cuda.gridsize(1)):
        n, c, h, col = _nchw(e, c_, h_, w_)
        ho0, ho1 = _covering(h, ph, kh, sh, ho_)
        wo0, wo1 = _covering(col, pw, kw, sw, wo_)
        acc = zero
        for f in range(f_):
            for ho in range(ho0, ho1):
                i = h + ph - ho * sh
                for wo in range(wo0, wo1):
                    acc += g[n, f, ho, wo] * w[f, c, i, col + pw - wo * sw]
        dx[n, c, h, col] = acc


@jit(cache=True)
def _conv2d_grad_weight_kernel(x, g, dw, sh, sw, ph, pw, alone):
    """Each weight element is a row of N * Ho * Wo terms (see `launch.lanes_of`)."""
    buf = cuda.shared.array(THREADS, float64)
    first, step, lane, lanes = lanes_of(alone)
    f_, c_, kh, kw = dw.shape
    n_, h_, w_ = x.shape[0], x.shape[2], x.shape[3]
    ho_, wo_ = g.shape[2], g.shape[3]
    terms = n_ * ho_ * wo_
    for e in range(first, f_ * c_ * kh * kw, step):
        j = e % kw
        i = (e // kw) % kh
        c = (e // (kw * kh)) % c_
        f = e // (kw * kh * c_)
        acc = 0.0
        for t in range(lane, terms, lanes):
            wo = t % wo_
            ho = (t // wo_) % ho_
            n = t // (wo_ * ho_)
            h, col = ho * sh - ph + i, wo * sw - pw + j
            if 0 <= h < h_ and 0 <= col < w_:
                acc += float64(g[n, f, ho, wo]) * float64(x[n, c, h, col])
        total = lane_sum(buf, lane, acc, alone)
        if lane == 0:
            dw[f, c, i, j] = total


@jit(cache=True)
def _pool2d_kernel(x, out, kh, kw, sh, sw, ph, pw, is_max):
    n_, c_, ho_, wo_ = out.shape
    h_, w_ = x.shape[2], x.shape[3]
    for e in range(cuda.grid(1), n_ * c_ * ho_ * wo_, cuda.gridsize(1)):
        wo = e % wo_
        ho = (e // wo_) % ho_
        c = (e // (wo_ * ho_)) % c_
        n = e // (wo_ * ho_ * c_)
        top, left = ho * sh - ph, wo * sw - pw
        acc = -math.inf if is_max else 0.0
        for i in range(max(top, 0), min(top + kh, h_)):
            for j in range(max(left, 0), min(left + kw, w_)):
                v = x[n, c, i, j]
                if is_max:
                    if v > acc or v != v:
                        acc = v
                else:
                    acc += v
        out[n, c, ho, wo] = acc if is_max else acc / (kh * kw)


@jit(device=True, cache=True)
def _first_largest(x, n, c, top, left, kh, kw):
    """Row-major position in the window at (top, left) of its first largest value, padding
    counted as -inf (numpy's argmax of the padded window)."""
    h_, w_ = x.shape[2], x.shape[3]
    best = -math.inf
    found = 0
    for i in range(kh):
        for j in range(kw):
            h, col = top + i, left + j
            if 0 <= h < h_ and 0 <= col < w_:
                v = x[n, c, h, col]
                if v > best:
                    best = v
                    found = i * kw + j
    return found


@jit(cache=True)
def _pool2d_grad_kernel(x, g, dx, kh, kw, sh, sw, ph, pw, is_max):
    n_, c_, h_, w_ = dx.shape
    ho_, wo_ = g.shape[2], g.shape[3]
    for e in range(cuda.grid(1), n_ * c_ * h_ * w_, cuda.gridsize(1)):
        n, c, h, col = _nchw(e, c_, h_, w_)
        ho0, ho1 = _covering(h, ph, kh, sh, ho_)
        wo0, wo1 = _covering(col, pw, kw, sw, wo_)
        acc = 0.0
        for ho in range(ho0, ho1):
            for wo in range(wo0, wo1):
                top, left = ho * sh - ph, wo * sw - pw
                if not is_max:
                    acc += g[n, c, ho, wo]
                elif _first_largest(x, n, c, top, left, kh, kw) == (h - top) * kw + col - left:
                    acc += g[n, c, ho, wo]
        dx[n, c, h, col] = acc if is_max else acc / (kh * kw)


# ---- the ops ------------------------------------------------------------------------------------
def _geometry(attrs):
    (sh, sw), (ph, pw) = attrs["stride"], attrs["pad"]
    return int(sh), int(sw), int(ph), int(pw)


def _conv2d(inputs, out, attrs, stream):
    x, w = inputs
    if not out.size:
        return
    if im2col.worth_it(w.shape[0], w.size // max(w.shape[0], 1)):
        im2col.conv2d_gemm(x, w, out, _geometry(attrs), stream)
    else:
        launch(_conv2d_kernel, blocks(out.size, MAX_BLOCKS), THREADS, stream,
               x, w, out, *_geometry(attrs), out.dtype.type(0))


def _conv2d_grad_data(inputs, out, attrs, stream):
    g, w = inputs
    if out.size and im2col.worth_it(w.shape[0], w.size // max(w.shape[0], 1)):
        im2col.conv2d_grad_data_gemm(g, w, out, _geometry(attrs), stream)
    elif out.size:
        launch(_conv2d_grad_data_kernel, blocks(out.size, MAX_BLOCKS), THREADS, stream,
               g, w, out, *_geometry(attrs), out.dtype.type(0))


def _conv2d_grad_weight(inputs, out, attrs, stream):
    x, g = inputs
    if out.size and im2col.worth_it(out.shape[0], out.size // max(out.shape[0], 1)):
        im2col.conv2d_grad_weight_gemm(x, g, out, _geometry(attrs), stream)
    elif out.size:
        grid, alone = split_rows(out.size, x.shape[0] * g.shape[2] * g.shape[3])
        launch(_conv2d_grad_weight_kernel, grid, THREADS, stream, x, g, out, *_geometry(attrs),
               alone)


def _pool(attrs):
    (kh, kw) = attrs["kernel"]
    return (int(kh), int(kw), *_geometry(attrs), attrs["pool_type"] == "max")


def _pool2d(inputs, out, attrs, stream):
    if out.size:
        launch(_pool2d_kernel, blocks(out.size, MAX_BLOCKS), THREADS, stream,
               inputs[0], out, *_pool(attrs))


def _pool2d_grad(inputs, out, attrs, stream):
    x, g = inputs
    if out.size:
        launch(_pool2d_grad_kernel, blocks(out.size, MAX_BLOCKS), THREADS, stream,
               x, g, out, *_pool(attrs))


KERNELS = {
    "conv2d": _conv2d,
    "conv2d_grad_data": _conv2d_grad_data,
    "conv2d_grad_weight": _conv2d_grad_weight,
    "pool2d": _pool2d,
    "pool2d_grad": _pool2d_grad,
}
