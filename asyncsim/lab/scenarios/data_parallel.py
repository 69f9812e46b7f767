"""8.4 and 8.5: data parallelism across devices, the chapter's code nearly verbatim.

- 8.4 trains LeNet written with `nd.Convolution`/`nd.Pooling` from scratch: parameters copied to
  every device (`get_params`), each batch split across them (`split_and_load`), a forward and a
  backward per device, gradients summed through device 0 and copied back (`allreduce`), an SGD
  step per device, and `nd.waitall()` after every batch. The book: 1.4 s per epoch on one GPU,
  2.5 s on two, because LeNet's kernels are tiny and the frontend issues twice the ops.
- 8.5 trains the chapter's ResNet-18 with Gluon: `net.initialize(ctx=[...])`,
  `gutils.split_and_load`, a Trainer that sums gradients across devices. The book: 13.0 s per
  epoch on one GPU (batch 256), 6.7 s on two (batch 512): compute-bound, so it nearly halves.

`devices` picks the kind: 'gpu' as the book (the model's GPUs; a real run needs GPUs), or 'cpu'
for `nd.cpu(i)` devices, each with memory of its own and its ops on the CPU's workers (the same
cores: a device of its own threads would only time-slice them), so that a CPU-only machine runs
data parallelism for real. `num_train`/`num_test` shrink the epoch for real runs on a small machine
(an epoch of 60000 images through LeNet is minutes of CPU here; ResNet-18 hours). Each epoch is a
region `epoch k`; the line printed is the book's, with the region's time where the run has a
clock. The data is Fashion-MNIST if the user has its files, else a synthetic set of its shapes
(`asyncsim.lab.data` says which). Units: sizes are counts of images; times are seconds.
"""

from __future__ import annotations

import math

from asyncsim.gluon import Trainer, init
from asyncsim.gluon import loss as gloss
from asyncsim.gluon import utils as gutils
from asyncsim.gluon.kvstore import ALLREDUCE
from asyncsim.lab import d2l
from asyncsim.lab.scenarios.base import Scenario
from asyncsim.nd import autograd


# -- 8.4: LeNet from scratch ----------------------------------------------------------------------
def lenet_params(nd, scale=0.01):
    W1 = nd.random.normal(scale=scale, shape=(20, 1, 3, 3))
    b1 = nd.zeros(shape=20)
    W2 = nd.random.normal(scale=scale, shape=(50, 20, 5, 5))
    b2 = nd.zeros(shape=50)
    W3 = nd.random.normal(scale=scale, shape=(800, 128))
    b3 = nd.zeros(shape=128)
    W4 = nd.random.normal(scale=scale, shape=(128, 10))
    b4 = nd.zeros(shape=10)
    return [W1, b1, W2, b2, W3, b3, W4, b4]


def lenet(nd, X, params):
    h1_conv = nd.Convolution(data=X, weight=params[0], bias=params[1], kernel=(3, 3),
                             num_filter=20)
    h1_activation = nd.relu(h1_conv)
    h1 = nd.Pooling(data=h1_activation, pool_type='avg', kernel=(2, 2), stride=(2, 2))
    h2_conv = nd.Convolution(data=h1, weight=params[2], bias=params[3], kernel=(5, 5),
                             num_filter=50)
    h2_activation = nd.relu(h2_conv)
    h2 = nd.Pooling(data=h2_activation, pool_type='avg', kernel=(2, 2), stride=(2, 2))
    h2 = nd.flatten(h2)
    h3_linear = nd.dot(h2, params[4]) + params[5]
    h3 = nd.relu(h3_linear)
    y_hat = nd.dot(h3, params[6]) + params[7]
    return y_hat


def get_params(params, ctx):
    new_params = [p.copyto(ctx) for p in params]
    for p in new_params:
        p.attach_grad()
    return new_params


def allreduce(data):
    """Sum on device 0, then copy the sum back into every other device's array."""
    for i in range(1, len(data)):
        data[0][:] += data[i].copyto(data[0].context)
    for i in range(1, len(data)):
        data[0].copyto(data[i])


def split_and_load(data, ctx):
    n, k = data.shape[0], len(ctx)
    m = n // k  # the chapter assumes it divides
    assert m * k == n, '# examples is not divided by # devices.'
    return [data[i * m: (i + 1) * m].as_in_context(ctx[i]) for i in range(k)]


def _contexts(nd, kind, num):
    return [nd.gpu(i) if kind == 'gpu' else nd.cpu(i) for i in range(num)]


