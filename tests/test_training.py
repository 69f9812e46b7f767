"""Training on the real engine ends where numpy's training ends, whatever the engine's mode.

A from-scratch MLP (`attach_grad`, the manual SGD step `param[:] = param - lr * param.grad /
batch_size`) and a Gluon MLP (`Trainer('sgd')`, `L2Loss`) train k minibatch steps without a
blocker between them, under one worker, two workers, sync mode and light results (two
workers and sync: `realexec.cpu.light`, whose lent weights are written by the SGD step); a plain
float64 numpy implementation of the same training, started from the initial weights read from
the parameters, must reach the same weights. A small LeNet on learnable synthetic images must
lower its loss clearly within a few dozen steps.
"""

from __future__ import annotations

import numpy as np
import pytest

import realexec
from asyncsim import autograd, gluon, init
from asyncsim.gluon import nn

ENGINES = [dict(workers=1), dict(workers=2), dict(mode="sync"),
           dict(workers=2, engine="native-light"), dict(mode="sync", engine="native-light")]
IDS = ["workers=1", "workers=2", "sync", "light", "light-sync"]
STEPS, BATCH, LR = 8, 4, 0.1


def _dataset(seed=0, n=16, width=5):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, width))
    y = np.sin(X @ rng.standard_normal((width, 1))) + 0.1 * rng.standard_normal((n, 1))
    return X, y


def numpy_mlp(X, y, W1, b1, W2, b2, steps, lr, batch):
    """The same training in float64 numpy: relu(X W1 + b1) W2 + b2, half squared error
    summed over the batch, w -= lr * grad / batch."""
    W1, b1, W2, b2 = (np.asarray(a, np.float64).copy() for a in (W1, b1, W2, b2))
    n = len(X)
    for step in range(steps):
        rows = slice(step * batch % n, step * batch % n + batch)
        x, t = X[rows], y[rows]
        z = x @ W1 + b1
        h = np.maximum(z, 0)
        out = h @ W2 + b2
        g_out = out - t
        g_W2, g_b2 = h.T @ g_out, g_out.sum(0)
        g_z = (g_out @ W2.T) * (z > 0)
        g_W1, g_b1 = x.T @ g_z, g_z.sum(0)
        for w, g in ((W1, g_W1), (b1, g_b1), (W2, g_W2), (b2, g_b2)):
            w -= lr * g / batch
    return W1, b1, W2, b2


@pytest.mark.parametrize("engine", ENGINES, ids=IDS)
def test_scratch_mlp_matches_numpy(engine):
    """attach_grad, record, backward and `param[:] = param - lr * param.grad / batch_size`,
    issued for every step with no blocker in between: numpy's weights at the end."""
    X, y = _dataset()
    with realexec.session(**engine) as nd:
        W1 = nd.random.normal(scale=0.5, shape=(5, 8))
        b1 = nd.random.normal(scale=0.1, shape=(8,))
        W2 = nd.random.normal(scale=0.5, shape=(8, 1))
        b2 = nd.zeros(shape=1)
        params = [W1, b1, W2, b2]
        start = [p.asnumpy() for p in params]
        for p in params:
            p.attach_grad()
        features, labels = nd.array(X), nd.array(y)
        for step in range(STEPS):
            first = step * BATCH % len(X)
            x, t = features[first:first + BATCH], labels[first:first + BATCH]
            with autograd.record():
                out = nd.dot(nd.relu(nd.dot(x, W1) + b1), W2) + b2
                loss = (out - t) * (out - t) / 2
            loss.backward()
            for p in params:
                p[:] = p - LR * p.grad / BATCH
        got = [p.asnumpy() for p in params]
    want = numpy_mlp(X, y, *start, STEPS, LR, BATCH)
    for g, w, s in zip(got, want, start, strict=True):
        assert not np.allclose(w, s)  # the weights moved
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("engine", ENGINES, ids=IDS)
def test_gluon_mlp_matches_numpy(engine):
    """A Sequential of Dense layers, L2Loss and Trainer('sgd').step(batch_size), issued for
    every step with no blocker in between: numpy's weights at the end."""
    X, y = _dataset(seed=1)
    net = nn.Sequential()
    net.add(nn.Dense(8, activation="relu"), nn.Dense(1))
    net.initialize(init=init.Normal(sigma=0.5))
    l2 = gluon.loss.L2Loss()
    with realexec.session(**engine) as nd:
        features, labels = nd.array(X), nd.array(y[:, 0])  # (batch,) labels, as the book's
        net(features[:1])  # parameters are made at the first call
        hidden, output = net[0], net[1]
        layers = (hidden.weight, hidden.bias, output.weight, output.bias)
        W1, b1, W2, b2 = (p.data().asnumpy() for p in layers)
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": LR})
        for step in range(STEPS):
            first = step * BATCH % len(X)
            x, t = features[first:first + BATCH], labels[first:first + BATCH]
            with autograd.record():
                loss = l2(net(x), t)
            loss.backward()
            trainer.step(BATCH)
        got = [p.data().asnumpy() for p in layers]
    want = numpy_mlp(X, y, W1.T, b1, W2.T, b2, STEPS, LR, BATCH)
    for g, w in zip(got, (want[0].T, want[1], want[2].T, want[3]), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def _images(seed=0, n=8, size=12):
    """Learnable images: class 0 has a bright vertical bar, class 1 a horizontal one, at a
    random place, in noise."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 2
    images = 0.3 * rng.standard_normal((n, 1, size, size))
    for i, label in enumerate(labels):
        at = rng.integers(2, size - 2)
        if label == 0:
            images[i, 0, :, at] += 1.5
        else:
            images[i, 0, at, :] += 1.5
    return images, labels


def test_lenet_loss_falls():
    """A small LeNet (Conv2D, AvgPool2D, Dense, SoftmaxCrossEntropyLoss, Trainer) on learnable
    8x1x12x12 images: the mean loss of the last steps is under half the first one's after 30
    steps."""
    images, labels = _images()
    net = nn.Sequential()
    net.add(nn.Conv2D(4, kernel_size=3, activation="relu"), nn.AvgPool2D(2),
            nn.Conv2D(8, kernel_size=3, activation="relu"), nn.AvgPool2D(2),
            nn.Dense(16, activation="relu"), nn.Dense(2))
    net.initialize(init=init.Xavier())
    ce = gluon.loss.SoftmaxCrossEntropyLoss()
    losses = []
    with realexec.session(workers=1) as nd:
        x, t = nd.array(images), nd.array(labels)
        trainer = None
        for _ in range(30):
            with autograd.record():
                loss = ce(net(x), t)
            loss.backward()
            if trainer is None:  # the parameters exist after the first forward
                trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 1.0})
            trainer.step(len(images))
            losses.append(loss.mean())
        losses = [float(mean.asscalar()) for mean in losses]
    assert np.mean(losses[-3:]) < 0.5 * losses[0], losses
