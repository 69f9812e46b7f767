"""CPU kernels of the convolutions: `conv2d`, `conv2d_grad_data`, `conv2d_grad_weight`.

All three are matrix products on BLAS over an im2col buffer. For a chunk of B images, `_im2col`
lays the padded windows out as `cols` (C*kh*kw, B*Ho*Wo): row (c, p, q), column (image, output
position). Then, with Wm the weight as (F, C*kh*kw) and G the output gradient as (F, B*Ho*Wo):
- forward: Y = Wm @ cols, scattered into out (N, F, Ho, Wo) (or, when B is 1, written there);
- data gradient: cols = Wm^T @ G, summed back into the image by `_col2im`;
- weight gradient: Wm_grad += G @ cols^T, chunk by chunk.

Assumptions (as `realexec.cpu.kernels`): inputs and out are C-contiguous float32 or float64,
shapes and attrs were checked at issue. Chunks hold about `CHUNK_BYTES` of columns, so a chunk's
columns are still in cache when BLAS reads them; the buffers are per thread (W workers convolve
at once) and reused from call to call.

The GIL: each kernel is one compiled call (`_forward`, `_backward_data`, `_backward_weight`)
that runs every chunk, im2col and product alike, with numpy's BLAS called by address
(`realexec.cpu.blas`, as the compiled worker multiplies). So a convolution takes the GIL once, to
start, and once to return. Written as Python over the chunks, with `np.dot` and a compiled im2col
per chunk, it took the GIL back at every chunk, and each time waited for a frontend running
Python (up to the 5 ms switch interval): beside a busy thread a (64, 64, 28, 28) layer took
15-18x its time, one compiled call 1.09-1.20x (`benchmarks/conv.py --frontend`, 2-core Xeon VM).
That Python form stays where numpy's BLAS cannot be called by address.
"""

from __future__ import annotations

import math
import threading

import numpy as np
from numba import njit

from realexec.cpu.blas import addresses
from realexec.engine.atomics import gemm

_jit = njit(nogil=True, cache=True, error_model="numpy")
BLAS = addresses()  # (sgemm, dgemm) by address, or None: the kernels then loop in Python

# Bytes of im2col columns per chunk: small enough to stay in L2/L3 between the copy and the
# product, large enough that one product amortises BLAS's call overhead.
CHUNK_BYTES = 1 << 20

_local = threading.local()


def _workspace(slot: str, size: int, dtype) -> np.ndarray:
    """A per-thread 1-d buffer of at least `size` elements of `dtype`, kept for the next call."""
    buffers = _local.__dict__.setdefault("buffers", {})
    key = (slot, np.dtype(dtype))
    buf = buffers.get(key)
    if buf is None or buf.size < size:
        buf = np.empty(max(size, 1), dtype)
        buffers[key] = buf
    return buf[:size]


@_jit
def _im2col(x, n0, nb, kh, kw, sh, sw, ph, pw, ho, wo, cols):
    """cols[(c*kh + p)*kw + q, b*ho*wo + i*wo + j] = padded x[n0+b, c, i*sh + p, j*sw + q].
    Each image plane is first copied into a zero-bordered buffer, so the copy loops that follow
    need no bounds tests (and vectorise when the stride is 1)."""
    channels, h, w = x.shape[1], x.shape[2], x.shape[3]
    padded = np.zeros((h + 2 * ph, w + 2 * pw), x.dtype)
    span = ho * wo
    for b in range(nb):
        for c in range(channels):
            for y in range(h):
                for z in range(w):
                    padded[ph + y, pw + z] = x[n0 + b, c, y, z]
            for p in range(kh):
                for q in range(kw):
                    r = (c * kh + p) * kw + q
                    for i in range(ho):
                        at = b * span + i * wo
                        hi = i * sh + p
                        if sw == 1:
                            for j in range(wo):
                                cols[r, at + j] = padded[hi, j + q]
                        else:
                            for j in range(wo):
                                cols[r, at + j] = padded[hi, j * sw + q]


@_jit
def _col2im(cols, n0, nb, kh, kw, sh, sw, ph, pw, ho, wo, out):
    """The adjoint of `_im2col`: out[n0:n0+nb] = the sum of cols over the windows, summed in a
    zero-bordered buffer whose border (the padding) is then dropped."""
    channels, h, w = out.shape[1], out.shape[2], out.shape[3]
    padded = np.empty((h + 2 * ph, w + 2 * pw), out.dtype)
    span = ho * wo
    for b in range(nb):
        for c in range(channels):
            padded[:, :] = 0
            for p in range(kh):
                for q in range(kw):
                    r = (c * kh + p) * kw + q
                    for i in range(ho):
                        at = b * span + i * wo
                        hi = i * sh + p
                        if sw == 1:
                            for j in range(wo):
                                padded[hi, j + q] += cols[r, at + j]
                        else:
                            for j in range(wo):
                                padded[hi, j * sw + q] += cols[r, at + j]
            for y in range(h):
                for z in range(w):
                    out[n0 + b, c, y, z] = padded[ph + y, pw + z]


