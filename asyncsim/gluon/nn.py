"""Gluon's layers (`from asyncsim.gluon import nn`): Dense, Conv2D, pooling, BatchNorm,
Activation, Flatten, and the containers, with MXNet's arguments and parameter shapes.

Each layer is a HybridBlock whose `infer_shape` fills its parameters' unknown input sizes from
the first input (deferred initialisation) and whose `hybrid_forward` calls the `nd` functions
MXNet's layers call (`FullyConnected`, `Convolution`, `Pooling`, `BatchNorm`, `Activation`).
Weights take the initializer given to `initialize()`; biases and shifts start at zero, scales at
one, running variances at one. Images are NCHW.
"""

from __future__ import annotations

from math import prod

from asyncsim.gluon.block import Block, HybridBlock, HybridSequential, Sequential
from asyncsim.gluon.init import One, Zero


def _pair(value):
    return (value, value) if isinstance(value, int) else tuple(value)


class Activation(HybridBlock):
    def __init__(self, activation: str, **kwargs):
        super().__init__(**kwargs)
        self.act = activation

    def hybrid_forward(self, F, x):
        return F.Activation(x, act_type=self.act)

    def _describe(self) -> str:
        return self.act


class Dense(HybridBlock):
    """y = activation(x W^T + b), W of shape (units, in_units); inputs of more than 2 dimensions
    are flattened to (batch, rest) first (flatten=True, MXNet's default)."""

    def __init__(self, units: int, activation=None, use_bias=True, flatten=True, in_units=0,
                 weight_initializer=None, bias_initializer="zeros", dtype="float32", **kwargs):
        super().__init__(**kwargs)
        self.units, self.flatten_input, self.activation = units, flatten, activation
        self.weight = self.param("weight", (units, in_units), weight_initializer)
        self.bias = self.param("bias", (units,), bias_initializer) if use_bias else None

    def infer_shape(self, x, *args) -> None:
        width = prod(x.shape[1:]) if self.flatten_input else x.shape[-1]
        self.weight.infer_shape((self.units, width), self.name)

    def hybrid_forward(self, F, x, weight, bias=None):
        out = F.FullyConnected(x, weight, bias, num_hidden=self.units, no_bias=bias is None,
                               flatten=self.flatten_input)
        return out if self.activation is None else F.Activation(out, act_type=self.activation)

    def _describe(self) -> str:
        return f"{self.weight.shape[1] or None} -> {self.units}, {self.activation or 'linear'}"


class Conv2D(HybridBlock):
    """2-d convolution, weight (channels, in_channels, kh, kw), NCHW."""

    def __init__(self, channels: int, kernel_size, strides=1, padding=0, activation=None,
                 use_bias=True, in_channels=0, weight_initializer=None,
                 bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.channels, self.kernel = channels, _pair(kernel_size)
        self.strides, self.padding, self.activation = _pair(strides), _pair(padding), activation
        self.weight = self.param("weight", (channels, in_channels, *self.kernel),
                                 weight_initializer)
        self.bias = self.param("bias", (channels,), bias_initializer) if use_bias else None

    def infer_shape(self, x, *args) -> None:
        if len(x.shape) != 4:
            from asyncsim.nd.ops import ShapeError

            raise ShapeError(f"{self.name}: Conv2D takes (N, C, H, W) input, got {x.shape}")
        self.weight.infer_shape((self.channels, x.shape[1], *self.kernel), self.name)

    def hybrid_forward(self, F, x, weight, bias=None):
        out = F.Convolution(x, weight, bias, kernel=self.kernel, num_filter=self.channels,
                            stride=self.strides, pad=self.padding, no_bias=bias is None)
        return out if self.activation is None else F.Activation(out, act_type=self.activation)

    def _describe(self) -> str:
        return f"{self.weight.shape[1] or None} -> {self.channels}, kernel_size={self.kernel}"


class _Pool(HybridBlock):
    pool_type = "max"

    def __init__(self, pool_size=2, strides=None, padding=0, **kwargs):
        super().__init__(**kwargs)
        self.pool_size = _pair(pool_size)
        self.strides = self.pool_size if strides is None else _pair(strides)
        self.padding = _pair(padding)

    def hybrid_forward(self, F, x):
        return F.Pooling(x, kernel=self.pool_size, pool_type=self.pool_type,
                         stride=self.strides, pad=self.padding)


class MaxPool2D(_Pool):
    pool_type = "max"


class AvgPool2D(_Pool):
    pool_type = "avg"


class GlobalAvgPool2D(HybridBlock):
    pool_type = "avg"

    def hybrid_forward(self, F, x):
        return F.Pooling(x, pool_type=self.pool_type, global_pool=True)


class GlobalMaxPool2D(GlobalAvgPool2D):
    pool_type = "max"


class Flatten(HybridBlock):
    def hybrid_forward(self, F, x):
        return F.flatten(x)


class BatchNorm(HybridBlock):
    """Batch normalisation over axis 1: batch statistics under `autograd.record()` (training),
    running statistics otherwise; the running ones move by `momentum` at each training call."""

    def __init__(self, axis=1, momentum=0.9, epsilon=1e-5, center=True, scale=True,
                 in_channels=0, **kwargs):
        super().__init__(**kwargs)
        if axis != 1:
            raise ValueError(f"BatchNorm: only axis=1 (channels) is supported, got {axis}")
        self.momentum, self.epsilon, self.center, self.scale = momentum, epsilon, center, scale
        self.gamma = self.param("gamma", (in_channels,), One(),
                                grad_req="write" if scale else "null")
        self.beta = self.param("beta", (in_channels,), Zero(),
                               grad_req="write" if center else "null")
        self.running_mean = self.param("running_mean", (in_channels,), Zero(), grad_req="null")
        self.running_var = self.param("running_var", (in_channels,), One(), grad_req="null")

    def infer_shape(self, x, *args) -> None:
        for p in (self.gamma, self.beta, self.running_mean, self.running_var):
            p.infer_shape((x.shape[1],), self.name)

    def hybrid_forward(self, F, x, gamma, beta, running_mean, running_var):
        return F.BatchNorm(x, gamma, beta, running_mean, running_var, eps=self.epsilon,
                           momentum=self.momentum)


__all__ = ["Activation", "AvgPool2D", "BatchNorm", "Block", "Conv2D", "Dense", "Flatten",
           "GlobalAvgPool2D", "GlobalMaxPool2D", "HybridBlock", "HybridSequential", "MaxPool2D",
           "Sequential"]