def lenet_data_parallel(nd, num_devices=1, batch_size=256, lr=0.2, epochs=4, devices='gpu',
                        num_train=60000, num_test=10000, kvstore='device'):
    """8.4.4-8.4.6: `train(num_gpus, batch_size, lr)`; kvstore='ring' swaps the chapter's
    allreduce for a ring (`asyncsim.gluon.kvstore`)."""
    reduce = allreduce if kvstore == 'device' else ALLREDUCE[kvstore]
    loss = gloss.SoftmaxCrossEntropyLoss()
    params = lenet_params(nd)

    def train_batch(X, y, gpu_params, ctx, lr):
        gpu_Xs, gpu_ys = split_and_load(X, ctx), split_and_load(y, ctx)
        with autograd.record():  # a loss per device
            ls = [loss(lenet(nd, gpu_X, gpu_W), gpu_y)
                  for gpu_X, gpu_y, gpu_W in zip(gpu_Xs, gpu_ys, gpu_params, strict=True)]
        for l in ls:  # noqa: E741 (the book's name)
            l.backward()
        for i in range(len(gpu_params[0])):  # sum the gradients, copy the sum back
            reduce([gpu_params[c][i].grad for c in range(len(ctx))])
        for param in gpu_params:  # an SGD step on every device, with the whole batch's size
            d2l.sgd(param, lr, X.shape[0])

    train_iter, test_iter = d2l.load_data_fashion_mnist(batch_size, num_train=num_train,
                                                        num_test=num_test)
    ctx = _contexts(nd, devices, num_devices)
    print('running on:', ctx)
    gpu_params = [get_params(params, c) for c in ctx]
    for epoch in range(epochs):
        timer = d2l.Timer()
        with nd.benchmark(f'epoch {epoch + 1}'):
            for X, y in train_iter:
                train_batch(X, y, gpu_params, ctx, lr)
                nd.waitall()
        train_time = timer.stop()

        def net(x):  # evaluated on device 0
            return lenet(nd, x, gpu_params[0])

        test_acc = d2l.evaluate_accuracy(test_iter, net, ctx[0])
        print('epoch %d, time %.1f sec, test acc %.2f' % (epoch + 1, train_time, test_acc))  # noqa: UP031 (the book's)


# -- 8.5: ResNet-18 with Gluon ---------------------------------------------------------------------
def resnet_data_parallel(nd, num_devices=1, batch_size=256, lr=0.1, epochs=4, devices='gpu',
                         num_train=60000, num_test=10000, kvstore='device'):
    """8.5.2: `train(num_gpus, batch_size, lr)` of the chapter's ResNet-18 (kvstore: the
    Trainer's allreduce, 'device' as the chapter's or 'ring')."""
    net = d2l.resnet18(10)
    train_iter, test_iter = d2l.load_data_fashion_mnist(batch_size, num_train=num_train,
                                                        num_test=num_test)
    ctx = _contexts(nd, devices, num_devices)
    print('running on:', ctx)
    net.initialize(init=init.Normal(sigma=0.01), ctx=ctx, force_reinit=True)
    trainer = Trainer(net.collect_params(), 'sgd', {'learning_rate': lr}, kvstore=kvstore)
    loss = gloss.SoftmaxCrossEntropyLoss()
    for epoch in range(epochs):
        timer = d2l.Timer()
        with nd.benchmark(f'epoch {epoch + 1}'):
            for X, y in train_iter:
                gpu_Xs = gutils.split_and_load(X, ctx)
                gpu_ys = gutils.split_and_load(y, ctx)
                with autograd.record():
                    ls = [loss(net(gpu_X), gpu_y)
                          for gpu_X, gpu_y in zip(gpu_Xs, gpu_ys, strict=True)]
                for l in ls:  # noqa: E741
                    l.backward()
                trainer.step(batch_size)
            nd.waitall()
        train_time = timer.stop()
        test_acc = d2l.evaluate_accuracy(test_iter, net, ctx[0])
        print('epoch %d, time %.1f sec, test acc %.2f' % (epoch + 1, train_time, test_acc))  # noqa: UP031 (the book's)


FEW = (2, 4)  # batches per epoch simulated by `epochs_extrapolated`


def epochs_extrapolated(sc, profile, **overrides) -> dict[str, float]:
    """Predicted seconds of each `epoch k` region of data-parallel scenario `sc` on `profile`,
    at its `num_train`: epochs of FEW[0] and FEW[1] batches are simulated and each epoch is
    extrapolated linearly, T(2) + (batches - 2) (T(4) - T(2)) / 2: a step repeats the same ops
    whatever the batch's index, and the start-up both runs share cancels in the slope. The
    book's 60000 images cost the model 6 batches per epoch instead of 235, and come within 1%
    of the whole epoch simulated (a test holds it to that); a whole epoch is simulated when it
    has no more than FEW[1] batches, and a last, partial batch counts as a whole one. The test
    set is cut to one batch: it is evaluated outside the regions."""
    from asyncsim.model.simulate import simulate

    params = sc.kwargs(**overrides)
    batch = params["batch_size"]
    batches = math.ceil(params["num_train"] / batch)
    if batches <= FEW[1]:
        return dict(simulate(sc.record(**overrides), profile).regions)
    few, more = (simulate(sc.record(**{**overrides, "num_train": k * batch, "num_test": batch}),
                          profile).regions for k in FEW)
    slope = {label: (more[label] - few[label]) / (FEW[1] - FEW[0]) for label in few}
    return {label: few[label] + (batches - FEW[0]) * slope[label] for label in few}