@_jit
def _gather_rows(g, n0, nb, rows):
    """rows (F, nb*S) = g[n0:n0+nb] (nb, F, S) with the image axis moved inside."""
    features, span = g.shape[1], g.shape[2]
    for b in range(nb):
        for f in range(features):
            rows[f, b * span:(b + 1) * span] = g[n0 + b, f]


@_jit
def _scatter_rows(rows, n0, nb, out):
    """The inverse of `_gather_rows`: out[n0:n0+nb] (nb, F, S) = rows (F, nb*S)."""
    features, span = out.shape[1], out.shape[2]
    for b in range(nb):
        for f in range(features):
            out[n0 + b, f] = rows[f, b * span:(b + 1) * span]


# -- the kernels as one compiled call each (BLAS by address: no GIL between chunks) ----------------
@_jit
def _columns(x, n0, nb, kh, kw, sh, sw, ph, pw, ho, wo, cols):
    """im2col of images n0:n0+nb into the front of the flat buffer `cols`, as (depth, nb*S)."""
    depth, width = x.shape[1] * kh * kw, nb * ho * wo
    c = cols[:depth * width].reshape(depth, width)
    _im2col(x, n0, nb, kh, kw, sh, sw, ph, pw, ho, wo, c)
    return c


@_jit
def _rows_of(g3, n0, nb, rows):
    """The output gradient of images n0:n0+nb as (F, nb*S): a view when nb is 1, else gathered
    into the front of the flat buffer `rows`."""
    if nb == 1:
        return g3[n0]
    f, span = g3.shape[1], g3.shape[2]
    out = rows[:f * nb * span].reshape(f, nb * span)
    _gather_rows(g3, n0, nb, out)
    return out


@_jit
def _forward(x, weights, y, kh, kw, sh, sw, ph, pw, ho, wo, step, cols, rows, blas, one):
    """y (N, F, S) = the convolution of x by weights (F, depth), `step` images a chunk."""
    n, f, depth = x.shape[0], weights.shape[0], weights.shape[1]
    for n0 in range(0, n, step):
        nb = min(step, n - n0)
        width = nb * ho * wo
        c = _columns(x, n0, nb, kh, kw, sh, sw, ph, pw, ho, wo, cols)
        target = y[n0] if nb == 1 else rows[:f * width].reshape(f, width)
        gemm(blas, 0, 0, f, width, depth, one, np.int64(weights.ctypes.data), depth,
             np.int64(c.ctypes.data), width, np.int64(target.ctypes.data), width)
        if nb > 1:
            _scatter_rows(target, n0, nb, y)


@_jit
def _backward_data(g3, weights, out, kh, kw, sh, sw, ph, pw, ho, wo, step, cols, rows, blas,
                   one):
    """out (N, C, H, W) = the data gradient for g3 (N, F, S): weights^T @ g, then col2im."""
    n, f, depth = g3.shape[0], weights.shape[0], weights.shape[1]
    for n0 in range(0, n, step):
        nb = min(step, n - n0)
        width = nb * ho * wo
        c = cols[:depth * width].reshape(depth, width)
        src = _rows_of(g3, n0, nb, rows)
        gemm(blas, 1, 0, depth, width, f, one, np.int64(weights.ctypes.data), depth,
             np.int64(src.ctypes.data), width, np.int64(c.ctypes.data), width)
        _col2im(c, n0, nb, kh, kw, sh, sw, ph, pw, ho, wo, out)


@_jit
def _backward_weight(x, g3, grad, part, kh, kw, sh, sw, ph, pw, ho, wo, step, cols, rows,
                     blas, one):
    """grad (F, depth) = the sum over chunks of g @ cols^T (`part` holds each after the first)."""
    n, f, depth = x.shape[0], grad.shape[0], grad.shape[1]
    for n0 in range(0, n, step):
        nb = min(step, n - n0)
        width = nb * ho * wo
        c = _columns(x, n0, nb, kh, kw, sh, sw, ph, pw, ho, wo, cols)
        src = _rows_of(g3, n0, nb, rows)
        target = grad if n0 == 0 else part
        gemm(blas, 0, 1, f, depth, width, one, np.int64(src.ctypes.data), width,
             np.int64(c.ctypes.data), width, np.int64(target.ctypes.data), depth)
        if n0 > 0:
            grad += part


