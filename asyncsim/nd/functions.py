"""MXNet's `nd` functions of layers, losses and reductions, as `ND` methods (a mixin).

Each one checks and normalises its arguments (MXNet's names and defaults: `kernel=`, `stride=`,
`pad=`, `num_filter=`, `pool_type=`, `global_pool=`) and issues ops of `asyncsim.nd.ops`
through `ND.invoke`, so one definition serves recording, the real engine and autograd. Composite
functions (a convolution with its bias, a fully connected layer) are several ops, as their
gradients then come for free; the hybridized graph runs them as one.

Assumptions: images are NCHW; a bias is added by broadcasting; `axis` arguments follow numpy
(negative counts from the end). Units as in `asyncsim.nd.ops`.
"""

from __future__ import annotations

from asyncsim.nd import autograd
from asyncsim.nd.ops import ShapeError
from asyncsim.nd.ops.base import axes


def _pair(name: str, value, what: str) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    value = tuple(value)
    if len(value) != 2:
        raise ShapeError(f"{name}: {what} must be an int or a pair of ints, got {value!r}")
    return value


class Functions:
    """The `nd` functions beyond creation, arithmetic and blockers (mixed into `ND`)."""

    # -- reductions and shapes -------------------------------------------------------------------
    def sum(self, a, axis=None, keepdims=False):
        if axis is None and not keepdims:
            return self.invoke("sum", a)
        axis = tuple(range(len(a.shape))) if axis is None else axes("sum", a.shape, axis)
        return self.invoke("sum_axis", a, axis=axis, keepdims=bool(keepdims))

    def mean(self, a, axis=None, keepdims=False):
        if axis is None and not keepdims:
            return self.invoke("mean", a)
        axis = tuple(range(len(a.shape))) if axis is None else axes("mean", a.shape, axis)
        count = 1
        for i in axis:
            count *= a.shape[i]
        return self.sum(a, axis, keepdims) * (1.0 / max(count, 1))

    def argmax(self, a, axis=None, keepdims=False):
        if axis is None:
            a, axis = self.reshape(a, (-1,)), 0
        return self.invoke("argmax", a, axis=axes("argmax", a.shape, axis),
                           keepdims=bool(keepdims))

    def reshape(self, a, shape):
        """MXNet's special values: 0 keeps that dimension, -1 takes what is left."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        out = [a.shape[i] if s == 0 and i < len(a.shape) else s for i, s in enumerate(shape)]
        if out.count(-1) > 1 or any(s < -1 for s in out):
            raise ShapeError(f"reshape: cannot reshape {a.shape} into {shape}")
        if -1 in out:
            known = 1
            for s in out:
                known *= s if s != -1 else 1
            total = a.size
            if known == 0 or total % known:
                raise ShapeError(f"reshape: cannot reshape {a.shape} into {shape}")
            out[out.index(-1)] = total // known
        out = tuple(out)
        if out == a.shape and not autograd.is_recording():
            return a
        # recorded, even into the same shape: a leaf's reshape must be a node of the tape
        return self.invoke("reshape", a, shape=out)

    def flatten(self, a):
        """(N, ...) -> (N, product of the rest)."""
        return self.reshape(a, (a.shape[0], -1) if a.shape else (1, 1))

    def broadcast_to(self, a, shape):
        return self.invoke("broadcast_to", a, shape=tuple(shape))

    def zeros_like(self, a):
        return self.zeros(a.shape, ctx=a.context, dtype=a.dtype)

    def ones_like(self, a):
        return self.ones(a.shape, ctx=a.context, dtype=a.dtype)

    def equal(self, a, b):
        return self.invoke("equal", a, b)

    # -- activations and softmax -------------------------------------------------------------------
    def sigmoid(self, a):
        return self.invoke("sigmoid", a)

    def tanh(self, a):
        return self.invoke("tanh", a)

    def Activation(self, data, act_type="relu"):  # noqa: N802 (MXNet's name)
        if act_type not in ("relu", "sigmoid", "tanh"):
            raise ValueError(f"Activation: act_type must be 'relu', 'sigmoid' or 'tanh', "
                             f"got {act_type!r}")
        return self.invoke(act_type, data)

    def softmax(self, data, axis=-1):
        return self.invoke("softmax", data, axis=axes("softmax", data.shape, axis)[0])

    def log_softmax(self, data, axis=-1):
        return self.invoke("log_softmax", data, axis=axes("log_softmax", data.shape, axis)[0])

    def softmax_cross_entropy(self, data, label):
        """Per-example cross-entropy of logits `data` (N, K) and class indices `label` (N,)."""
        return self.invoke("softmax_ce", data, label)

    # -- layers --------------------------------------------------------------------------------
    def dot(self, a, b, transpose_a=False, transpose_b=False):
        attrs = {}
        if transpose_a:
            attrs["transpose_a"] = True
        if transpose_b:
            attrs["transpose_b"] = True
        return self._op("dot", (a, b), attrs)

    def FullyConnected(self, data, weight, bias=None, num_hidden=None, no_bias=False,  # noqa: N802
                       flatten=True):
        """data (N, in) x weight (num_hidden, in) transposed, plus bias (num_hidden,); with
        flatten=False, data (..., in) gives (..., num_hidden)."""
        if num_hidden is not None and weight.shape[0] != num_hidden:
            raise ShapeError(f"FullyConnected: weight {weight.shape} has {weight.shape[0]} rows, "
                             f"num_hidden is {num_hidden}")
        lead = None
        if flatten and len(data.shape) != 2:
            data = self.flatten(data)
        elif not flatten and len(data.shape) > 2:  # the last axis holds the features
            lead = data.shape[:-1]
            data = self.reshape(data, (-1, data.shape[-1]))
        if len(data.shape) == 2 and len(weight.shape) == 2 and data.shape[1] != weight.shape[1]:
            raise ShapeError(f"FullyConnected: input of width {data.shape[1]} for a weight "
                             f"{weight.shape} that expects width {weight.shape[1]}")
        out = self.dot(data, weight, transpose_b=True)
        out = out if no_bias or bias is None else out + bias
        return out if lead is None else self.reshape(out, (*lead, weight.shape[0]))

    def Convolution(self, data, weight, bias=None, kernel=None, num_filter=None,  # noqa: N802
                    stride=(1, 1), pad=(0, 0), no_bias=False):
        kernel = tuple(weight.shape[2:]) if kernel is None else _pair("Convolution", kernel,
                                                                       "kernel")
        if num_filter is not None and weight.shape[0] != num_filter:
            raise ShapeError(f"Convolution: weight {weight.shape} has {weight.shape[0]} filters, "
                             f"num_filter is {num_filter}")
        out = self.invoke("conv2d", data, weight, kernel=kernel,
                          stride=_pair("Convolution", stride, "stride"),
                          pad=_pair("Convolution", pad, "pad"))
        if no_bias or bias is None:
            return out
        return out + self.reshape(bias, (1, -1, 1, 1))

    def Pooling(self, data, kernel=(1, 1), pool_type="max", stride=None, pad=(0, 0),  # noqa: N802
                global_pool=False):
        if len(data.shape) != 4:
            raise ShapeError(f"Pooling: data must be (N, C, H, W), got {data.shape}")
        if global_pool:
            kernel, stride, pad = data.shape[2:], (1, 1), (0, 0)
        kernel = _pair("Pooling", kernel, "kernel")
        stride = (1, 1) if stride is None else _pair("Pooling", stride, "stride")
        return self.invoke("pool2d", data, pool_type=pool_type, kernel=kernel, stride=stride,
                           pad=_pair("Pooling", pad, "pad"))

    def BatchNorm(self, data, gamma, beta, moving_mean, moving_var, eps=1e-5,  # noqa: N802
                  momentum=0.9, fix_gamma=False, use_global_stats=False):
        """Batch statistics while training (autograd.is_training()), moving ones otherwise; a
        training call also moves `moving_mean` and `moving_var` (in place, not recorded)."""
        if fix_gamma:
            gamma = self.ones_like(gamma)
        if use_global_stats or not autograd.is_training():
            return self.invoke("batch_norm_infer", data, gamma, beta, moving_mean, moving_var,
                               eps=float(eps))
        out = self.invoke("batch_norm", data, gamma, beta, eps=float(eps))
        with autograd.pause(train_mode=True):
            for stat, running in (("mean", moving_mean), ("var", moving_var)):
                self.invoke("bn_update", running, data, momentum=float(momentum), stat=stat)
        return out

    def sgd_update(self, weight, grad, lr, wd=0.0, rescale_grad=1.0, out=None):
        """weight -= lr * (rescale_grad * grad + wd * weight), in place (MXNet's sgd_update)."""
        if out is not None and out is not weight:
            raise ValueError("sgd_update: out must be the weight (the update is in place)")
        return self.invoke("sgd_update", weight, grad, lr=float(lr), rescale=float(rescale_grad),
                           wd=float(wd))
