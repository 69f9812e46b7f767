"""The chapters' Gluon listings that train or hybridize, written as the book writes them.

- 8.1.2: 1000 forward passes of a 512-256-128-2 HybridSequential MLP before and after
  `net.hybridize()` (book: 0.4943 s -> 0.2053 s). After hybridize each forward is one op.
- 8.1.3: the `HybridNet` whose `hybrid_forward` prints: the prints run on every imperative call,
  once at the trace after `hybridize()`, and never again.
- 8.2.4: the training loop (`autograd.record()`, `l.backward()`, `trainer.step`) on 100 batches
  of 1024 with `l.mean().asscalar()` per batch, and without any blocker.
- 12.2.4: the English edition's loop: the forward pass and loss under `autograd.record()` (no
  backward), with `l.wait_to_read()` per batch and without. Recording keeps each batch's
  activations alive for a backward that never comes, until the next batch drops the handle.

The data iterator and its 'batch 50'.. regions are `memory.data_iter`'s (the book's progress
prints); its labels are (batch, 1), which `L2Loss` reshapes to the prediction as Gluon does.
Units: sizes are counts of examples and features; the book's numbers are seconds.
"""

from __future__ import annotations

from asyncsim.gluon import Trainer, loss, nn
from asyncsim.lab.scenarios.base import Scenario
from asyncsim.lab.scenarios.memory import data_iter
from asyncsim.nd import autograd


def get_net(num_hiddens=(256, 128), num_outputs=2):
    """8.1.2's `get_net`: a HybridSequential of Dense layers, relu between them."""
    net = nn.HybridSequential()
    net.add(*[nn.Dense(h, activation='relu') for h in num_hiddens], nn.Dense(num_outputs))
    net.initialize()
    return net


def hybridize_mlp(nd, n=1000, num_inputs=512, num_hiddens=(256, 128), num_outputs=2):
    """8.1.2: `benchmark(net, x)` before and after `net.hybridize()`, on one net."""
    x = nd.random.normal(shape=(1, num_inputs))
    net = get_net(num_hiddens, num_outputs)
    net(x)  # the chapter runs the net once (in the cell before) before timing it

    def benchmark(label):
        with nd.benchmark(label):
            for _ in range(n):
                _ = net(x)
            nd.waitall()  # wait for every computation so the timing is complete

    benchmark('before hybridizing')
    net.hybridize()
    benchmark('after hybridizing')


class HybridNet(nn.HybridBlock):
    """8.1.3's block whose hybrid_forward prints F, its input and its hidden layer."""

    def __init__(self, hidden=10, outputs=2, **kwargs):
        super().__init__(**kwargs)
        self.hidden = nn.Dense(hidden)
        self.output = nn.Dense(outputs)

    def hybrid_forward(self, F, x):
        print('F: ', F)
        print('x: ', x)
        x = F.relu(self.hidden(x))
        print('hidden: ', x)
        return self.output(x)


def hybrid_net(nd, num_inputs=4, hidden=10, outputs=2):
    """8.1.3: net(x) twice, then hybridize and net(x) twice: the prints of the last call
    vanish."""
    net = HybridNet(hidden, outputs)
    net.initialize()
    x = nd.random.normal(shape=(1, num_inputs))
    with nd.benchmark('imperative calls'):
        print(net(x))
        print(net(x))
    net.hybridize()
    with nd.benchmark('hybridized calls'):
        print(net(x))  # traced: the prints show symbols
        print(net(x))  # replayed: no prints


def _mlp(num_hiddens):
    net = nn.Sequential()
    net.add(*[nn.Dense(h, activation='relu') for h in num_hiddens], nn.Dense(1))
    net.initialize()
    return net


def _first_batch(nd, net, l2, num_inputs, batch_size) -> list:
    """The book's warm-up: one batch through the net so that its parameters exist. Returns
    that batch's [X, y], which the book's listing leaves as globals (`for X, y in
    data_iter(): break`) until its loop's first batch rebinds them: `ps` counts one batch of
    data before the loop and one after. The loops `clear` the list where the book rebinds."""
    for X, y in data_iter(nd, 1, batch_size, num_inputs, every=10**9):
        l2(y, net(X)).wait_to_read()
    return [X, y]


def train_loop(nd, num_batches=100, batch_size=1024, num_inputs=512, num_hiddens=(2048, 512),
               lr=0.005, blocker='asscalar', previous_cell=False):
    """8.2.4: record, backward and an SGD step per batch; `blocker='asscalar'` adds
    `l_sum += l.mean().asscalar()` per batch, None issues every batch at once.
    `previous_cell`: the loop starts where the book's cell before it (the asscalar loop, in the
    same process) ended: two of its batches run first, so the allocator already keeps a loop's
    freed buffers and the last loss is held when `ps` reads the memory before the loop."""
    net = _mlp(num_hiddens)
    trainer = Trainer(net.collect_params(), 'sgd', {'learning_rate': lr})
    l2 = loss.L2Loss()
    warm = _first_batch(nd, net, l2, num_inputs, batch_size)

    def epoch(batches, blocker):
        """The book's loop; its last X, y and l, which outlive the loop as the book's globals
        do (the memory `ps` reads after it)."""
        l_sum = 0.0
        for X, y in batches:
            warm.clear()  # the book's X and y rebound: the warm-up's go
            with autograd.record():
                l = l2(y, net(X))  # noqa: E741 (the book's name)
            if blocker == 'asscalar':
                l_sum += l.mean().asscalar()
            l.backward()
            trainer.step(X.shape[0])
        return l_sum, (X, y, l)

    # `held`: the last batch's X, y and l, alive after each loop as the book's globals were
    if previous_cell:
        _, held = epoch(data_iter(nd, 2, batch_size, num_inputs, every=10**9), 'asscalar')
        nd.waitall()  # as that cell ends
    with nd.benchmark('time per epoch'):
        l_sum, held = epoch(data_iter(nd, num_batches, batch_size, num_inputs), blocker)
        nd.waitall()
    return l_sum


