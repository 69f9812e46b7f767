"""The neural-network ops a CNN needs, with MXNet's semantics, each with its gradient beside it.

- `conv2d(data (N, C, H, W), weight (F, C, kh, kw))`: cross-correlation, attrs `stride` and
  `pad` (pairs); output (N, F, Ho, Wo), Ho = (H + 2 ph - kh) // sh + 1. The bias is added by the
  frontend as a broadcast `add` of the bias reshaped to (1, F, 1, 1), so its gradient is an
  ordinary broadcast gradient. Backward: `conv2d_grad_data(g, weight)` and
  `conv2d_grad_weight(data, g)`, attrs as the forward plus the shape they produce.
- `pool2d(data)`: attrs `pool_type` ('max' or 'avg'), `kernel`, `stride`, `pad` (pairs); 'valid'
  output sizes as `conv2d`; padding counts as -inf for max and as zeros in the average (MXNet's
  count_include_pad). Global pooling is a kernel of the whole image. Backward:
  `pool2d_grad(data, g)` (max routes g to the first largest element of each window).
- `softmax`, `log_softmax` along attrs `axis`; backward from their outputs:
  `softmax_grad(out, g)`, `log_softmax_grad(out, g)`.
- `softmax_ce(logits (N, K), label (N,) or (N, 1))`: -log softmax(logits)[label] per example, shape
  (N,); labels are class indices held as floats (a label outside 0..K-1 fails in the kernel).
  Backward: `softmax_ce_grad(logits, label, g)` = (softmax(logits) - onehot(label)) * g.
- `batch_norm(x, gamma, beta)`: training-mode batch normalisation over every axis but 1 (the
  channels), attrs `eps`; backward `batch_norm_grad(x, gamma, g)` for x and
  `batch_norm_grad_gamma(x, g)` for gamma (beta's is a `sum_axis` of g). `batch_norm_infer(x,
  gamma, beta, mean, var)` uses running statistics; `bn_update(running, x)` (in place) moves a
  running statistic towards the batch's: running = m * running + (1 - m) * stat, attrs
  `momentum`, `stat` ('mean' or 'var': the biased variance, as MXNet).

Units as in `base`; flops count a multiply-add as two.
"""

from __future__ import annotations

from asyncsim.nd.ops.base import OpDef, ShapeError, axes, err, per_element, same, size


# -- shape rules ---------------------------------------------------------------------------------
def _pair(name, attrs, key, shapes):
    value = attrs[key]
    if (len(value) != 2 or not all(isinstance(v, int) for v in value)
            or any(v < (0 if key == "pad" else 1) for v in value)):
        kind = "non-negative" if key == "pad" else "positive"
        raise err(name, shapes, f"{key} must be two {kind} ints, got {value!r}")
    return value


def _windows(name, shapes, image, attrs):
    """Output (Ho, Wo) of a kernel sliding over `image` (H, W) with the attrs' stride and pad."""
    (kh, kw), (sh, sw), (ph, pw) = (_pair(name, attrs, k, shapes)
                                    for k in ("kernel", "stride", "pad"))
    if name == "pool2d" and (2 * ph > kh or 2 * pw > kw):
        raise err(name, shapes, f"pad {(ph, pw)} must be at most half the kernel {(kh, kw)}")
    h, w = image[0] + 2 * ph, image[1] + 2 * pw
    if kh > h or kw > w:
        raise err(name, shapes, f"kernel {(kh, kw)} is larger than the padded input {(h, w)}")
    return (h - kh) // sh + 1, (w - kw) // sw + 1


def _conv2d(shapes, attrs):
    data, weight = shapes
    if len(data) != 4 or len(weight) != 4:
        raise err("conv2d", shapes, "data must be (N, C, H, W) and weight (F, C, kh, kw)")
    if data[1] != weight[1]:
        raise err("conv2d", shapes, f"data has {data[1]} channels, weight expects {weight[1]}")
    if tuple(attrs["kernel"]) != weight[2:]:
        raise err("conv2d", shapes, f"kernel {tuple(attrs['kernel'])} differs from the weight's "
                                    f"{weight[2:]}")
    return (data[0], weight[0], *_windows("conv2d", shapes, data[2:], attrs))


