"""The exercises of 8.1 (hybridize), 8.4 and 8.5 (multi-GPU training): their plausible wrong
answers (`WRONG`, which test_exercises.py runs with the other chapters', beside every reference
answer), and what only these check: a split that leaves the CPU idle, the English keys, and each
open question's demonstration, which runs and shows what its worked answer says.

The wrong answers are what a student might write: a net that hybridize cannot trace, batches
too large to gain from it, the chapter's minibatch left split, the section's allreduce or one
that forgets to copy the sums back, an accuracy averaged over batches, a split in proportion to
speed. Checks run on the book's profiles (deterministic) and, where they need values, on the
engine with CPU devices at small sizes; no assertion depends on a measured time.
"""

import math

import pytest

from asyncsim import autograd, exercises
from asyncsim.gluon import Trainer, nn
from asyncsim.gluon import loss as gloss
from asyncsim.lab import d2l
from asyncsim.lab.exercises.hybridize import lenet_predict
from asyncsim.lab.exercises.multi_device_allreduce import section_allreduce
from asyncsim.lab.scenarios.data_parallel import lenet_data_parallel, split_and_load

OPEN = ["8.1-1", "8.1-2", "8.4-2", "8.5-1"]


# -- 8.1-3: wrong answers -------------------------------------------------------------------------
class BlockMLP(nn.Block):
    """3.9's MLP written as a Block with its own parameters: nothing for hybridize() to trace."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.W1, self.W2 = self.param("W1", (784, 256)), self.param("W2", (256, 10))

    def forward(self, x):
        nd = x.nd
        W1, W2 = (p.on(nd, x.ctx) for p in (self.W1, self.W2))
        return nd.dot(nd.relu(nd.dot(x, W1)), W2)


def block_net(nd, hybridize=True, num_batches=20):
    net = BlockMLP()
    net.initialize()
    X = nd.random.normal(shape=(1, 784))
    net(X).wait_to_read()
    if hybridize:
        net.hybridize()
    with nd.benchmark('predict'):
        for _ in range(num_batches):
            net(X)
        nd.waitall()


def hybridize_after_timing(nd, hybridize=True, num_batches=20):
    net = nn.HybridSequential()
    net.add(nn.Dense(256, activation='relu'), nn.Dense(10))
    net.initialize()
    X = nd.random.normal(shape=(1, 784))
    with nd.benchmark('predict'):
        for _ in range(num_batches):
            net(X)
        nd.waitall()
    if hybridize:
        net.hybridize()
        net(X)


def large_batches(nd, hybridize=True, num_batches=20):
    lenet_predict(nd, hybridize, num_batches, batch_size=256)


def always_hybridized(nd, hybridize=True, num_batches=20):
    lenet_predict(nd, True, num_batches)


def trains_hybridized(nd, hybridize=True, num_batches=20):
    net = nn.HybridSequential()
    net.add(nn.Dense(256, activation='relu'), nn.Dense(10))
    net.initialize()
    if hybridize:
        net.hybridize()
    trainer = Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.1})
    loss = gloss.SoftmaxCrossEntropyLoss()
    X, y = nd.random.normal(shape=(1, 784)), nd.ones((1,))
    with nd.benchmark('predict'):
        for _ in range(num_batches):
            with autograd.record():
                l = loss(net(X), y)  # noqa: E741
            l.backward()
            trainer.step(1)
        nd.waitall()


class AsnumpyBlock(nn.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = nn.Dense(10)

    def hybrid_forward(self, F, x):
        print(x.asnumpy().shape)
        return self.dense(x)


def asnumpy_inside(nd, hybridize=True, num_batches=20):
    net = AsnumpyBlock()
    net.initialize()
    if hybridize:
        net.hybridize()
    X = nd.random.normal(shape=(1, 784))
    with nd.benchmark('predict'):
        for _ in range(num_batches):
            net(X)
        nd.waitall()


# -- 8.4: wrong answers ---------------------------------------------------------------------------
def chapter_split(nd, num_devices=2, batch_size=256, num_train=4096):
    """8.4-1 wrong: the chapter's train as it is, the minibatch of b split over the GPUs."""
    lenet_data_parallel(nd, num_devices, batch_size, epochs=1, num_train=num_train,
                        num_test=batch_size)


def one_gpu(nd, num_devices=2, batch_size=256, num_train=4096):
    """8.4-1 wrong: the scaled minibatch, on one GPU."""
    lenet_data_parallel(nd, 1, num_devices * batch_size, epochs=1, num_train=num_train,
                        num_test=batch_size)


