"""CPU kernels of the softmax family, softmax cross-entropy and batch norm
(`asyncsim.nd.ops.nn`; convolution is in `conv`, pooling in `pool`).

Layouts: a softmax along `axis` sees its input as (outer, K, inner), K the axis's length; batch
norm sees x as (N, C, S), C the channels (axis 1) and S the product of the axes after it.

Assumptions (as `realexec.cpu.kernels`): C-contiguous float32/float64 arrays, shapes and attrs
checked at issue (a label's value can only be checked here: softmax_ce raises ValueError naming
the op and the label). Loops are @njit(nogil=True) and single-threaded; sums, means and
variances accumulate in float64 and the variance is the biased one, from the mean in a second
pass (no cancellation). bn_update is in place: out is inputs[0].
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_jit = njit(nogil=True, cache=True, error_model="numpy")

SOFTMAX, LOG_SOFTMAX = 0, 1


@_jit
def _softmax(mode, a, out):
    """softmax (or log_softmax) of a (outer, K, inner) along axis 1."""
    outer, k_len, inner = a.shape
    top = np.empty(inner)
    total = np.empty(inner)
    for o in range(outer):
        top[:] = -np.inf
        total[:] = 0.0
        for k in range(k_len):
            for i in range(inner):
                top[i] = max(top[i], a[o, k, i])
        for k in range(k_len):
            for i in range(inner):
                e = math.exp(a[o, k, i] - top[i])
                total[i] += e
                if mode == SOFTMAX:
                    out[o, k, i] = e
        for k in range(k_len):
            for i in range(inner):
                if mode == SOFTMAX:
                    out[o, k, i] = out[o, k, i] / total[i]
                else:
                    out[o, k, i] = a[o, k, i] - top[i] - math.log(total[i])


@_jit
def _softmax_grad(mode, y, g, out):
    """softmax's gradient y * (g - sum(g * y)), or log_softmax's g - exp(y) * sum(g), of
    (outer, K, inner) arrays along axis 1, from the forward output y."""
    outer, k_len, inner = y.shape
    total = np.empty(inner)
    for o in range(outer):
        total[:] = 0.0
        for k in range(k_len):
            for i in range(inner):
                if mode == SOFTMAX:
                    total[i] += np.float64(g[o, k, i]) * y[o, k, i]
                else:
                    total[i] += g[o, k, i]
        for k in range(k_len):
            for i in range(inner):
                if mode == SOFTMAX:
                    out[o, k, i] = y[o, k, i] * (g[o, k, i] - total[i])
                else:
                    out[o, k, i] = g[o, k, i] - math.exp(y[o, k, i]) * total[i]


@_jit
def _first_bad_label(label, classes):
    """Index of the first label outside [0, classes) (NaN included), or -1."""
    for n in range(label.size):
        if not (label[n] >= 0 and label[n] < classes):
            return n
    return -1


@_jit
def _softmax_ce(logits, label, out):
    """out[n] = logsumexp(logits[n]) - logits[n, label[n]]; labels already checked."""
    for n in range(logits.shape[0]):
        row = logits[n]
        top = -np.inf
        for k in range(row.size):
            top = max(top, row[k])
        total = 0.0
        for k in range(row.size):
            total += math.exp(row[k] - top)
        out[n] = top + math.log(total) - row[int(label[n])]


@_jit
def _softmax_ce_grad(logits, label, g, out):
    """out[n] = (softmax(logits[n]) - onehot(label[n])) * g[n]; labels already checked."""
    for n in range(logits.shape[0]):
        row = logits[n]
        top = -np.inf
        for k in range(row.size):
            top = max(top, row[k])
        total = 0.0
        for k in range(row.size):
            total += math.exp(row[k] - top)
        scale = g[n] / total
        for k in range(row.size):
            out[n, k] = math.exp(row[k] - top) * scale
        out[n, int(label[n])] -= g[n]


@_jit
def _channel_stats(x):
    """Mean and biased variance per channel of x (N, C, S), in float64."""
    n_count, channels, span = x.shape
    mean = np.zeros(channels)
    var = np.zeros(channels)
    count = max(n_count * span, 1)
    for n in range(n_count):
        for c in range(channels):
            part = 0.0
            for s in range(span):
                part += x[n, c, s]
            mean[c] += part
    mean /= count
    for n in range(n_count):
        for c in range(channels):
            part = 0.0
            m = mean[c]
            for s in range(span):
                d = x[n, c, s] - m
                part += d * d
            var[c] += part
    var /= count
    return mean, var


@_jit
def _normalise(x, scale, shift, out):
    """out[n, c, s] = x[n, c, s] * scale[c] + shift[c]."""
    n_count, channels, span = x.shape
    for n in range(n_count):
        for c in range(channels):
            a = scale[c]
            b = shift[c]
            for s in range(span):
                out[n, c, s] = x[n, c, s] * a + b


@_jit
def _batch_norm(x, gamma, beta, eps, out):
    mean, var = _channel_stats(x)
    scale = gamma / np.sqrt(var + eps)
    _normalise(x, scale, beta - mean * scale, out)


@_jit
def _batch_norm_infer(x, gamma, beta, mean, var, eps, out):
    scale = gamma / np.sqrt(var.astype(np.float64) + eps)
    _normalise(x, scale, beta - mean * scale, out)


@_jit
def _grad_sums(x, g, mean, inv):
    """Per channel: sum of g, and sum of g * xhat where xhat = (x - mean) * inv."""
    n_count, channels, span = x.shape
    sum_g = np.zeros(channels)
    sum_gx = np.zeros(channels)
    for n in range(n_count):
        for c in range(channels):
            m = mean[c]
            a = 0.0
            b = 0.0
            for s in range(span):
                gv = np.float64(g[n, c, s])
                a += gv
                b += gv * (x[n, c, s] - m)
            sum_g[c] += a
            sum_gx[c] += b * inv[c]
    return sum_g, sum_gx


@_jit
def _batch_norm_grad(x, gamma, g, eps, out):
    """gx = gamma * inv * (g - mean(g) - xhat * mean(g * xhat)) per channel."""
    n_count, channels, span = x.shape
    mean, var = _channel_stats(x)
    inv = 1.0 / np.sqrt(var + eps)
    sum_g, sum_gx = _grad_sums(x, g, mean, inv)
    count = max(n_count * span, 1)
    for n in range(n_count):
        for c in range(channels):
            a = gamma[c] * inv[c]
            mean_g = sum_g[c] / count
            # xhat * mean(g * xhat) = (x - mean) * inv * sum_gx / count
            slope = inv[c] * sum_gx[c] / count
            m = mean[c]
            for s in range(span):
                out[n, c, s] = a * (g[n, c, s] - mean_g - (x[n, c, s] - m) * slope)


@_jit
def _batch_norm_grad_gamma(x, g, eps, out):
    mean, var = _channel_stats(x)
    _, sum_gx = _grad_sums(x, g, mean, 1.0 / np.sqrt(var + eps))
    out[:] = sum_gx


@_jit
def _bn_update(running, x, use_mean, momentum):
    mean, var = _channel_stats(x)
    stat = mean if use_mean else var
    for c in range(running.size):
        running[c] = momentum * running[c] + (1.0 - momentum) * stat[c]


# ---- the wrappers the engine calls ----

def _along(a, axis):
    """a as (outer, K, inner) around `axis` (a C-contiguous view)."""
    axis = axis % a.ndim
    shape = a.shape
    return np.ascontiguousarray(a).reshape(math.prod(shape[:axis]), shape[axis],
                                           math.prod(shape[axis + 1:]))


def _softmax_kernel(mode):
    def softmax(inputs, out, attrs):
        _softmax(mode, _along(inputs[0], attrs["axis"]), _along(out, attrs["axis"]))
    return softmax


def _softmax_grad_kernel(mode):
    def softmax_grad(inputs, out, attrs):
        y, g = inputs
        axis = attrs["axis"]
        _softmax_grad(mode, _along(y, axis), _along(g, axis), _along(out, axis))
    return softmax_grad


def _labels(name, label, classes):
    flat = np.ascontiguousarray(label).reshape(-1)
    bad = _first_bad_label(flat, classes)
    if bad >= 0:
        raise ValueError(f"{name}: label {float(flat[bad])!r} (example {bad}) is not a class "
                         f"index in 0..{classes - 1}")
    return flat


def _softmax_ce_kernel(inputs, out, attrs):
    logits, label = inputs
    _softmax_ce(np.ascontiguousarray(logits), _labels("softmax_ce", label, logits.shape[1]), out)


def _softmax_ce_grad_kernel(inputs, out, attrs):
    logits, label, g = inputs
    flat = _labels("softmax_ce_grad", label, logits.shape[1])
    _softmax_ce_grad(np.ascontiguousarray(logits), flat, np.ascontiguousarray(g), out)


def _channels(a):
    """a as (N, C, S) (a C-contiguous view)."""
    return np.ascontiguousarray(a).reshape(a.shape[0], a.shape[1], math.prod(a.shape[2:]))


def _batch_norm_kernel(inputs, out, attrs):
    x, gamma, beta = inputs
    _batch_norm(_channels(x), gamma, beta, float(attrs["eps"]), _channels(out))


def _batch_norm_grad_kernel(inputs, out, attrs):
    x, gamma, g = inputs
    _batch_norm_grad(_channels(x), gamma, _channels(g), float(attrs["eps"]), _channels(out))


def _batch_norm_grad_gamma_kernel(inputs, out, attrs):
    x, g = inputs
    _batch_norm_grad_gamma(_channels(x), _channels(g), float(attrs["eps"]), out)


def _batch_norm_infer_kernel(inputs, out, attrs):
    x, gamma, beta, mean, var = inputs
    _batch_norm_infer(_channels(x), gamma, beta, mean, var, float(attrs["eps"]), _channels(out))


def _bn_update_kernel(inputs, out, attrs):
    _bn_update(out, _channels(inputs[1]), attrs["stat"] == "mean", float(attrs["momentum"]))


NN_KERNELS = {
    "softmax": _softmax_kernel(SOFTMAX),
    "log_softmax": _softmax_kernel(LOG_SOFTMAX),
    "softmax_grad": _softmax_grad_kernel(SOFTMAX),
    "log_softmax_grad": _softmax_grad_kernel(LOG_SOFTMAX),
    "softmax_ce": _softmax_ce_kernel,
    "softmax_ce_grad": _softmax_ce_grad_kernel,
    "batch_norm": _batch_norm_kernel,
    "batch_norm_grad": _batch_norm_grad_kernel,
    "batch_norm_grad_gamma": _batch_norm_grad_gamma_kernel,
    "batch_norm_infer": _batch_norm_infer_kernel,
    "bn_update": _bn_update_kernel,
}