_ZH8 = "003_3c45022c8209ddba.txt"
_EPOCHS = tuple(f"epoch {k}" for k in range(1, 5))
_GPU_QUICK = dict(epochs=4, num_train=8, num_test=4, batch_size=4, devices='gpu',
                  kvstore='device')
# CPU devices measured here: an epoch of the book's 60000 images is minutes of LeNet and hours of
# ResNet-18 on a 2-core machine, so these train one epoch on a few batches (synthetic data unless
# the user has the files); the book's batch size for LeNet, a quarter of it for ResNet-18
_LENET_CPU = dict(batch_size=256, lr=0.2, epochs=1, devices='cpu', num_train=1024, num_test=256,
                  kvstore='device')
_RESNET_CPU = dict(batch_size=16, lr=0.1, epochs=1, devices='cpu', num_train=32, num_test=16,
                   kvstore='device')
_CPU_QUICK = dict(epochs=1, num_train=8, num_test=4, batch_size=4, devices='cpu',
                  kvstore='device')


def _gpu(name, workload, devices, book, note, **params):
    return Scenario(
        name, workload, dict(params, epochs=4, devices='gpu', num_train=60000, num_test=10000,
                             kvstore='device'),
        dict(_GPU_QUICK, num_devices=params["num_devices"], lr=params["lr"]),
        note, f"8.4.6 ({_ZH8})" if "lenet" in name else f"8.5.2 ({_ZH8})", _EPOCHS,
        devices=devices, book=book, book_profile="book-gpu", estimate=epochs_extrapolated,
        book_source=f"{_ZH8} 8.4.6" if "lenet" in name else f"{_ZH8} 8.5.2")


def _cpu(name, workload, base, num_devices, note):
    return Scenario(name, workload, dict(base, num_devices=num_devices),
                    dict(_CPU_QUICK, num_devices=num_devices, lr=base["lr"]), note,
                    "8.4/8.5 on CPU devices", ("epoch 1",))


SCENARIOS = [
    _gpu("lenet_1gpu", lenet_data_parallel, "cpu+gpu",
         {"epoch 1": 1.5, "epoch 2": 1.4, "epoch 3": 1.4, "epoch 4": 1.4},
         "8.4's LeNet from scratch on one GPU: per batch a forward, a backward, an SGD step and "
         "a waitall (test acc 0.10, 0.60, 0.75, 0.68)",
         num_devices=1, batch_size=256, lr=0.2),
    _gpu("lenet_2gpu", lenet_data_parallel, "cpu+2gpu",
         {"epoch 1": 2.6, "epoch 2": 2.6, "epoch 3": 2.4, "epoch 4": 2.5},
         "the same on two GPUs: half a batch each, gradients summed through gpu(0) and copied "
         "back; the frontend issues twice the tiny ops, so it gets slower (test acc 0.10, 0.69, "
         "0.74, 0.74)", num_devices=2, batch_size=256, lr=0.2),
    _gpu("resnet18_1gpu", resnet_data_parallel, "cpu+gpu",
         {"epoch 1": 14.0, "epoch 2": 12.9, "epoch 3": 13.0, "epoch 4": 13.0},
         "8.5's ResNet-18 with Gluon on one GPU, batch 256 (test acc 0.89, 0.91, 0.91, 0.92)",
         num_devices=1, batch_size=256, lr=0.1),
    _gpu("resnet18_2gpu", resnet_data_parallel, "cpu+2gpu",
         {"epoch 1": 7.3, "epoch 2": 6.7, "epoch 3": 6.7, "epoch 4": 6.7},
         "8.5's ResNet-18 on two GPUs, batch 512: compute-bound, so the epoch nearly halves "
         "(test acc 0.69, 0.86, 0.89, 0.90)", num_devices=2, batch_size=512, lr=0.2),
    _cpu("lenet_cpu1", lenet_data_parallel, _LENET_CPU, 1,
         "8.4's LeNet on cpu(0): one epoch of 1024 images, batch 256"),
    _cpu("lenet_cpu2", lenet_data_parallel, _LENET_CPU, 2,
         "8.4's LeNet on cpu(0) and cpu(1), sharing the CPU's workers: the chapter's allreduce "
         "on one host"),
    _cpu("resnet18_cpu1", resnet_data_parallel, _RESNET_CPU, 1,
         "8.5's ResNet-18 on cpu(0): two batches of 16"),
    _cpu("resnet18_cpu2", resnet_data_parallel, _RESNET_CPU, 2,
         "8.5's ResNet-18 on cpu(0) and cpu(1): two batches of 16, 8 per device"),
]
