"""The memory experiments of 12.2.4 / 8.2.4 and the exercises built on them, as workloads.

The chapters train an MLP (512 inputs, Dense 2048 relu, Dense 512 relu, Dense 1) on 100 or 150
random batches of 1024 and watch how far the frontend runs ahead of the backend, with and without
a blocker per batch. These workloads are written in plain `nd` ops, forward only: data, forward
pass and gluon's `L2Loss` without its final mean, i.e. the per-example loss 0.5 * (pred - label)^2
of shape (batch, 1). The label is made (batch, 1) at once (gluon reshapes the (batch,) label to
the prediction's shape). `asyncsim.lab.scenarios.training` has the Gluon versions, and 8.2.4's
training loop, whose backward and SGD step these leave out.

12.2.4 runs its forward pass under `autograd.record()` without a backward, so the tape keeps,
for as long as the loss `l` lives, what MXNet saves for backward: each FullyConnected's input and
each relu's input and output (MKL-DNN builds keep both): 23.1 MB per batch at the book's sizes.
Here `record=True` keeps those arrays in a list beside `l` (`get_net`'s `saved`), so the last
batch's outlive the loop as the book's did, and its `ps` reading after the loop sees them: the
"increased memory" the book printed (`asyncsim.model.rss`). The no-barrier loop is the cell after
the barrier loop, whose last batch was still held: `previous_cell=True` starts from such a batch.

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

    def net(X, saved=None):
        """The forward pass; `saved` (a list) receives what a recording tape keeps for
        backward: each layer's input, and each relu's input and output."""
        for W, b in params[:-1]:
            Z = nd.dot(X, W) + b
            if saved is not None:
                saved += [X, Z]
            X = nd.relu(Z)
        W, b = params[-1]
        if saved is not None:
            saved.append(X)
        return nd.dot(X, W) + b

    return net


def loss(pred, label):
    """gluon.loss.L2Loss per example, before its mean over the (single) output axis."""
    diff = pred - label
    return 0.5 * diff * diff


def _setup(nd, num_inputs, num_hiddens, batch_size):
    """The net, after the book's warm-up (one batch through it, so that its parameters exist
    before timing), and that batch's [X, y]: the book's listing leaves them as globals, which
    its loop's first batch rebinds, so `ps` counts one batch of data before the loop and one
    after; the loops below `clear` the list where the book rebinds."""
    net = get_net(nd, num_inputs, num_hiddens)
    X = nd.random.normal(shape=(batch_size, num_inputs))
    y = nd.ones((batch_size, 1))
    loss(y, net(X)).wait_to_read()
    return net, [X, y]


def _step(net, X, y, record):
    """One batch's loss and, with `record`, what its tape keeps; the caller rebinds both at once,
    so the previous batch's tape goes when its loss does, after this batch is issued."""
    saved = [] if record else None
    return loss(y, net(X, saved)), saved


def _barrier_cell_end(nd, net, num_inputs, batch_size):
    """What 12.2.4's barrier cell left: its last batch's loss and tape, the batch before it
    freed (two batches, so the freed buffers are those of a loop, not of a first batch)."""
    for _ in range(2):
        X = nd.random.normal(shape=(batch_size, num_inputs))
        l, saved = _step(net, X, nd.ones((batch_size, 1)), True)  # noqa: E741 (the book's)
        l.wait_to_read()
    return l, saved


def memory_barrier(nd, num_batches=150, batch_size=1024, num_inputs=512,
                   num_hiddens=(2048, 512), blocker='wait_to_read', record=True):
    """A blocker per batch: 12.2.4's `l.wait_to_read()` or 8.2.4's `l.mean().asscalar()`;
    `record`: each batch's tape lives beside its loss (12.2.4's autograd.record())."""
    net, warm = _setup(nd, num_inputs, num_hiddens, batch_size)
    l_sum = 0.0
    with nd.benchmark('time per epoch'):
        for X, y in data_iter(nd, num_batches, batch_size, num_inputs):
            warm.clear()  # the book's X and y rebound: the warm-up's go
            l, saved = _step(net, X, y, record)  # noqa: E741 (the book's name)
            if blocker == 'asscalar':
                l_sum += l.mean().asscalar()
            else:
                l.wait_to_read()  # Barrier before a new batch
        nd.waitall()
    return l_sum


def memory_no_barrier(nd, num_batches=150, batch_size=1024, num_inputs=512,
                      num_hiddens=(2048, 512), record=True, previous_cell=True):
    """No blocker in the loop: the frontend issues every batch at once; one waitall at the end.

    The book's 12.2 region has no waitall, yet its 6.05 s 'time per epoch' covers the compute;
    here the waitall inside the region makes that explicit. `record`: each batch's tape lives
    beside its loss; `previous_cell`: the loop starts where the barrier cell ended, with a
    recorded batch still held, which the first batch here lets go.
    """
    net, warm = _setup(nd, num_inputs, num_hiddens, batch_size)
    if previous_cell:  # the barrier cell's first batch rebound the warm-up's X and y
        warm.clear()
        l, saved = _barrier_cell_end(nd, net, num_inputs, batch_size)  # noqa: E741
    with nd.benchmark('time per epoch'):
        for X, y in data_iter(nd, num_batches, batch_size, num_inputs):
            warm.clear()
            l, saved = _step(net, X, y, record)  # noqa: E741, F841 (held until the next batch)
        nd.waitall()