def longer_epoch(nd, num_devices=2, batch_size=256, num_train=4096):
    """8.4-1 wrong: the data scaled along with the minibatch."""
    lenet_data_parallel(nd, num_devices, num_devices * batch_size, epochs=1,
                        num_train=num_devices * num_train, num_test=batch_size)


def interleaved(grads):
    """8.4-3 wrong: homes spread, but each parameter gathered, summed and sent back in turn."""
    k = len(grads)
    for i in range(len(grads[0])):
        home = grads[i % k][i]
        for c in range(k):
            if c != i % k:
                home[:] += grads[c][i].copyto(home.context)
        for c in range(k):
            if c != i % k:
                home.copyto(grads[c][i])


def no_copy_back(grads):
    """8.4-3 wrong: summed on the home device, never sent back."""
    k = len(grads)
    for i in range(len(grads[0])):
        home = grads[i % k][i]
        for c in range(k):
            if c != i % k:
                home[:] += grads[c][i].copyto(home.context)


def new_arrays(grads):
    """8.4-3 wrong: the sums put into the lists as new arrays, the gradients untouched."""
    k = len(grads)
    for i in range(len(grads[0])):
        total = grads[0][i]
        for c in range(1, k):
            total = total + grads[c][i].copyto(total.context)
        for c in range(k):
            grads[c][i] = total.copyto(grads[c][i].context)


def first_device_only(data_iter, nets, ctx):
    """8.4-4 wrong: the single-device evaluation."""
    return d2l.evaluate_accuracy(data_iter, nets[0], ctx[0])


def mean_of_batches(data_iter, nets, ctx):
    """8.4-4 wrong: per-batch accuracies averaged, so the short last batch weighs too much."""
    accs = []
    for X, y in data_iter:
        hits = 0.0
        for part_X, part_y, net in zip(split_and_load(X, ctx), split_and_load(y, ctx), nets,
                                       strict=True):
            hits += (net(part_X).argmax(axis=1) == part_y).sum().asscalar()
        accs.append(hits / X.shape[0])
    return sum(accs) / len(accs)


def every_device_whole_batch(data_iter, nets, ctx):
    """8.4-4 wrong: every device evaluates the whole batch."""
    hits = n = 0
    for X, y in data_iter:
        for net, c in zip(nets, ctx, strict=True):
            hits += (net(X.as_in_context(c)).argmax(axis=1) == y.as_in_context(c)).sum() \
                .asscalar()
            n += y.shape[0]
    return hits / n


# -- 8.5-2: wrong answers -------------------------------------------------------------------------
def even_split(batch_size, devices, step_time):
    third = batch_size // len(devices)
    return [third] * (len(devices) - 1) + [batch_size - third * (len(devices) - 1)]


def by_speed(batch_size, devices, step_time):
    """In proportion to each device's speed on the whole batch: fixed costs ignored."""
    speeds = [1 / step_time(d, batch_size) for d in devices]
    shares = [math.floor(batch_size * s / sum(speeds)) for s in speeds]
    shares[0] += batch_size - sum(shares)
    return shares


def by_time(batch_size, devices, step_time):
    """In proportion to time: the slowest device gets the most."""
    times = [step_time(d, batch_size) for d in devices]
    shares = [math.floor(batch_size * t / sum(times)) for t in times]
    shares[0] += batch_size - sum(shares)
    return shares


def rounded_down(batch_size, devices, step_time):
    speeds = [1 / step_time(d, batch_size) for d in devices]
    return [int(batch_size * s / sum(speeds)) for s in speeds]