def _conv2d_grad_data(shapes, attrs):
    g, weight = shapes
    data = tuple(attrs["data_shape"])
    if _conv2d((data, weight), attrs) != g:
        raise err("conv2d_grad_data", shapes, f"the gradient must be the output's shape for "
                                              f"data {data}")
    return data


def _conv2d_grad_weight(shapes, attrs):
    data, g = shapes
    weight = tuple(attrs["weight_shape"])
    if _conv2d((data, weight), attrs) != g:
        raise err("conv2d_grad_weight", shapes, f"the gradient must be the output's shape for "
                                                f"weight {weight}")
    return weight


def conv_geometry(name, shapes, attrs) -> str:
    """A convolution's shape without its batch, as "CxHxW-FxKHxKW-sSHxSW-pPHxPW": its data's
    channels and image, its filters and kernel, stride and pad. The speed of the BLAS product
    behind the three convolutions (`realexec.cpu.conv`) depends on these, not on the batch
    (images are convolved in chunks), so a profile may price each geometry on its own."""
    if name == "conv2d_grad_data":
        data, weight = tuple(attrs["data_shape"]), shapes[1]
    elif name == "conv2d_grad_weight":
        data, weight = shapes[0], tuple(attrs["weight_shape"])
    else:
        data, weight = shapes
    (kh, kw), (sh, sw), (ph, pw) = (_pair(name, attrs, k, shapes)
                                    for k in ("kernel", "stride", "pad"))
    c, h, w = data[1:]
    return f"{c}x{h}x{w}-{weight[0]}x{kh}x{kw}-s{sh}x{sw}-p{ph}x{pw}"


def _pool2d(shapes, attrs):
    data = shapes[0]
    if len(data) != 4:
        raise err("pool2d", shapes, "data must be (N, C, H, W)")
    if attrs["pool_type"] not in ("max", "avg"):
        raise err("pool2d", shapes, f"pool_type must be 'max' or 'avg', got {attrs['pool_type']!r}")
    return (data[0], data[1], *_windows("pool2d", shapes, data[2:], attrs))


def _two_same(name):
    def rule(shapes, attrs):
        if shapes[0] != shapes[1]:
            raise err(name, shapes, "shapes must be equal")
        return shapes[0]
    return rule


def _along_axis(name):
    def rule(shapes, attrs):
        axes(name, shapes[0], attrs["axis"])
        return shapes[0]
    return rule


def _labels(name, logits, label, shapes):
    if len(logits) != 2:
        raise err(name, shapes, "logits must be (batch, classes)")
    if label not in ((logits[0],), (logits[0], 1)):
        raise err(name, shapes, f"labels must be ({logits[0]},): one class index per example")


def _softmax_ce(shapes, attrs):
    _labels("softmax_ce", shapes[0], shapes[1], shapes)
    return (shapes[0][0],)


def _softmax_ce_grad(shapes, attrs):
    logits, label, g = shapes
    _labels("softmax_ce_grad", logits, label, shapes)
    if g != (logits[0],):
        raise err("softmax_ce_grad", shapes, "the gradient must have one value per example")
    return logits


def _channels(name, x, *params, shapes):
    if len(x) < 2:
        raise err(name, shapes, "data needs a channel axis (axis 1)")
    for p in params:
        if p != (x[1],):
            raise err(name, shapes, f"per-channel parameters must be ({x[1]},)")


def _batch_norm(shapes, attrs):
    _channels("batch_norm", shapes[0], *shapes[1:], shapes=shapes)
    return shapes[0]


