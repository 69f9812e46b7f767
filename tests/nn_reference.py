"""Plain-numpy references of the training and CNN ops, for checking the CPU and GPU kernels.

Each reference is written the obvious way (convolution and pooling by loops over the output
positions, statistics in float64), not the fast way, so that it shares no code or trick with
the kernels it checks. `reference(name, inputs, attrs)` computes op `name` with the attrs the
engine passes; every result is float64 (compare with a tolerance of the kernel's dtype).
"""

from __future__ import annotations

import numpy as np


def _f64(*arrays):
    return [np.asarray(a, np.float64) for a in arrays]


def _pad(x, pad, value=0.0):
    ph, pw = pad
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def _out_size(size, k, s, p):
    return (size + 2 * p - k) // s + 1


def _positions(image, kernel, stride, pad):
    """(i, j, rows, cols) of every window over the padded image: slices into the padded array."""
    (h, w), (kh, kw), (sh, sw), (ph, pw) = image, kernel, stride, pad
    for i in range(_out_size(h, kh, sh, ph)):
        for j in range(_out_size(w, kw, sw, pw)):
            yield i, j, slice(i * sh, i * sh + kh), slice(j * sw, j * sw + kw)


# -- nn ops ----------------------------------------------------------------------------------------
def conv2d(x, w, stride, pad):
    x, w = _f64(x, w)
    kernel = w.shape[2:]
    ho, wo = (_out_size(x.shape[2 + d], kernel[d], stride[d], pad[d]) for d in (0, 1))
    xp = _pad(x, pad)
    out = np.zeros((x.shape[0], w.shape[0], ho, wo))
    for i, j, rows, cols in _positions(x.shape[2:], kernel, stride, pad):
        out[:, :, i, j] = np.einsum("nckl,fckl->nf", xp[:, :, rows, cols], w)
    return out


def conv2d_grad_data(g, w, data_shape, stride, pad):
    g, w = _f64(g, w)
    n, c, h, wd = data_shape
    gxp = np.zeros((n, c, h + 2 * pad[0], wd + 2 * pad[1]))
    for i, j, rows, cols in _positions((h, wd), w.shape[2:], stride, pad):
        gxp[:, :, rows, cols] += np.einsum("nf,fckl->nckl", g[:, :, i, j], w)
    return gxp[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + wd]


def conv2d_grad_weight(x, g, weight_shape, stride, pad):
    x, g = _f64(x, g)
    xp = _pad(x, pad)
    gw = np.zeros(weight_shape)
    for i, j, rows, cols in _positions(x.shape[2:], weight_shape[2:], stride, pad):
        gw += np.einsum("nf,nckl->fckl", g[:, :, i, j], xp[:, :, rows, cols])
    return gw


def pool2d(x, pool_type, kernel, stride, pad):
    (x,) = _f64(x)
    n, c, h, w = x.shape
    xp = _pad(x, pad, -np.inf if pool_type == "max" else 0.0)
    out = np.zeros((n, c, _out_size(h, kernel[0], stride[0], pad[0]),
                    _out_size(w, kernel[1], stride[1], pad[1])))
    for i, j, rows, cols in _positions((h, w), kernel, stride, pad):
        window = xp[:, :, rows, cols]
        if pool_type == "max":
            out[:, :, i, j] = window.max(axis=(2, 3))
        else:
            out[:, :, i, j] = window.sum(axis=(2, 3)) / (kernel[0] * kernel[1])
    return out


def pool2d_grad(x, g, pool_type, kernel, stride, pad):
    """Max routes each window's gradient to its first largest element (row-major order);
    average spreads it evenly over the kh * kw positions, padding included."""
    x, g = _f64(x, g)
    n, c, h, w = x.shape
    xp = _pad(x, pad, -np.inf)
    gxp = np.zeros(xp.shape)
    for i, j, rows, cols in _positions((h, w), kernel, stride, pad):
        if pool_type == "avg":
            gxp[:, :, rows, cols] += g[:, :, i, j, None, None] / (kernel[0] * kernel[1])
            continue
        for b in range(n):
            for ch in range(c):
                p, q = np.unravel_index(np.argmax(xp[b, ch, rows, cols]), tuple(kernel))
                gxp[b, ch, rows.start + p, cols.start + q] += g[b, ch, i, j]
    return gxp[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + w]


def softmax(a, axis):
    (a,) = _f64(a)
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(a, axis):
    (a,) = _f64(a)
    shifted = a - a.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def softmax_grad(y, g, axis):
    y, g = _f64(y, g)
    return y * (g - (g * y).sum(axis=axis, keepdims=True))


def log_softmax_grad(y, g, axis):
    y, g = _f64(y, g)
    return g - np.exp(y) * g.sum(axis=axis, keepdims=True)


def _classes(label):
    return np.asarray(label).ravel().astype(np.int64)


def softmax_ce(logits, label):
    return -log_softmax(logits, 1)[np.arange(len(logits)), _classes(label)]