def memory_overlap(nd, num_batches=150, batch_size=1024, num_inputs=512,
                   num_hiddens=(2048, 512)):
    """12.2 exercise 2: batch t must finish before batch t+2 starts (an overlap of one batch).

    After issuing batch t the frontend waits on the loss of batch t-1, so batch t+1's data and
    forward pass are issued only once batch t-1 is done.
    """
    net, warm = _setup(nd, num_inputs, num_hiddens, batch_size)
    with nd.benchmark('time per epoch'):
        previous = None
        for X, y in data_iter(nd, num_batches, batch_size, num_inputs):
            warm.clear()
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
        dict(num_batches=150, **_MLP, blocker="wait_to_read", record=True),
        dict(num_batches=150, **_TINY, blocker="wait_to_read", record=True),
        "forward MLP 512-2048-512-1 on 150 batches of 1024 with l.wait_to_read() per batch: "
        "the frontend keeps pace, memory stays flat",
        f"12.2.4 ({_EN})", _EPOCH_150,
        book={"time per epoch": 6.1967, "batch 50": 2.0848, "batch 100": 4.1301,
              "batch 150": 6.1954},
        book_source=f"{_EN} 12.2.4",
        book_note="12.2's loop is forward-only too (autograd.record, no backward); ps "
                  "reported +23.696 MB resident memory after it: the last batch's tape, which l "
                  "keeps (23.1 MB), less the warm-up's X, which the loop's first batch let go "
                  "(2.1 MB). 8.2.4's training loop runs backward, which lets its tape go, "
                  "so the other edition's ps saw +4.648 MB: the two disagree because one "
                  "edition never calls backward"),
    Scenario(
        "memory_no_barrier", memory_no_barrier,
        dict(num_batches=150, **_MLP, record=True, previous_cell=True),
        dict(num_batches=150, **_TINY, record=True, previous_cell=True),
        "the same 150 batches without a blocker: all issued in a fraction of the epoch, "
        "intermediate results pile up until one final waitall",
        f"12.2.4 ({_EN})", _EPOCH_150,
        book={"time per epoch": 6.0500, "batch 50": 0.1198, "batch 100": 0.2371,
              "batch 150": 0.3538},
        book_source=f"{_EN} 12.2.4",
        book_note="the book's region has no waitall but its 6.05 s covers the compute; "
                  "ps reported -8.168 MB resident memory after the loop, when the queue had "
                  "drained. The predicted peak of gigabytes is this engine's, which takes an "
                  "output's buffer at the push; MXNet takes it when the op runs (delay_alloc), "
                  "so the book's peak was lower, and the -8.168 MB is its allocator's state "
                  "(notes/BOOK.md)"),
    Scenario(
        "memory_overlap", memory_overlap, dict(num_batches=150, **_MLP),
        dict(num_batches=150, **_TINY),
        "an overlap of one minibatch: wait on batch t-1's loss after issuing batch t",
        f"12.2 exercise 2 ({_EN})", _EPOCH_150),
    Scenario(
        "memory_asscalar_8_2", memory_barrier,
        dict(num_batches=100, **_MLP, blocker="asscalar", record=False),
        dict(num_batches=100, **_TINY, blocker="asscalar", record=False),
        "8.2's loop forward only: 100 batches, l_sum += l.mean().asscalar() as the per-batch "
        "blocker",
        f"8.2.4 ({_ZH8}); seed 000", _EPOCH_100,
        book_note="the book's loop also runs backward and an SGD step per batch: its numbers "
                  "are train_asscalar_8_2's"),
    Scenario(
        "memory_no_barrier_8_2", memory_no_barrier,
        dict(num_batches=100, **_MLP, record=False, previous_cell=False),
        dict(num_batches=100, **_TINY, record=False, previous_cell=False),
        "8.2's loop forward only, without the blocker: 100 batches issued at once",
        f"8.2.4 ({_ZH8}); seed 000", _EPOCH_100,
        book_note="the book's loop also runs backward and an SGD step per batch: its numbers "
                  "are train_no_barrier_8_2's"),
    Scenario(
        "cpu_gpu_minibatches", cpu_gpu_minibatches, dict(num_batches=20, **_MLP),
        dict(num_batches=3, **_TINY),
        "minibatches on CPU and GPU: sync after every minibatch, after each round, or at "
        "the end",
        f"12.2 exercise 3 ({_EN})",
        ("sync after every minibatch", "sync after each round", "sync at the end"),
        devices="cpu+gpu"),
]
