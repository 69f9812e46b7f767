"""The memory experiments of 12.2.4 / 8.2.4 and the exercises built on them, as workloads.

The chapters train an MLP (512 inputs, Dense 2048 relu, Dense 512 relu, Dense 1) on 100 or 150
random batches of 1024 and watch how far the frontend runs ahead of the backend, with and without
a blocker per batch. The frontend here has no autograd yet, so the workloads are forward-only:
data, forward pass and gluon's `L2Loss` without its final mean, i.e. the per-example loss
0.5 * (pred - label)^2 of shape (batch, 1). The label is made (batch, 1) at once because the
frontend has no reshape (gluon reshapes the (batch,) label to the prediction's shape).

`data_iter` keeps the book's progress report ("batch 50, time ... sec": time since the epoch
began) as nested regions 'batch 50', 'batch 100', ...: all begin when the iterator starts (the
latest first, so they nest) and each ends once its batch has been consumed, where the book
prints. Only the batch count changes these labels, so quick parameters keep the count and shrink
the sizes. Units: sizes are counts of examples and features.
"""

from __future__ import annotations

from asyncsim.lab.scenarios.base import Scenario


def data_iter(nd, num_batches=150, batch_size=1024, num_inputs=512, ctx=None, every=50):
    """The book's mock data: a fresh normal batch and a ones label per step, generated lazily."""
    timers = {}
    for k in reversed(range(every, num_batches + 1, every)):
        timers[k] = nd.benchmark(f'batch {k}')
        timers[k].__enter__()
    for i in range(num_batches):
        X = nd.random.normal(shape=(batch_size, num_inputs), ctx=ctx)
        y = nd.ones((batch_size, 1), ctx=ctx)
        yield X, y
        if (i + 1) in timers:
            timers.pop(i + 1).__exit__(None, None, None)


def get_net(nd, num_inputs=512, num_hiddens=(2048, 512), num_outputs=1, ctx=None):
    """Dense layers with relu between them: weights normal * 0.01, biases zero."""
    sizes = (num_inputs, *num_hiddens, num_outputs)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        W = nd.random.normal(shape=(fan_in, fan_out), ctx=ctx) * 0.01
        b = nd.zeros((fan_out,), ctx=ctx)
        params.append((W, b))

    def net(X):
        for W, b in params[:-1]:
            X = nd.relu(nd.dot(X, W) + b)
        W, b = params[-1]
        return nd.dot(X, W) + b

    return net


def loss(pred, label):
    """gluon.loss.L2Loss per example, before its mean over the (single) output axis."""
    diff = pred - label
    return 0.5 * diff * diff


def _setup(nd, num_inputs, num_hiddens, batch_size):
    net = get_net(nd, num_inputs, num_hiddens)
    # the book's warm-up: one batch through the net so that parameters exist before timing
    X = nd.random.normal(shape=(batch_size, num_inputs))
    y = nd.ones((batch_size, 1))
    loss(y, net(X)).wait_to_read()
    return net


def memory_barrier(nd, num_batches=150, batch_size=1024, num_inputs=512,
                   num_hiddens=(2048, 512), blocker='wait_to_read'):
    """A blocker per batch: 12.2.4's `l.wait_to_read()` or 8.2.4's `l.mean().asscalar()`."""
    net = _setup(nd, num_inputs, num_hiddens, batch_size)
    l_sum = 0.0
    with nd.benchmark('time per epoch'):
        for X, y in data_iter(nd, num_batches, batch_size, num_inputs):
            l = loss(y, net(X))  # noqa: E741 (the book's name)
            if blocker == 'asscalar':
                l_sum += l.mean().asscalar()
            else:
                l.wait_to_read()  # Barrier before a new batch
        nd.waitall()
    return l_sum


def memory_no_barrier(nd, num_batches=150, batch_size=1024, num_inputs=512,
                      num_hiddens=(2048, 512)):
    """No blocker in the loop: the frontend issues every batch at once; one waitall at the end.

    The book's 12.2 region has no waitall, yet its 6.05 s 'time per epoch' covers the compute;
    here the waitall inside the region makes that explicit.
    """
    net = _setup(nd, num_inputs, num_hiddens, batch_size)
    with nd.benchmark('time per epoch'):
        for X, y in data_iter(nd, num_batches, batch_size, num_inputs):
            l = loss(y, net(X))  # noqa: E741, F841 (the book keeps the handle until the next batch)
        nd.waitall()


def memory_overlap(nd, num_batches=150, batch_size=1024, num_inputs=512,
                   num_hiddens=(2048, 512)):
    """12.2 exercise 2: batch t must finish before batch t+2 starts (an overlap of one batch).

    After issuing batch t the frontend waits on the loss of batch t-1, so batch t+1's data and
    forward pass are issued only once batch t-1 is done.
    """
    net = _setup(nd, num_inputs, num_hiddens, batch_size)
    with nd.benchmark('time per epoch'):
        previous = None
        for X, y in data_iter(nd, num_batches, batch_size, num_inputs):
            l = loss(y, net(X))  # noqa: E741
            if previous is not None:
                previous.wait_to_read()
            previous = l
        nd.waitall()


