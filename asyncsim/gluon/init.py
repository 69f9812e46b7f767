"""Initializers (`asyncsim.init`, MXNet's `mxnet.init`): how a parameter's first values are made.

An initializer is called as `init(nd, name, shape, ctx, dtype)` and returns a fresh NDArray made
by `nd`'s own creation ops (random numbers, fills), so initialisation is part of the program the
model and the engine see. Defaults follow MXNet: Uniform(scale=0.07) for weights; layers give
their biases and batch-norm shifts Zero() and their scales One().
"""

from __future__ import annotations

import math


class Initializer:
    def __call__(self, nd, name, shape, ctx, dtype):
        raise NotImplementedError

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class Uniform(Initializer):
    """Uniform numbers in [-scale, scale)."""

    def __init__(self, scale=0.07):
        self.scale = float(scale)

    def __call__(self, nd, name, shape, ctx, dtype):
        return nd.random.uniform(-self.scale, self.scale, shape=shape, ctx=ctx, dtype=dtype)


class Normal(Initializer):
    """Normal numbers of mean 0 and deviation sigma."""

    def __init__(self, sigma=0.01):
        self.sigma = float(sigma)

    def __call__(self, nd, name, shape, ctx, dtype):
        return nd.random.normal(0.0, self.sigma, shape=shape, ctx=ctx, dtype=dtype)


class Constant(Initializer):
    def __init__(self, value=0.0):
        self.value = float(value)

    def __call__(self, nd, name, shape, ctx, dtype):
        return nd.full(shape, self.value, ctx=ctx, dtype=dtype)


class Zero(Constant):
    def __init__(self):
        super().__init__(0.0)


class One(Constant):
    def __init__(self):
        super().__init__(1.0)


class Xavier(Initializer):
    """Glorot's scale sqrt(magnitude / fan) with fan the inputs', outputs' or their mean."""

    def __init__(self, rnd_type="uniform", factor_type="avg", magnitude=3.0):
        if rnd_type not in ("uniform", "gaussian") or factor_type not in ("avg", "in", "out"):
            raise ValueError(f"Xavier: rnd_type 'uniform'|'gaussian', factor_type "
                             f"'avg'|'in'|'out' (got {rnd_type!r}, {factor_type!r})")
        self.rnd_type, self.factor_type, self.magnitude = rnd_type, factor_type, float(magnitude)

    def __call__(self, nd, name, shape, ctx, dtype):
        if len(shape) < 2:
            raise ValueError(f"Xavier: {name} of shape {shape} needs at least 2 dimensions")
        receptive = math.prod(shape[2:])
        fan_in, fan_out = shape[1] * receptive, shape[0] * receptive
        fan = {"avg": (fan_in + fan_out) / 2, "in": fan_in, "out": fan_out}[self.factor_type]
        scale = math.sqrt(self.magnitude / fan)
        if self.rnd_type == "uniform":
            return nd.random.uniform(-scale, scale, shape=shape, ctx=ctx, dtype=dtype)
        return nd.random.normal(0.0, scale, shape=shape, ctx=ctx, dtype=dtype)


_BY_NAME = {"zeros": Zero, "ones": One, "uniform": Uniform, "normal": Normal, "xavier": Xavier}


def create(spec) -> Initializer:
    """An Initializer from an instance or one of MXNet's names ('zeros', 'ones', ...)."""
    if isinstance(spec, Initializer):
        return spec
    if isinstance(spec, str) and spec.lower() in _BY_NAME:
        return _BY_NAME[spec.lower()]()
    raise ValueError(f"unknown initializer {spec!r}; use an asyncsim.init instance or one of "
                     f"{', '.join(_BY_NAME)}")


__all__ = ["Constant", "Initializer", "Normal", "One", "Uniform", "Xavier", "Zero", "create"]