def record_loop(nd, num_batches=150, batch_size=1024, num_inputs=512, num_hiddens=(2048, 512),
                barrier=True):
    """12.2.4: the forward pass and loss under autograd.record(), with `l.wait_to_read()` per
    batch (barrier) or without. The book's region has no waitall, yet its 6.05 s covers the
    compute; the waitall here makes that explicit."""
    net = _mlp(num_hiddens)
    l2 = loss.L2Loss()
    warm = _first_batch(nd, net, l2, num_inputs, batch_size)
    with nd.benchmark('time per epoch'):
        for X, y in data_iter(nd, num_batches, batch_size, num_inputs):
            warm.clear()  # the book's X and y rebound: the warm-up's go
            with autograd.record():
                l = l2(y, net(X))  # noqa: E741
            if barrier:
                l.wait_to_read()  # Barrier before a new batch
        nd.waitall()


_EN = "001_c4db6a957a3c16a4.txt"
_ZH8 = "003_3c45022c8209ddba.txt"
_MLP = dict(batch_size=1024, num_inputs=512, num_hiddens=(2048, 512))
_TINY = dict(batch_size=4, num_inputs=8, num_hiddens=(8, 4))  # same batch count and regions
_EPOCH_150 = ("time per epoch", "batch 150", "batch 100", "batch 50")
_EPOCH_100 = ("time per epoch", "batch 100", "batch 50")

SCENARIOS = [
    Scenario(
        "hybridize_mlp", hybridize_mlp,
        dict(n=1000, num_inputs=512, num_hiddens=(256, 128), num_outputs=2),
        dict(n=3, num_inputs=8, num_hiddens=(4, 4), num_outputs=2),
        "1000 forward passes of a 512-256-128-2 MLP on one example, before and after "
        "hybridize(): one op per layer step, then one op per forward",
        f"8.1.2 ({_ZH8})", ("before hybridizing", "after hybridizing"),
        book={"before hybridizing": 0.4943, "after hybridizing": 0.2053},
        book_source=f"{_ZH8} 8.1.2"),
    Scenario(
        "hybrid_net", hybrid_net, dict(num_inputs=4, hidden=10, outputs=2),
        dict(num_inputs=4, hidden=10, outputs=2),
        "HybridNet's prints: every imperative call prints, the trace prints symbols, the "
        "hybridized call prints nothing",
        f"8.1.3 ({_ZH8})", ("imperative calls", "hybridized calls")),
    Scenario(
        "train_asscalar_8_2", train_loop,
        dict(num_batches=100, **_MLP, lr=0.005, blocker='asscalar', previous_cell=False),
        dict(num_batches=100, **_TINY, lr=0.005, blocker='asscalar', previous_cell=False),
        "8.2.4's training loop (record, backward, SGD step) with l.mean().asscalar() per batch",
        f"8.2.4 ({_ZH8}); seed 000", _EPOCH_100,
        book={"batch 50": 13.377381, "batch 100": 26.867962},
        book_source=f"{_ZH8} 8.2.4",
        book_note="ps reported +4.648 MB; the arrays alive after the loop are those before it "
                  "(the book's X and y rebound) and the last loss (4 KB), so the rest is the "
                  "allocator's and MXNet's own state, which the model does not have"),
    Scenario(
        "train_no_barrier_8_2", train_loop,
        dict(num_batches=100, **_MLP, lr=0.005, blocker=None, previous_cell=True),
        dict(num_batches=100, **_TINY, lr=0.005, blocker=None, previous_cell=True),
        "8.2.4's training loop without a blocker: 100 batches issued at once, in the cell "
        "after the asscalar loop",
        f"8.2.4 ({_ZH8}); seed 000", _EPOCH_100,
        book={"batch 50": 0.083964, "batch 100": 0.166682},
        book_source=f"{_ZH8} 8.2.4", book_note="ps reported +0.016 MB"),
    Scenario(
        "record_barrier", record_loop, dict(num_batches=150, **_MLP, barrier=True),
        dict(num_batches=150, **_TINY, barrier=True),
        "12.2.4's loop: forward and loss under autograd.record() with l.wait_to_read() per "
        "batch",
        f"12.2.4 ({_EN})", _EPOCH_150),
    Scenario(
        "record_no_barrier", record_loop, dict(num_batches=150, **_MLP, barrier=False),
        dict(num_batches=150, **_TINY, barrier=False),
        "12.2.4's loop under autograd.record() without a blocker: recorded activations pile "
        "up with the queued batches",
        f"12.2.4 ({_EN})", _EPOCH_150),
]