def cpu_gpu_minibatches(nd, num_batches=20, batch_size=1024, num_inputs=512,
                        num_hiddens=(2048, 512)):
    """12.2 exercise 3: minibatches on the CPU and on the GPU, synchronised three ways.

    Waiting after every minibatch leaves one device idle while the other works; waiting once per
    round (both devices issued first) lets them overlap; no waiting lets the frontend run ahead.
    """
    devices = [nd.cpu(), nd.gpu(0)]
    nets = [get_net(nd, num_inputs, num_hiddens, ctx=ctx) for ctx in devices]

    def minibatch(net, ctx):
        X = nd.random.normal(shape=(batch_size, num_inputs), ctx=ctx)
        y = nd.ones((batch_size, 1), ctx=ctx)
        return loss(y, net(X))

    for net, ctx in zip(nets, devices, strict=True):
        minibatch(net, ctx).wait_to_read()  # warm-up

    with nd.benchmark('sync after every minibatch'):
        for _ in range(num_batches):
            for net, ctx in zip(nets, devices, strict=True):
                minibatch(net, ctx).wait_to_read()

    with nd.benchmark('sync after each round'):
        for _ in range(num_batches):
            losses = [minibatch(net, ctx) for net, ctx in zip(nets, devices, strict=True)]
            for l in losses:  # noqa: E741
                l.wait_to_read()

    with nd.benchmark('sync at the end'):
        for _ in range(num_batches):
            losses = [minibatch(net, ctx) for net, ctx in zip(nets, devices, strict=True)]
        nd.waitall()


_EN = "001_c4db6a957a3c16a4.txt"
_ZH8 = "003_3c45022c8209ddba.txt"
_MLP = dict(batch_size=1024, num_inputs=512, num_hiddens=(2048, 512))
_TINY = dict(batch_size=4, num_inputs=8, num_hiddens=(8, 4))  # same batch count, same labels
_EPOCH_150 = ("time per epoch", "batch 150", "batch 100", "batch 50")
_EPOCH_100 = ("time per epoch", "batch 100", "batch 50")

SCENARIOS = [
    Scenario(
        "memory_barrier", memory_barrier,
        dict(num_batches=150, **_MLP, blocker="wait_to_read"),
        dict(num_batches=150, **_TINY, blocker="wait_to_read"),
        "forward MLP 512-2048-512-1 on 150 batches of 1024 with l.wait_to_read() per batch: "
        "the frontend keeps pace, memory stays flat",
        f"12.2.4 ({_EN})", _EPOCH_150,
        book={"time per epoch": 6.1967, "batch 50": 2.0848, "batch 100": 4.1301,
              "batch 150": 6.1954},
        book_source=f"{_EN} 12.2.4",
        book_note="12.2's loop is forward-only too (autograd.record, no backward); "
                  "ps reported +23.696 MB resident memory"),
    Scenario(
        "memory_no_barrier", memory_no_barrier, dict(num_batches=150, **_MLP),
        dict(num_batches=150, **_TINY),
        "the same 150 batches without a blocker: all issued in a fraction of the epoch, "
        "intermediate results pile up until one final waitall",
        f"12.2.4 ({_EN})", _EPOCH_150,
        book={"time per epoch": 6.0500, "batch 50": 0.1198, "batch 100": 0.2371,
              "batch 150": 0.3538},
        book_source=f"{_EN} 12.2.4",
        book_note="the book's region has no waitall but its 6.05 s covers the compute; "
                  "ps reported -8.168 MB resident memory"),
    Scenario(
        "memory_overlap", memory_overlap, dict(num_batches=150, **_MLP),
        dict(num_batches=150, **_TINY),
        "an overlap of one minibatch: wait on batch t-1's loss after issuing batch t",
        f"12.2 exercise 2 ({_EN})", _EPOCH_150),
    Scenario(
        "memory_asscalar_8_2", memory_barrier,
        dict(num_batches=100, **_MLP, blocker="asscalar"),
        dict(num_batches=100, **_TINY, blocker="asscalar"),
        "8.2's version: 100 batches, l_sum += l.mean().asscalar() as the per-batch blocker",
        f"8.2.4 ({_ZH8}); seed 000", _EPOCH_100,
        book={"batch 50": 13.377381, "batch 100": 26.867962},
        book_source=f"{_ZH8} 8.2.4",
        book_note="the book's loop also runs backward and an SGD step per batch (this one is "
                  "forward-only); ps reported +4.648 MB"),
    Scenario(
        "memory_no_barrier_8_2", memory_no_barrier, dict(num_batches=100, **_MLP),
        dict(num_batches=100, **_TINY),
        "8.2's version without the blocker: 100 batches issued at once",
        f"8.2.4 ({_ZH8}); seed 000", _EPOCH_100,
        book={"batch 50": 0.083964, "batch 100": 0.166682},
        book_source=f"{_ZH8} 8.2.4",
        book_note="the book's loop also runs backward and an SGD step per batch; "
                  "ps reported +0.016 MB"),
    Scenario(
        "cpu_gpu_minibatches", cpu_gpu_minibatches, dict(num_batches=20, **_MLP),
        dict(num_batches=3, **_TINY),
        "minibatches on CPU and GPU: sync after every minibatch, after each round, or at "
        "the end",
        f"12.2 exercise 3 ({_EN})",
        ("sync after every minibatch", "sync after each round", "sync at the end"),
        devices="cpu+gpu"),
]
