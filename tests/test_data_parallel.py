"""Data parallelism across devices (8.4, 8.5): training on two CPU devices ends where one device
with the same total batch ends, allreduce leaves the sum everywhere, split_and_load refuses a
batch that does not divide, and CPU devices share the CPU's workers in the engine and in the
model, each device's ops shown on lanes of its own."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncsim
import realexec
from asyncsim import autograd, gluon, init
from asyncsim.gluon import kvstore, nn
from asyncsim.gluon import utils as gutils
from asyncsim.lab.scenarios import data_parallel as dp


def _train(nd, devices: int, steps: int = 3, kv: str = "device"):
    """A Gluon MLP trained `steps` batches of 8 split over `devices` CPU devices; its weights."""
    rng = np.random.default_rng(0)
    ctx = [nd.cpu(i) for i in range(devices)]
    net = nn.Sequential()
    net.add(nn.Dense(5, activation="relu"), nn.Dense(3))
    net.initialize(init.Normal(sigma=0.5), ctx=ctx)
    net(nd.ones((2, 4), ctx=ctx[0]))  # deferred initialisation, then the same start values
    for k, p in enumerate(net.collect_params().values()):
        p.set_data(nd.array(np.random.default_rng(k).standard_normal(p.shape) * 0.5))
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.3}, kvstore=kv)
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    for _ in range(steps):
        X = nd.array(rng.standard_normal((8, 4)))
        y = nd.array(rng.integers(0, 3, 8))
        xs, ys = gutils.split_and_load(X, ctx), gutils.split_and_load(y, ctx)
        with autograd.record():
            ls = [loss(net(a), b) for a, b in zip(xs, ys, strict=True)]
        for l in ls:  # noqa: E741
            l.backward()
        trainer.step(8)
    return [[a.asnumpy() for a in p.list_data()] for p in net.collect_params().values()]


@pytest.mark.parametrize("kv", ["device", "ring"])
def test_two_cpu_devices_end_with_one_devices_weights(kv):
    """Two devices with half a batch each and summed gradients take the same SGD steps as one
    device with the whole batch; both replicas hold the same weights."""
    with realexec.session(workers=1) as nd:
        one = _train(nd, 1)
    with realexec.session(workers=1) as nd:
        two = _train(nd, 2, kv=kv)
    for (single,), (first, second) in zip(one, two, strict=True):
        np.testing.assert_allclose(first, single, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(first, second)


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 9), cols=st.integers(1, 3), devices=st.integers(1, 3),
       method=st.sampled_from(sorted(kvstore.ALLREDUCE)))
def test_allreduce_leaves_the_sum_on_every_device(rows, cols, devices, method):
    """Through device 0 or round a ring, every device ends with the sum of all the arrays,
    whatever the shape (fewer rows than devices included)."""
    rng = np.random.default_rng(rows * 10 + cols)
    values = [rng.standard_normal((rows, cols)) for _ in range(devices)]
    with realexec.session(workers=1) as nd:
        arrays = [nd.array(v, ctx=nd.cpu(i)) for i, v in enumerate(values)]
        kvstore.ALLREDUCE[method](arrays)
        for i, a in enumerate(arrays):
            assert a.context == nd.cpu(i)
            np.testing.assert_allclose(a.asnumpy(), sum(values), rtol=1e-5, atol=1e-5)


def test_split_and_load_refuses_a_batch_that_does_not_divide():
    """8.4's split_and_load asserts the book's message; Gluon's names the shape and the fix."""
    with realexec.session(workers=1) as nd:
        batch = nd.ones((5, 2))
        ctx = [nd.cpu(0), nd.cpu(1)]
        with pytest.raises(AssertionError, match="not divided by # devices"):
            dp.split_and_load(batch, ctx)
        with pytest.raises(ValueError, match="cannot be evenly split into 2 slices"):
            gutils.split_and_load(batch, ctx)
        parts = gutils.split_and_load(nd.ones((4, 2)), ctx)
        assert [p.context for p in parts] == ctx and [p.shape for p in parts] == [(2, 2)] * 2


