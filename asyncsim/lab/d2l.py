"""The book's helper package (`d2lzh`, imported as `d2l`) over the shared `nd`, so the chapters'
listings run nearly verbatim: `from asyncsim.lab import d2l`.

The helpers the book calls without an `nd` use the one the workload runs on
(`asyncsim.nd.frontend.current()`): recorded for the model, or the real engine.

Timing is honest about which clock exists. A real run (the engine, a session) has a wall clock:
`Benchmark` prints the seconds of its region and `Timer.stop()` returns wall seconds. A
recording runs nothing, so it has no time to tell: `Benchmark` opens the same `nd.benchmark`
region, whose simulated time the prediction's `Trace.regions` holds, and prints where to find
it instead of a number; `Timer.stop()` returns NaN there (printed as "nan").

Also here: `sgd` (in place, as the book's), `evaluate_accuracy` (8.5's: over a list of
contexts), `load_data_fashion_mnist` (`asyncsim.lab.data`: the real files if the user has them,
else a synthetic stand-in), `resnet18` with `Residual` (8.5's code), `try_gpu`/`try_all_gpus`
and Gluon's `split_and_load`. Units: seconds.
"""

from __future__ import annotations

import math
from time import perf_counter

from asyncsim.gluon import nn
from asyncsim.gluon.utils import split_and_load
from asyncsim.lab.data import get_fashion_mnist_labels, load_data_fashion_mnist
from asyncsim.nd.frontend import current
from asyncsim.nd.ndarray import CPU, Context
from asyncsim.nd.record import Recorder


def _current_or_none():
    try:
        return current()
    except RuntimeError:
        return None


def has_clock(nd) -> bool:
    """Whether a run on `nd` takes time here: False for a recording, which only writes a
    program (its times come from simulating it), True otherwise."""
    return not isinstance(nd._backend, Recorder)


# -- timing ----------------------------------------------------------------------------------
class Benchmark:
    """`with Benchmark('prefix'):` times its block as the region `prefix` of the run (`'Done'`
    without one) and prints "<prefix> time: X sec" as the book does. `seconds` holds the time
    afterwards: wall seconds on a real run, None on a recording (its simulated time is the
    prediction's `Trace.regions[label]`)."""

    def __init__(self, prefix: str | None = None, nd=None):
        self.prefix = prefix + ' ' if prefix else ''
        self.label = prefix or 'Done'
        self.nd = nd
        self.seconds = None

    def __enter__(self):
        nd = self.nd if self.nd is not None else current()
        self._clock = has_clock(nd)
        self._region = nd.benchmark(self.label)
        self._region.__enter__()
        self._start = perf_counter()  # inside the region: the two clocks differ by microseconds
        return self

    def __exit__(self, *exc):
        elapsed = perf_counter() - self._start
        self._region.__exit__(*exc)
        if exc[0] is not None:
            return False
        if self._clock:
            self.seconds = elapsed
            print('%stime: %.4f sec' % (self.prefix, elapsed))  # noqa: UP031 (the book's)
        else:
            print(f'{self.prefix}time: recorded, not run (the prediction times it as region '
                  f'{self.label!r})')
        return False


class Timer:
    """d2l's Timer: `stop()` gives the seconds since the last `start()` (made at construction)
    and keeps them in `times`. Wall seconds on a real run or outside any workload; NaN when the
    active `nd` (or the one given) is a recording, which has no time to tell (wrap the timed
    code in `nd.benchmark(label)` for the prediction's)."""

    def __init__(self, nd=None):
        self.nd = nd
        self.times: list[float] = []
        self.start()

    def start(self) -> None:
        self.tik = perf_counter()

    def stop(self) -> float:
        elapsed = perf_counter() - self.tik
        nd = self.nd if self.nd is not None else _current_or_none()
        self.times.append(elapsed if nd is None or has_clock(nd) else math.nan)
        return self.times[-1]

    def avg(self) -> float:
        return sum(self.times) / len(self.times)

    def sum(self) -> float:
        return sum(self.times)

    def cumsum(self) -> list[float]:
        out, total = [], 0.0
        for t in self.times:
            total += t
            out.append(total)
        return out


# -- training helpers ------------------------------------------------------------------------
def sgd(params, lr, batch_size):
    """Minibatch SGD in place: each parameter moves by lr times its gradient over the batch."""
    for param in params:
        param[:] = param - lr * param.grad / batch_size