def _geometry(attrs):
    (kh, kw), (sh, sw), (ph, pw) = (tuple(attrs[k]) for k in ("kernel", "stride", "pad"))
    return int(kh), int(kw), int(sh), int(sw), int(ph), int(pw)


def _plan(images, depth, features, span, dtype):
    """(images per chunk, the flat columns and rows buffers a chunk needs, and the compiled
    call's BLAS address and 1.0 of `dtype`, or None where the chunks loop in Python)."""
    itemsize = np.dtype(dtype).itemsize
    step = max(1, min(images, CHUNK_BYTES // max(1, depth * span * itemsize)))
    cols = _workspace("cols", depth * step * span, dtype)
    rows = _workspace("rows", features * step * span, dtype)
    compiled = None
    if BLAS is not None and dtype in (np.float32, np.float64):
        compiled = BLAS[0 if dtype == np.float32 else 1], np.dtype(dtype).type(1.0)
    return step, cols, rows, compiled


def _contiguous(inputs):
    # the loops are compiled for C-contiguous arrays; a contiguous input is passed unchanged
    return (np.ascontiguousarray(a) for a in inputs)


def _conv2d_kernel(inputs, out, attrs):
    x, w = _contiguous(inputs)
    geo = _geometry(attrs)
    n, f, ho, wo = out.shape
    depth, span = math.prod(w.shape[1:]), ho * wo
    if out.size == 0 or depth == 0:
        out.fill(0)
        return
    weights, y = w.reshape(f, depth), out.reshape(n, f, span)
    step, cols, rows, compiled = _plan(n, depth, f, span, x.dtype)
    if compiled is not None:
        _forward(x, weights, y, *geo, ho, wo, step, cols, rows, *compiled)
        return
    for n0 in range(0, n, step):
        nb = min(step, n - n0)
        c = _columns(x, n0, nb, *geo, ho, wo, cols)
        if nb == 1:
            np.dot(weights, c, out=y[n0])
        else:
            target = rows[:f * nb * span].reshape(f, nb * span)
            np.dot(weights, c, out=target)
            _scatter_rows(target, n0, nb, y)


def _conv2d_grad_data_kernel(inputs, out, attrs):
    g, w = _contiguous(inputs)
    geo = _geometry(attrs)
    n, f, ho, wo = g.shape
    depth, span = math.prod(w.shape[1:]), ho * wo
    if out.size == 0 or depth == 0 or span == 0 or f == 0:
        out.fill(0)
        return
    g3, weights = g.reshape(n, f, span), w.reshape(f, depth)
    step, cols, rows, compiled = _plan(n, depth, f, span, g.dtype)
    if compiled is not None:
        _backward_data(g3, weights, out, *geo, ho, wo, step, cols, rows, *compiled)
        return
    for n0 in range(0, n, step):
        nb = min(step, n - n0)
        c = cols[:depth * nb * span].reshape(depth, nb * span)
        np.dot(weights.T, _rows_of(g3, n0, nb, rows), out=c)
        _col2im(c, n0, nb, *geo, ho, wo, out)


def _conv2d_grad_weight_kernel(inputs, out, attrs):
    x, g = _contiguous(inputs)
    geo = _geometry(attrs)
    n, f, ho, wo = g.shape
    depth, span = math.prod(out.shape[1:]), ho * wo
    grad = out.reshape(f, depth)
    if out.size == 0 or n == 0 or span == 0:
        out.fill(0)
        return
    g3 = g.reshape(n, f, span)
    part = np.empty_like(grad) if n > 1 else grad
    step, cols, rows, compiled = _plan(n, depth, f, span, x.dtype)
    if compiled is not None:
        _backward_weight(x, g3, grad, part, *geo, ho, wo, step, cols, rows, *compiled)
        return
    for n0 in range(0, n, step):
        nb = min(step, n - n0)
        c = _columns(x, n0, nb, *geo, ho, wo, cols)
        np.dot(_rows_of(g3, n0, nb, rows), c.T, out=grad if n0 == 0 else part)
        if n0 > 0:
            grad += part


CONV_KERNELS = {
    "conv2d": _conv2d_kernel,
    "conv2d_grad_data": _conv2d_grad_data_kernel,
    "conv2d_grad_weight": _conv2d_grad_weight_kernel,
}