def test_chapter_lenet_on_two_cpu_devices_matches_one():
    """8.4's from-scratch LeNet: one batch on two CPU devices (the chapter's allreduce and SGD)
    leaves device 0's parameters equal to one device's after the same batch."""
    rng = np.random.default_rng(1)
    X, y = rng.random((4, 1, 12, 12)), rng.integers(0, 10, 4).astype(float)

    def step(nd, devices):
        ctx = [nd.cpu(i) for i in range(devices)]
        params = [nd.array(np.random.default_rng(k).standard_normal(p.shape) * 0.1)
                  for k, p in enumerate(dp.lenet_params(nd))]
        replicas = [dp.get_params(params, c) for c in ctx]
        loss = gluon.loss.SoftmaxCrossEntropyLoss()
        xs, ys = dp.split_and_load(nd.array(X), ctx), dp.split_and_load(nd.array(y), ctx)
        with autograd.record():
            ls = [loss(_small_lenet(nd, a, w), b) for a, b, w in zip(xs, ys, replicas,
                                                                  strict=True)]
        for l in ls:  # noqa: E741
            l.backward()
        for i in range(len(replicas[0])):
            dp.allreduce([replicas[c][i].grad for c in range(devices)])
        for param in replicas:
            for p in param:
                p[:] = p - 0.1 * p.grad / 4
        return [p.asnumpy() for p in replicas[0]]

    with realexec.session(workers=1, seed=3) as nd:
        one = step(nd, 1)
    with realexec.session(workers=1, seed=3) as nd:
        two = step(nd, 2)
    for a, b in zip(one, two, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def _small_lenet(nd, X, params):
    """The chapter's LeNet on 12x12 images: 12 -> 10 -> 5 -> 1 (so W3 takes 50 inputs)."""
    h = nd.Pooling(nd.relu(nd.Convolution(X, params[0], params[1], kernel=(3, 3),
                                          num_filter=20)), pool_type='avg', kernel=(2, 2),
                   stride=(2, 2))
    h = nd.Pooling(nd.relu(nd.Convolution(h, params[2], params[3], kernel=(5, 5),
                                          num_filter=50)), pool_type='avg', kernel=(1, 1))
    h = nd.flatten(h)
    w3 = params[4][:50]
    return nd.dot(nd.relu(nd.dot(h, w3) + params[5]), params[6]) + params[7]


def test_the_model_runs_cpu_devices_on_the_cpus_workers():
    """cpu(0) and cpu(1) share the CPU's workers (the same cores): two devices of independent
    work take half the time of one with two workers, and no less than one device with one
    worker; each op shows on its own device's lane."""
    def work(nd, devices=2):
        xs = [nd.ones((64, 64), ctx=nd.cpu(i % devices)) for i in range(4)]
        with nd.benchmark("products"):
            for x in xs:
                for _ in range(5):
                    x = nd.dot(x, x)
            nd.waitall()

    def predict(workers, devices):
        profile = asyncsim.Profile.ideal(t1=1e-6, t2=1e-3, t3=1e-6, workers=workers)
        return asyncsim.predict(work, profile, devices=devices)

    two = predict(2, devices=2)
    lanes = {s.lane for s in two.spans if s.kind == "exec"}
    assert lanes <= {"cpu/w0", "cpu/w1", "cpu1/w0", "cpu1/w1"}
    assert {lane.split("/")[0] for lane in lanes} == {"cpu", "cpu1"}
    assert two.regions["products"] == pytest.approx(
        predict(1, devices=1).regions["products"] / 2, rel=0.05)
    assert predict(1, devices=2).regions["products"] == pytest.approx(
        predict(1, devices=1).regions["products"], rel=0.01)


@pytest.mark.parametrize("engine", ["native", "python"])
def test_the_engine_runs_cpu_devices_on_the_cpus_workers(engine):
    """Naming cpu(1) starts no threads of its own: its ops run on the CPU's workers and show
    on "cpu1/w.." lanes, cpu(0)'s on "cpu/w.." lanes."""
    def work(nd):
        a = nd.ones((8, 8), ctx=nd.cpu(0)) * 2.0
        b = nd.ones((8, 8), ctx=nd.cpu(1)) * 3.0
        nd.waitall()
        return a, b

    with realexec.session(workers=2, engine=engine) as nd:
        before = set(nd._backend.engine.lanes)
        a, b = work(nd)
        assert set(nd._backend.engine.lanes) == before == {"cpu"}
        assert float(a.sum().asscalar()) == 128.0 and float(b.sum().asscalar()) == 192.0
        trace = nd._backend.trace()
    devices = {s.lane.split("/")[0] for s in trace.spans if s.kind == "exec"}
    assert devices == {"cpu", "cpu1"}


@pytest.mark.parametrize("name", ["lenet_1gpu", "lenet_2gpu", "resnet18_2gpu"])
def test_epochs_extrapolated_from_a_few_batches_match_the_whole_epoch(name, capsys):
    """The book table's epochs come from 2 and 4 simulated batches: within 1% of simulating
    all 12 batches of each of two epochs (ResNet-18 at a small batch, to keep it short)."""
    sc = asyncsim.lab.scenarios.get(name)
    profile = asyncsim.Profile.preset(sc.book_profile).replace(gpus=sc.num_gpus)
    batch = 256 if "lenet" in name else 32
    params = dict(epochs=2, batch_size=batch, num_train=12 * batch, num_test=batch)
    estimated = sc.predict_regions(profile, **params)
    whole = asyncsim.simulate(sc.record(**params), profile).regions
    assert set(estimated) == {"epoch 1", "epoch 2"}
    for label, seconds in estimated.items():
        assert seconds == pytest.approx(whole[label], rel=0.01)
    few = asyncsim.simulate(sc.record(**{**params, "num_train": 4 * batch}), profile).regions
    assert estimated["epoch 2"] > 2.5 * few["epoch 2"]  # it did scale up, 12 batches against 4
