"""CPU kernels of pooling: `pool2d` (max or average) and its gradient `pool2d_grad`.

Semantics as `asyncsim.nd.ops.nn`: padding counts as -inf for max and as zeros in the average,
which always divides by kh * kw (MXNet's count_include_pad); the max gradient goes to the first
largest element of each window in row-major order; a window lying wholly in the padding gives
-inf (max) and passes no gradient on.

Assumptions (as `realexec.cpu.kernels`): C-contiguous float32/float64 arrays, shapes and attrs
checked at issue; the loops are @njit(nogil=True) and single-threaded, one (image, channel)
plane at a time, and visit only the window positions inside the image (no padded copy). A NaN in
a window makes its max NaN, as numpy's max does.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_jit = njit(nogil=True, cache=True, error_model="numpy")


@_jit
def _pool(x, is_max, kh, kw, sh, sw, ph, pw, out):
    """out[n, c, i, j] = max or mean of x[n, c] over window (i, j) of the padded plane."""
    planes, h, w = x.shape[0] * x.shape[1], x.shape[2], x.shape[3]
    ho, wo = out.shape[2], out.shape[3]
    src = x.reshape(planes, h, w)
    dst = out.reshape(planes, ho, wo)
    scale = 1.0 / (kh * kw)
    for k in range(planes):
        for i in range(ho):
            y0 = max(i * sh - ph, 0)
            y1 = min(i * sh - ph + kh, h)
            for j in range(wo):
                z0 = max(j * sw - pw, 0)
                z1 = min(j * sw - pw + kw, w)
                if is_max:
                    best = -np.inf
                    for y in range(y0, y1):
                        for z in range(z0, z1):
                            v = src[k, y, z]
                            # once best is NaN, v > best is False: the NaN stays
                            if v > best or v != v:
                                best = v
                    dst[k, i, j] = best
                else:
                    total = 0.0
                    for y in range(y0, y1):
                        for z in range(z0, z1):
                            total += src[k, y, z]
                    dst[k, i, j] = total * scale


@_jit
def _pool_grad(x, g, is_max, kh, kw, sh, sw, ph, pw, out):
    """out = the gradient of `_pool` for the output gradient g, summed over the windows."""
    planes, h, w = x.shape[0] * x.shape[1], x.shape[2], x.shape[3]
    ho, wo = g.shape[2], g.shape[3]
    src = x.reshape(planes, h, w)
    grad = g.reshape(planes, ho, wo)
    dst = out.reshape(planes, h, w)
    scale = 1.0 / (kh * kw)
    for k in range(planes):
        dst[k] = 0
        for i in range(ho):
            y0 = max(i * sh - ph, 0)
            y1 = min(i * sh - ph + kh, h)
            for j in range(wo):
                z0 = max(j * sw - pw, 0)
                z1 = min(j * sw - pw + kw, w)
                if is_max:
                    best = -np.inf
                    at_y = -1
                    at_z = -1
                    for y in range(y0, y1):
                        for z in range(z0, z1):
                            v = src[k, y, z]
                            if v > best or (v != v and best == best):
                                best = v
                                at_y = y
                                at_z = z
                    if at_y >= 0:
                        dst[k, at_y, at_z] += grad[k, i, j]
                else:
                    share = grad[k, i, j] * scale
                    for y in range(y0, y1):
                        for z in range(z0, z1):
                            dst[k, y, z] += share


def _geometry(attrs):
    (kh, kw), (sh, sw), (ph, pw) = (tuple(attrs[k]) for k in ("kernel", "stride", "pad"))
    return int(kh), int(kw), int(sh), int(sw), int(ph), int(pw)


def _pool2d_kernel(inputs, out, attrs):
    _pool(np.ascontiguousarray(inputs[0]), attrs["pool_type"] == "max", *_geometry(attrs), out)


def _pool2d_grad_kernel(inputs, out, attrs):
    x, g = (np.ascontiguousarray(a) for a in inputs)
    _pool_grad(x, g, attrs["pool_type"] == "max", *_geometry(attrs), out)


POOL_KERNELS = {
    "pool2d": _pool2d_kernel,
    "pool2d_grad": _pool2d_grad_kernel,
}
