"""CPU kernels of the convolutions: `conv2d`, `conv2d_grad_data`, `conv2d_grad_weight`.

All three are matrix products on BLAS over an im2col buffer. For a chunk of B images, `_im2col`
lays the padded windows out as `cols` (C*kh*kw, B*Ho*Wo): row (c, p, q), column (image, output
position). Then, with Wm the weight as (F, C*kh*kw) and G the output gradient as (F, B*Ho*Wo):
- forward: Y = Wm @ cols, scattered into out (N, F, Ho, Wo) (or, when B is 1, written there);
- data gradient: cols = Wm^T @ G, summed back into the image by `_col2im`;
- weight gradient: Wm_grad += G @ cols^T, chunk by chunk.

Assumptions (as `realexec.cpu.kernels`): inputs and out are C-contiguous float32 or float64,
shapes and attrs were checked at issue. The im2col loops are @njit(nogil=True) and
single-threaded; np.dot runs numpy's BLAS, which drops the GIL. Chunks hold about
`CHUNK_BYTES` of columns, so a chunk's columns are still in cache when BLAS reads them; the
buffers are per thread (W workers convolve at once) and reused from call to call.
"""

from __future__ import annotations

import math
import threading

import numpy as np
from numba import njit

_jit = njit(nogil=True, cache=True, error_model="numpy")

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


def _geometry(attrs):
    (kh, kw), (sh, sw), (ph, pw) = (tuple(attrs[k]) for k in ("kernel", "stride", "pad"))
    return int(kh), int(kw), int(sh), int(sw), int(ph), int(pw)


def _chunk(images, depth, span, itemsize):
    return max(1, min(images, CHUNK_BYTES // max(1, depth * span * itemsize)))


def _contiguous(inputs):
    # the loops are compiled for C-contiguous arrays; a contiguous input is passed unchanged
    return (np.ascontiguousarray(a) for a in inputs)


def _conv2d_kernel(inputs, out, attrs):
    x, w = _contiguous(inputs)
    kh, kw, sh, sw, ph, pw = geo = _geometry(attrs)
    n, f, ho, wo = out.shape
    depth, span = math.prod(w.shape[1:]), ho * wo
    if out.size == 0 or depth == 0:
        out.fill(0)
        return
    weights = w.reshape(f, depth)
    y = out.reshape(n, f, span)
    step = _chunk(n, depth, span, x.itemsize)
    for n0 in range(0, n, step):
        nb = min(step, n - n0)
        cols = _workspace("cols", depth * nb * span, x.dtype).reshape(depth, nb * span)
        _im2col(x, n0, nb, *geo, ho, wo, cols)
        if nb == 1:
            np.dot(weights, cols, out=y[n0])
        else:
            rows = _workspace("rows", f * nb * span, x.dtype).reshape(f, nb * span)
            np.dot(weights, cols, out=rows)
            _scatter_rows(rows, n0, nb, y)


def _grad_rows(g3, n0, nb):
    """The output gradient of images n0:n0+nb as (F, nb*S): a view when nb is 1."""
    if nb == 1:
        return g3[n0]
    f, span = g3.shape[1], g3.shape[2]
    rows = _workspace("rows", f * nb * span, g3.dtype).reshape(f, nb * span)
    _gather_rows(g3, n0, nb, rows)
    return rows


def _conv2d_grad_data_kernel(inputs, out, attrs):
    g, w = _contiguous(inputs)
    geo = _geometry(attrs)
    n, f, ho, wo = g.shape
    depth, span = math.prod(w.shape[1:]), ho * wo
    if out.size == 0 or depth == 0 or span == 0 or f == 0:
        out.fill(0)
        return
    weights_t = w.reshape(f, depth).T
    g3 = g.reshape(n, f, span)
    step = _chunk(n, depth, span, g.itemsize)
    for n0 in range(0, n, step):
        nb = min(step, n - n0)
        cols = _workspace("cols", depth * nb * span, g.dtype).reshape(depth, nb * span)
        np.dot(weights_t, _grad_rows(g3, n0, nb), out=cols)
        _col2im(cols, n0, nb, *geo, ho, wo, out)


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
    step = _chunk(n, depth, span, x.itemsize)
    for n0 in range(0, n, step):
        nb = min(step, n - n0)
        cols = _workspace("cols", depth * nb * span, x.dtype).reshape(depth, nb * span)
        _im2col(x, n0, nb, *geo, ho, wo, cols)
        np.dot(_grad_rows(g3, n0, nb), cols.T, out=grad if n0 == 0 else part)
        if n0 > 0:
            grad += part


CONV_KERNELS = {
    "conv2d": _conv2d_kernel,
    "conv2d_grad_data": _conv2d_grad_data_kernel,
    "conv2d_grad_weight": _conv2d_grad_weight_kernel,
}