def _batch_norm_grad(shapes, attrs):
    x, gamma, g = shapes
    _channels("batch_norm_grad", x, gamma, shapes=shapes)
    if g != x:
        raise err("batch_norm_grad", shapes, "the gradient must have the data's shape")
    return x


def _batch_norm_grad_gamma(shapes, attrs):
    x, g = shapes
    _channels("batch_norm_grad_gamma", x, shapes=shapes)
    if g != x:
        raise err("batch_norm_grad_gamma", shapes, "the gradient must have the data's shape")
    return (x[1],)


def _bn_update(shapes, attrs):
    running, x = shapes
    _channels("bn_update", x, running, shapes=shapes)
    if attrs["stat"] not in ("mean", "var"):
        raise err("bn_update", shapes, f"stat must be 'mean' or 'var', got {attrs['stat']!r}")
    return running


# -- flops ----------------------------------------------------------------------------------------
def _conv_flops(y, w):
    """Every element of the (N, F, Ho, Wo) side is a dot product of C * kh * kw pairs, in each of
    the three convolutions (forward, data gradient, weight gradient): 2 * size(y) * size(w) / F."""
    return 2.0 * size(y) * size(w) / max(w[0], 1)


def _window_flops(shapes, out):
    return float(size(shapes[0]) + size(out))


def _per_input(k):
    return lambda shapes, out: k * float(size(shapes[0]))


# -- gradients ------------------------------------------------------------------------------------
def _geometry(attrs):
    return {k: tuple(attrs[k]) for k in ("kernel", "stride", "pad")}


def _g_conv2d(F, x, out, g, attrs):
    data, weight = x
    geo = _geometry(attrs)
    return (F.invoke("conv2d_grad_data", g, weight, data_shape=data.shape, **geo),
            F.invoke("conv2d_grad_weight", data, g, weight_shape=weight.shape, **geo))


def _g_pool2d(F, x, out, g, attrs):
    return (F.invoke("pool2d_grad", x[0], g, pool_type=attrs["pool_type"], **_geometry(attrs)),)


def _g_softmax(F, x, out, g, attrs):
    return (F.invoke("softmax_grad", out, g, axis=attrs["axis"]),)


def _g_log_softmax(F, x, out, g, attrs):
    return (F.invoke("log_softmax_grad", out, g, axis=attrs["axis"]),)


def _g_softmax_ce(F, x, out, g, attrs):
    return F.invoke("softmax_ce_grad", x[0], x[1], g), None


def _g_batch_norm(F, x, out, g, attrs):
    data, gamma, _ = x
    others = tuple(i for i in range(len(data.shape)) if i != 1)
    return (F.invoke("batch_norm_grad", data, gamma, g, eps=attrs["eps"]),
            F.invoke("batch_norm_grad_gamma", data, g, eps=attrs["eps"]),
            F.invoke("sum_axis", g, axis=others, keepdims=False))


def _g_batch_norm_infer(F, x, out, g, attrs):
    # the running statistics are fixed (MXNet's use_global_stats, its aux states: no gradient),
    # so the op is affine in x: x's gradient is the op itself on g with beta and mean zero;
    # gamma's is g times the normalised x and beta's is g, each summed per channel
    data, gamma, _, mean, var = x
    zeros = F.zeros(gamma.shape, ctx=gamma.context, dtype=gamma.dtype)
    ones = F.ones(gamma.shape, ctx=gamma.context, dtype=gamma.dtype)
    others = tuple(i for i in range(len(data.shape)) if i != 1)
    normalised = F.invoke("batch_norm_infer", data, ones, zeros, mean, var, eps=attrs["eps"])
    return (F.invoke("batch_norm_infer", g, gamma, zeros, zeros, var, eps=attrs["eps"]),
            F.invoke("sum_axis", g * normalised, axis=others, keepdims=False),
            F.invoke("sum_axis", g, axis=others, keepdims=False), None, None)


