"""Data parallelism on two GPUs (8.5): a Gluon MLP whose batches are split over gpu(0) and gpu(1),
with the Trainer summing the gradients across them, ends with the weights that one GPU reaches
with the whole batch, both replicas equal. Under the CUDA simulator (tests/conftest.py) gpu(0)
and gpu(1) are realexec's two virtual devices, each with its own streams and lanes; on a real
machine the test needs two GPUs. The simulator runs every CUDA thread as a Python thread, so the
MLP is tiny and trains two batches of 8.
"""

from __future__ import annotations

import numpy as np
import pytest

import realexec
from asyncsim import autograd, gluon, init
from asyncsim.gluon import nn
from asyncsim.gluon import utils as gutils
from realexec.gpu import kernels as gpu

if not gpu.available():
    pytest.skip(gpu.device_error(0), allow_module_level=True)

pytestmark = [pytest.mark.cudasim, pytest.mark.usefixtures("quick_simulator_barriers")]

STEPS, BATCH, LR = 2, 8, 0.3


def _start(shape, k):
    return np.random.default_rng(k).standard_normal(shape) * 0.5


def _train(nd, ctx):
    """A Gluon MLP trained STEPS batches of BATCH split over the devices `ctx`: for every
    parameter, each replica's (context, weights)."""
    rng = np.random.default_rng(0)
    net = nn.Sequential()
    net.add(nn.Dense(5, activation="relu"), nn.Dense(3))
    net.initialize(init.Normal(sigma=0.5), ctx=ctx)
    net(nd.ones((2, 4), ctx=ctx[0]))  # deferred initialisation, then the same start values
    for k, p in enumerate(net.collect_params().values()):
        p.set_data(nd.array(_start(p.shape, k)))
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": LR}, kvstore="device")
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    for _ in range(STEPS):
        X = nd.array(rng.standard_normal((BATCH, 4)))
        y = nd.array(rng.integers(0, 3, BATCH))
        xs, ys = gutils.split_and_load(X, ctx), gutils.split_and_load(y, ctx)
        with autograd.record():
            ls = [loss(net(a), b) for a, b in zip(xs, ys, strict=True)]
        for l in ls:  # noqa: E741
            l.backward()
        trainer.step(BATCH)
    return [[(a.context, a.asnumpy()) for a in p.list_data()]
            for p in net.collect_params().values()]


@pytest.mark.two_gpus
def test_two_gpus_end_with_one_gpus_weights():
    """Half a batch on each of gpu(0) and gpu(1) and summed gradients take the same SGD steps
    as gpu(0) alone with the whole batch (and as cpu(0), a check on the GPU kernels); the two
    replicas stay on their devices and hold the same weights, which moved from the start."""
    with realexec.session(workers=1) as nd:
        g0, g1 = nd.gpu(0), nd.gpu(1)
        two = _train(nd, [g0, g1])
    with realexec.session(workers=1) as nd:
        one = _train(nd, [nd.gpu(0)])
    with realexec.session(workers=1) as nd:
        cpu = _train(nd, [nd.cpu(0)])
    assert len(two) == len(one) == len(cpu) == 4  # two Dense layers: a weight and a bias each
    for k, ((ctx0, first), (ctx1, second)) in enumerate(two):
        ((one_ctx, single),), ((_, on_cpu),) = one[k], cpu[k]
        assert (ctx0, ctx1, one_ctx) == (g0, g1, g0)
        assert first.dtype == single.dtype == np.float32
        np.testing.assert_array_equal(first, second)
        np.testing.assert_allclose(first, single, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(first, on_cpu, rtol=1e-5, atol=1e-6)
        assert not np.allclose(first, _start(first.shape, k), rtol=1e-3, atol=1e-4)