def _get_batch(batch, ctx):
    """Features and labels of `batch` split over the contexts `ctx`, and the batch size."""
    features, labels = batch
    if labels.dtype != features.dtype:
        labels = labels.astype(features.dtype)
    return (split_and_load(features, ctx), split_and_load(labels, ctx), features.shape[0])


def evaluate_accuracy(data_iter, net, ctx=None):
    """The share of examples whose largest output is their label (8.5's version: each batch is
    split over `ctx`, a context or a list, default [cpu(0)]). Zero on a recording, which has no
    values."""
    if ctx is None:
        ctx = [CPU]
    if isinstance(ctx, Context):
        ctx = [ctx]
    acc_sum, n = current().array([0]), 0
    for batch in data_iter:
        features, labels, _ = _get_batch(batch, ctx)
        for X, y in zip(features, labels, strict=True):
            y = y.astype('float32')
            acc_sum += (net(X).argmax(axis=1) == y).sum().copyto(CPU)
            n += y.size
        acc_sum.wait_to_read()
    if n == 0:
        raise ValueError("evaluate_accuracy: the data iterator yielded no examples")
    return acc_sum.asscalar() / n


# -- devices ---------------------------------------------------------------------------------
def try_gpu():
    """gpu(0) if the active `nd` can use it, else cpu(0). A recording accepts any GPU (the
    profile it is simulated with decides which exist), so there it is gpu(0)."""
    nd = current()
    try:
        return nd.gpu(0)
    except (ValueError, RuntimeError):
        return nd.cpu()


def try_all_gpus(max_gpus: int = 16):
    """gpu(0), gpu(1), .. as far as the active `nd` can use them (at most `max_gpus`), else
    [cpu(0)]. A recording accepts every GPU name, so there it gives `max_gpus` of them: pass the
    number the prediction's profile has."""
    nd = current()
    contexts = []
    for i in range(max_gpus):
        try:
            contexts.append(nd.gpu(i))
        except (ValueError, RuntimeError):
            break
    return contexts or [nd.cpu()]


# -- 8.5's ResNet-18 -------------------------------------------------------------------------
class Residual(nn.Block):
    """The residual block: two 3x3 convolutions with batch norm, and a 1x1 convolution on the
    shortcut when the channels or the stride change."""

    def __init__(self, num_channels, use_1x1conv=False, strides=1, **kwargs):
        super().__init__(**kwargs)
        self.conv1 = nn.Conv2D(num_channels, kernel_size=3, padding=1, strides=strides)
        self.conv2 = nn.Conv2D(num_channels, kernel_size=3, padding=1)
        if use_1x1conv:
            self.conv3 = nn.Conv2D(num_channels, kernel_size=1, strides=strides)
        else:
            self.conv3 = None
        self.bn1 = nn.BatchNorm()
        self.bn2 = nn.BatchNorm()

    def forward(self, X):
        nd = X.nd  # the book's global `nd` is the one the input lives on
        Y = nd.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3:
            X = self.conv3(X)
        return nd.relu(Y + X)


def resnet18(num_classes):
    """8.5's ResNet-18: a 3x3 convolution with stride 1 and padding 1 at the start and no max
    pooling (the images keep their 28x28 size), four stages of two residual blocks."""
    def resnet_block(num_channels, num_residuals, first_block=False):
        blk = nn.Sequential()
        for i in range(num_residuals):
            if i == 0 and not first_block:
                blk.add(Residual(num_channels, use_1x1conv=True, strides=2))
            else:
                blk.add(Residual(num_channels))
        return blk

    net = nn.Sequential()
    # a smaller kernel, stride and padding than 5.11's, and no max pooling
    net.add(nn.Conv2D(64, kernel_size=3, strides=1, padding=1),
            nn.BatchNorm(), nn.Activation('relu'))
    net.add(resnet_block(64, 2, first_block=True),
            resnet_block(128, 2),
            resnet_block(256, 2),
            resnet_block(512, 2))
    net.add(nn.GlobalAvgPool2D(), nn.Dense(num_classes))
    return net


__all__ = ["Benchmark", "Residual", "Timer", "evaluate_accuracy", "get_fashion_mnist_labels",
           "has_clock", "load_data_fashion_mnist", "resnet18", "sgd", "split_and_load",
           "try_all_gpus", "try_gpu"]
