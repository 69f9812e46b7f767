"""Gluon's losses (`gluon.loss`): one value per example, averaged over the other axes.

`L2Loss()(pred, label)` = mean over non-batch axes of weight / 2 * (pred - label)^2, the label
reshaped to the prediction's shape first (the book passes a (batch,) label for a (batch, 1)
prediction). `SoftmaxCrossEntropyLoss()(pred, label)` = -log softmax(pred)[label] per example,
labels as class indices (sparse_label=True, from_logits=False, MXNet's defaults).
"""

from __future__ import annotations

from asyncsim.gluon.block import HybridBlock


class Loss(HybridBlock):
    def __init__(self, weight=None, batch_axis=0, **kwargs):
        super().__init__(**kwargs)
        if batch_axis != 0:
            raise ValueError(f"{type(self).__name__}: only batch_axis=0 is supported")
        self.weight = weight

    def _per_example(self, F, loss):
        if self.weight is not None:
            loss = loss * float(self.weight)
        if len(loss.shape) <= 1:
            return loss
        return F.mean(loss, axis=tuple(range(1, len(loss.shape))))


class L2Loss(Loss):
    def __init__(self, weight=1.0, batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)

    def hybrid_forward(self, F, pred, label):
        if label.shape != pred.shape:
            label = F.reshape(label, pred.shape)
        diff = pred - label
        return self._per_example(F, diff * diff * 0.5)


class SoftmaxCrossEntropyLoss(Loss):
    def __init__(self, axis=-1, sparse_label=True, from_logits=False, weight=None,
                 batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        if axis not in (-1, 1) or not sparse_label or from_logits:
            raise ValueError("SoftmaxCrossEntropyLoss: only axis=-1, sparse_label=True and "
                             "from_logits=False are supported")

    def hybrid_forward(self, F, pred, label):
        return self._per_example(F, F.softmax_cross_entropy(pred, label))


__all__ = ["L2Loss", "Loss", "SoftmaxCrossEntropyLoss"]