def _check_conv_grad_shapes(rule):
    def checked(shapes, attrs):
        if any(len(s) != 4 for s in shapes):
            raise ShapeError(f"conv2d gradients take 4-d arrays (got {shapes})")
        return rule(shapes, attrs)
    return checked


DEFS = [
    OpDef("conv2d", 2, "conv", _conv2d, lambda s, out: _conv_flops(out, s[1]),
          "cross-correlation of (N, C, H, W) data with (F, C, kh, kw) weights", _g_conv2d),
    OpDef("conv2d_grad_data", 2, "conv", _check_conv_grad_shapes(_conv2d_grad_data),
          lambda s, out: _conv_flops(s[0], s[1]),
          "the data's gradient of conv2d (inputs g, weight; attrs data_shape)"),
    OpDef("conv2d_grad_weight", 2, "conv", _check_conv_grad_shapes(_conv2d_grad_weight),
          lambda s, out: _conv_flops(s[1], out),
          "the weight's gradient of conv2d (inputs data, g; attrs weight_shape)"),
    OpDef("pool2d", 1, "nn", _pool2d, _window_flops, "max or average pooling", _g_pool2d),
    OpDef("pool2d_grad", 2, "nn", lambda shapes, attrs: shapes[0], _window_flops,
          "the data's gradient of pool2d (inputs data, g)"),
    OpDef("softmax", 1, "nn", _along_axis("softmax"), _per_input(5),
          "exp(a) / sum(exp(a)) along attrs['axis']", _g_softmax),
    OpDef("log_softmax", 1, "nn", _along_axis("log_softmax"), _per_input(5),
          "a - log(sum(exp(a))) along attrs['axis']", _g_log_softmax),
    OpDef("softmax_grad", 2, "nn", _two_same("softmax_grad"), _per_input(4),
          "softmax's gradient from its output: out * (g - sum(g * out))"),
    OpDef("log_softmax_grad", 2, "nn", _two_same("log_softmax_grad"), _per_input(4),
          "log_softmax's gradient from its output: g - exp(out) * sum(g)"),
    OpDef("softmax_ce", 2, "nn", _softmax_ce, _per_input(5),
          "softmax cross-entropy per example, labels as class indices", _g_softmax_ce),
    OpDef("softmax_ce_grad", 3, "nn", _softmax_ce_grad, _per_input(5),
          "(softmax(logits) - onehot(label)) * g (inputs logits, label, g)"),
    OpDef("batch_norm", 3, "nn", _batch_norm, _per_input(8),
          "training-mode batch normalisation over every axis but 1 (inputs x, gamma, beta)",
          _g_batch_norm),
    OpDef("batch_norm_grad", 3, "nn", _batch_norm_grad, _per_input(12),
          "batch_norm's gradient for x (inputs x, gamma, g)"),
    OpDef("batch_norm_grad_gamma", 2, "nn", _batch_norm_grad_gamma, _per_input(6),
          "batch_norm's gradient for gamma: sum of g * normalised x per channel (inputs x, g)"),
    OpDef("batch_norm_infer", 5, "nn",
          lambda shapes, attrs: (_channels("batch_norm_infer", shapes[0], *shapes[1:],
                                           shapes=shapes), shapes[0])[1],
          _per_input(4), "batch normalisation with running statistics (x, gamma, beta, mean, var)",
          _g_batch_norm_infer),
    OpDef("bn_update", 2, "nn", _bn_update, _per_input(3),
          "in place: a running statistic moves towards the batch's (inputs running, x)"),
]

INPLACE = frozenset({"bn_update"})

# ops whose cost a profile may key by `conv_geometry` as well as by name
GEOMETRY = {name: conv_geometry for name in ("conv2d", "conv2d_grad_data", "conv2d_grad_weight")}

__all__ = ["DEFS", "GEOMETRY", "INPLACE", "conv_geometry", "per_element", "same"]
