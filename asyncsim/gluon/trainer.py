"""Gluon's Trainer: `Trainer(params, 'sgd', {'learning_rate': lr}).step(batch_size)`.

`step` issues, per parameter and context, MXNet's `sgd_update` (in place: w -= lr * (grad /
batch_size + wd * w)). A parameter held on several contexts (data parallelism) first has its
gradients summed on every context, as MXNet's 'device' kvstore does (through the first context;
`kvstore='ring'` for a ring allreduce, `asyncsim.gluon.kvstore`): ordinary ops and copies, so
the model prices the links they cross.
"""

from __future__ import annotations

from asyncsim.gluon.kvstore import ALLREDUCE
from asyncsim.gluon.parameter import Parameter
from asyncsim.nd import autograd


class Trainer:
    def __init__(self, params, optimizer="sgd", optimizer_params=None, kvstore="device"):
        if kvstore not in ALLREDUCE:
            raise ValueError(f"Trainer: kvstore must be one of {sorted(ALLREDUCE)}, "
                             f"got {kvstore!r}")
        self.allreduce = ALLREDUCE[kvstore]
        if optimizer != "sgd":
            raise ValueError(f"Trainer: only the 'sgd' optimizer is supported, got {optimizer!r}")
        options = dict(optimizer_params or {})
        self.learning_rate = float(options.pop("learning_rate", 0.01))
        self.wd = float(options.pop("wd", 0.0))
        if options.pop("momentum", 0.0):
            raise ValueError("Trainer: sgd with momentum is not supported")
        if options:
            raise ValueError(f"Trainer: unknown optimizer_params {sorted(options)}")
        values = params.values() if hasattr(params, "values") else params
        self.params = [p for p in values if isinstance(p, Parameter)]
        if len(self.params) != len(list(values)):
            raise TypeError("Trainer: params must be Parameters (use net.collect_params())")

    def set_learning_rate(self, lr: float) -> None:
        self.learning_rate = float(lr)

    def step(self, batch_size: int, ignore_stale_grad: bool = False) -> None:
        """One SGD update of every parameter with its gradient averaged over `batch_size`."""
        scale = 1.0 / batch_size
        with autograd.phase("kvstore"):  # MXNet sums and updates in its kvstore, in C++
            self._update(scale)

    def _update(self, scale: float) -> None:
        for p in self.params:
            if p.grad_req == "null":
                continue
            weights = p.list_data()
            grads = [w.grad for w in weights]
            if len(weights) > 1:
                self.allreduce(grads)
            for w, g in zip(weights, grads, strict=True):
                w.nd.sgd_update(w, g, self.learning_rate, wd=self.wd, rescale_grad=scale)


__all__ = ["Trainer"]