def gpus_only(batch_size, devices, step_time):
    return [batch_size // 2, batch_size // 2, 0]


WRONG = [
    ("8.1-3", block_net, "has no graph op"),
    ("8.1-3", hybridize_after_timing, "only outside region"),
    ("8.1-3", large_batches, "the computation, not the frontend, is the bottleneck"),
    ("8.1-3", always_hybridized, "with hybridize=False your net still ran as a graph"),
    ("8.1-3", trains_hybridized, "trains (autograd.record and backward)"),
    ("8.1-3", asnumpy_inside, "raised HybridizeError"),
    ("8.4-1", chapter_split, "you split the chapter's minibatch across the GPUs"),
    ("8.4-1", one_gpu, "convolved images on gpu0 only"),
    ("8.4-1", longer_epoch, "not num_train=4096"),
    ("8.4-3", section_allreduce, "every sum was computed on gpu0"),
    ("8.4-3", interleaved, "a copy back that waits for its sum holds up"),
    ("8.4-3", no_copy_back, "the sum never reached it"),
    ("8.4-3", new_arrays, "new arrays into the lists"),
    ("8.4-4", first_device_only, "all of the evaluation ran on gpu0"),
    ("8.4-4", mean_of_batches, "differs from a single device's"),
    ("8.4-4", every_device_whole_batch, "each image should be evaluated once"),
    ("8.5-2", even_split, "no faster than an even split"),
    ("8.5-2", by_time, "no faster than an even split"),
    ("8.5-2", by_speed, "slower than leaving the CPU idle"),
    ("8.5-2", rounded_down, "not the batch's 8192"),
]


# -- tests ----------------------------------------------------------------------------------------
def test_a_split_that_leaves_the_cpu_idle_passes_and_says_so():
    """8.5-2: "not worth the effort" is an answer: the GPUs alone pass, and the reason says the
    CPU was left idle; the reference's split, which gives the CPU a share, is faster."""
    idle = exercises.check("8.5-2", gpus_only)
    best = exercises.check("8.5-2", exercises.reference("8.5-2"))
    assert idle.passed and "left the CPU idle" in idle.reason
    assert "examples save" in best.reason


def test_english_keys_are_aliases():
    """The English sections' numbers reach the same exercises."""
    for zh, en in (("8.1-3", "12.1-3"), ("8.4-1", "12.5-1"), ("8.4-4", "12.5-4"),
                   ("8.5-2", "12.6-2")):
        assert exercises.get(en) is exercises.get(zh)


@pytest.mark.parametrize("key", OPEN)
def test_open_question_is_refused_by_check(key):
    """check refuses an open question, pointing at its worked answer."""
    with pytest.raises(exercises.OpenQuestionError, match="reference"):
        exercises.check(key, lambda nd: None)
    assert len(exercises.reference(key).text) > 200


def test_asnumpy_demo_fails_only_once_hybridized():
    """8.1-1: the imperative call returns values; the hybridized one fails at the trace, the
    error naming asnumpy."""
    lines = exercises.reference("8.1-1").demo().splitlines()
    assert lines[0].startswith("imperative call: net(x) = [")
    assert lines[1].startswith("hybridized call: HybridizeError") and "asnumpy" in lines[1]


def test_control_flow_demo_unrolls_freezes_and_fails():
    """8.1-2: the loop is unrolled (its body's ops `depth` times in the graph); the imperative
    calls alternate branches while the hybridized ones repeat the traced branch, their Python
    running once; the data-dependent `if` fails."""
    lines = exercises.reference("8.1-2").demo(depth=2, calls=4).splitlines()
    assert lines[0].count("relu") == 2
    imperative, hybridized = (line.split("[")[1].split("]")[0].split(", ")
                              for line in lines[1:3])
    assert len(set(imperative)) == 2 and imperative[0] != imperative[1]
    assert set(hybridized) == {imperative[0]}
    assert "ran 4 time(s)" in lines[1] and "ran 1 time(s)" in lines[2]
    assert "HybridizeError" in lines[3]


def test_learning_rate_demo_shows_same_steps_and_scaled_rates():
    """8.4-2: the minibatch kept and split gives one device's loss on two devices; scaled
    without the rate, an epoch leaves a larger loss, and scaling the rate brings it back."""
    rows = [line.split() for line in exercises.reference("8.4-2").demo(devices=(1, 2))
            .splitlines()[2:]]
    loss = {(int(k), int(b), float(lr)): float(v) for k, b, lr, _, v in rows}
    assert loss[2, 12, 0.03] == pytest.approx(loss[1, 12, 0.03], rel=1e-4)
    assert loss[2, 24, 0.03] > 2 * loss[1, 12, 0.03]
    assert loss[2, 24, 0.06] < loss[2, 24, 0.03] / 2


def test_scaling_demo_predicts_each_number_of_gpus():
    """8.5-1: one row per number of GPUs and allreduce, the batch scaled with the GPUs."""
    rows = [line.split() for line in exercises.reference("8.5-1")
            .demo(gpus=(1, 2), per_gpu=32, kvstores=("device",)).splitlines()[2:]]
    assert [(row[0], row[1], row[2]) for row in rows] == [("1", "32", "device"),
                                                         ("2", "64", "device")]
    assert all(float(row[3]) > 0 for row in rows)