def softmax_ce_grad(logits, label, g):
    (g,) = _f64(g)
    p = softmax(logits, 1)
    p[np.arange(len(p)), _classes(label)] -= 1.0
    return p * g.ravel()[:, None]


def _channel_stats(x):
    """Axes reduced, the (1, C, 1, ...) shape, mean and biased variance per channel."""
    axes = tuple(i for i in range(x.ndim) if i != 1)
    shape = tuple(n if i == 1 else 1 for i, n in enumerate(x.shape))
    return axes, shape, x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)


def batch_norm(x, gamma, beta, eps):
    x, gamma, beta = _f64(x, gamma, beta)
    _, shape, mean, var = _channel_stats(x)
    return (x - mean) / np.sqrt(var + eps) * gamma.reshape(shape) + beta.reshape(shape)


def batch_norm_grad(x, gamma, g, eps):
    x, gamma, g = _f64(x, gamma, g)
    axes, shape, mean, var = _channel_stats(x)
    inv = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean) * inv
    return gamma.reshape(shape) * inv * (g - g.mean(axis=axes, keepdims=True)
                                         - xhat * (g * xhat).mean(axis=axes, keepdims=True))


def batch_norm_grad_gamma(x, g, eps):
    x, g = _f64(x, g)
    axes, _, mean, var = _channel_stats(x)
    return (g * (x - mean) / np.sqrt(var + eps)).sum(axis=axes)


def batch_norm_infer(x, gamma, beta, mean, var, eps):
    x, gamma, beta, mean, var = _f64(x, gamma, beta, mean, var)
    shape = tuple(n if i == 1 else 1 for i, n in enumerate(x.shape))
    return ((x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * gamma.reshape(shape)
            + beta.reshape(shape))


def bn_update(running, x, momentum, stat):
    running, x = _f64(running, x)
    _, _, mean, var = _channel_stats(x)
    return momentum * running + (1.0 - momentum) * (mean if stat == "mean" else var).ravel()


# -- tensor ops ------------------------------------------------------------------------------------
def dot(a, b, transpose_a=False, transpose_b=False):
    a, b = _f64(a, b)
    return np.dot(a.T if transpose_a else a, b.T if transpose_b else b)


def sgd_update(w, g, lr, rescale=1.0, wd=0.0):
    w, g = _f64(w, g)
    return w - lr * (rescale * g + wd * w)


def sigmoid(a):
    (a,) = _f64(a)
    return 0.5 * (1.0 + np.tanh(0.5 * a))


def _axis_tuple(axis):
    return (axis,) if isinstance(axis, int) else tuple(axis)


def reference(name, inputs, attrs):
    """Op `name` on `inputs` with the engine's `attrs`, as float64 (argmax: float indices)."""
    a = inputs
    geometry = {k: tuple(attrs[k]) for k in ("stride", "pad") if k in attrs}
    if name == "conv2d":
        return conv2d(*a, **geometry)
    if name == "conv2d_grad_data":
        return conv2d_grad_data(*a, tuple(attrs["data_shape"]), **geometry)
    if name == "conv2d_grad_weight":
        return conv2d_grad_weight(*a, tuple(attrs["weight_shape"]), **geometry)
    if name in ("pool2d", "pool2d_grad"):
        return globals()[name](*a, attrs["pool_type"], tuple(attrs["kernel"]), **geometry)
    if name in ("softmax", "log_softmax", "softmax_grad", "log_softmax_grad"):
        return globals()[name](*a, attrs["axis"])
    if name in ("softmax_ce", "softmax_ce_grad"):
        return globals()[name](*a)
    if name.startswith("batch_norm"):
        return globals()[name](*a, attrs["eps"])
    if name == "bn_update":
        return bn_update(*a, attrs["momentum"], attrs["stat"])
    if name == "dot":
        return dot(*a, attrs.get("transpose_a", False), attrs.get("transpose_b", False))
    if name == "sgd_update":
        return sgd_update(*a, attrs["lr"], attrs.get("rescale", 1.0), attrs.get("wd", 0.0))
    x = np.asarray(a[0], np.float64)
    if name == "equal":
        return (x == np.asarray(a[1], np.float64)).astype(np.float64)
    if name == "sigmoid":
        return sigmoid(x)
    if name == "tanh":
        return np.tanh(x)
    if name == "relu_grad":
        return np.where(x > 0, np.asarray(a[1], np.float64), 0.0)
    if name == "cast":
        return x
    if name == "sum_axis":
        return x.sum(axis=_axis_tuple(attrs["axis"]), keepdims=attrs.get("keepdims", False))
    if name == "argmax":
        (axis,) = _axis_tuple(attrs["axis"])
        found = np.argmax(x, axis=axis).astype(np.float64)
        return np.expand_dims(found, axis) if attrs.get("keepdims", False) else found
    if name == "broadcast_to":
        return np.broadcast_to(x, tuple(attrs["shape"])).copy()
    if name == "reshape":
        return x.reshape(tuple(attrs["shape"]))
    if name == "assign":
        return np.asarray(a[1], np.float64).copy()
    raise KeyError(f"no reference for op {name!r}")
