"""hybridize: a HybridBlock traced once and then issued as one op.

After `hybridize()` the next call traces `hybrid_forward` on symbols (its Python, prints
included, runs then only) and every call issues the traced graph as one "graph" op whose
outputs equal the imperative ones. What a graph cannot do (blockers, in-place writes, host
data) fails at the trace with a HybridizeError naming the block. Under `autograd.record()` a
hybridized network trains as the imperative one does. The model prices a graph op as the sum
of its ops, issued once.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

import asyncsim
import realexec
from asyncsim import autograd, gluon, init
from asyncsim.gluon import nn
from asyncsim.model.profile import Cost
from asyncsim.nd.jit import HybridizeError


@pytest.fixture(scope="module")
def nd():
    with realexec.session(workers=1) as nd:
        yield nd


def mlp():
    net = nn.HybridSequential()
    net.add(nn.Dense(8, activation="relu"), nn.Dense(6, activation="tanh"), nn.Dense(2))
    net.initialize(init=init.Normal(0.5))
    return net


def cnn():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(3, kernel_size=3, padding=1, activation="relu"), nn.MaxPool2D(2),
            nn.BatchNorm(), nn.Conv2D(4, kernel_size=2, strides=2), nn.GlobalAvgPool2D(),
            nn.Flatten(), nn.Dense(2))
    net.initialize(init=init.Normal(0.5))
    return net


def _data(nd, shape, seed=0):
    return nd.array(np.random.default_rng(seed).standard_normal(shape))


@pytest.mark.parametrize("make, shape", [(mlp, (3, 5)), (cnn, (2, 2, 8, 8))],
                         ids=["mlp", "cnn"])
def test_hybridized_outputs_equal_imperative_ones(nd, make, shape):
    """The traced call and every later call give the imperative call's outputs; a new input
    shape is traced again."""
    net = make()
    x = _data(nd, shape)
    want = net(x).asnumpy()
    net.hybridize()
    for _ in range(3):
        np.testing.assert_allclose(net(x).asnumpy(), want, rtol=1e-5, atol=1e-6)
    bigger = _data(nd, (4, *shape[1:]), seed=1)
    got = net(bigger).asnumpy()
    net.hybridize(False)
    np.testing.assert_allclose(got, net(bigger).asnumpy(), rtol=1e-5, atol=1e-6)


def _forwards(nd, n, make=mlp):
    net = make()
    x = nd.ones((2, 5))
    net(x)  # parameters made, imperatively
    net.hybridize()
    net(x)  # the trace
    for _ in range(n):
        net(x)


def test_one_op_per_forward_after_the_trace():
    """After the trace each forward issues exactly one op, the graph: recording 5 forwards
    instead of 2 adds three "graph" ops and nothing else (frees aside)."""
    counts = [asyncsim.record(_forwards, n=n).counts() for n in (2, 5)]
    more = counts[1] - counts[0]
    more.pop("free", None)
    assert more == Counter(graph=3)
    imperative = asyncsim.record(lambda nd: mlp()(nd.ones((2, 5)))).counts()
    assert imperative["dot"] == 3 and "graph" not in imperative


class PrintingNet(nn.HybridBlock):
    """8.1.3's HybridNet: prints F, its input and its hidden layer."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = nn.Dense(4)
        self.output = nn.Dense(2)

    def hybrid_forward(self, F, x):
        print("F: ", F)
        print("x: ", x)
        h = F.relu(self.hidden(x))
        print("hidden: ", h)
        return self.output(h)


def test_prints_run_at_the_trace_only(nd, capsys):
    """The block's prints run at every imperative call, once more at the trace (showing
    symbols, `<Symbol ...>`), and never after."""
    net = PrintingNet()
    net.initialize()
    x = _data(nd, (1, 3))
    net(x)
    net(x)
    imperative = capsys.readouterr().out
    assert imperative.count("F: ") == 2 and "<NDArray 1x3 @cpu(0)>" in imperative
    net.hybridize()
    net(x)
    traced = capsys.readouterr().out
    assert traced.count("F: ") == 1
    assert "x:  <Symbol data>" in traced
    assert "hidden:  <Symbol " in traced and "NDArray" not in traced
    net(x)
    net(x).wait_to_read()
    assert capsys.readouterr().out == ""


class Misbehaving(nn.HybridBlock):
    """A block that does one thing a graph cannot do."""

    def __init__(self, what, **kwargs):
        super().__init__(**kwargs)
        self.what = what

    def hybrid_forward(self, F, x):
        y = x * 2
        if self.what == "asnumpy":
            y.asnumpy()
        elif self.what == "wait_to_read":
            y.wait_to_read()
        elif self.what == "item":
            y.sum().item()
        elif self.what == "iadd":
            y += 1
        elif self.what == "setitem":
            y[:] = 0.0
        elif self.what == "array":
            y = y + F.array(np.ones(3))
        return y


@pytest.mark.parametrize("what", ["asnumpy", "wait_to_read", "item", "iadd", "setitem",
                                  "array"])
def test_what_a_graph_cannot_do_fails_at_the_trace(nd, what):
    """Blockers, in-place writes and host data inside a hybridized block raise a
    HybridizeError at the trace, naming the block; imperatively the block runs."""
    net = Misbehaving(what)
    x = nd.ones((2, 3))
    net(x).wait_to_read()
    net.hybridize()
    with pytest.raises(HybridizeError, match=f"^{net.name}: "):
        net(x)


def test_a_hybridized_block_must_return_one_array(nd):
    """A block returning a tuple cannot be hybridized: the error names it."""

    class Pair(nn.HybridBlock):
        def hybrid_forward(self, F, x):
            return x * 2, x * 3

    net = Pair()
    net.hybridize()
    with pytest.raises(HybridizeError, match=net.name):
        net(nd.ones((2,)))


def test_print_of_a_symbol(nd):
    """print(symbol) inside a trace shows <Symbol name>, named after the block and op."""
    seen = []

    class Show(nn.HybridBlock):
        def hybrid_forward(self, F, x):
            y = F.relu(x)
            seen.append((repr(x), str(y)))
            return y

    net = Show()
    net.hybridize()
    net(nd.ones((2,)))
    assert seen == [("<Symbol data>", f"<Symbol {net.name}_relu0>")]


def _grads(nd, net, x, t):
    l2 = gluon.loss.L2Loss()
    with autograd.record():
        loss = l2(net(x), t)
    loss.backward()
    return {k: p.grad().asnumpy() for k, p in net.collect_params().items()
            if p.grad_req != "null"}


@pytest.mark.parametrize("make, shape", [(mlp, (4, 5)), (cnn, (2, 2, 8, 8))],
                         ids=["mlp", "cnn"])
def test_a_hybridized_net_trains_as_the_imperative_one(nd, make, shape):
    """Under autograd.record a hybridized net gives the imperative gradients, and k SGD steps
    end at the same weights."""
    x, t = _data(nd, shape), _data(nd, (shape[0], 2), seed=3)
    nets = [make(), make()]
    for net in nets:
        net(x)
    for _, (a, b) in _pairs(nets):  # same starting weights
        b.set_data(a.data())
    nets[1].hybridize()
    imperative, hybridized = (_grads(nd, net, x, t) for net in nets)
    for (ka, ga), (kb, gb) in zip(imperative.items(), hybridized.items(), strict=True):
        np.testing.assert_allclose(gb, ga, rtol=1e-4, atol=1e-6, err_msg=f"{ka} / {kb}")
    for net in nets:
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        for _ in range(4):
            _grads(nd, net, x, t)
            trainer.step(shape[0])
    for name, (a, b) in _pairs(nets):
        np.testing.assert_allclose(b.data().asnumpy(), a.data().asnumpy(), rtol=1e-4,
                                   atol=1e-6, err_msg=name)
    np.testing.assert_allclose(nets[1](x).asnumpy(), nets[0](x).asnumpy(), rtol=1e-4,
                               atol=1e-6)


def test_a_graph_op_adds_its_kernels_own_work_per_member():
    """A profile's "cpu:graph" latency (what the graph kernel adds per member op) is added to
    the members' sum once per member: m ops of t2 and a step s take m * (t2 + s)."""
    t2, step = 1e-6, 3e-6

    def hybrid(nd):
        net = mlp()
        x = nd.ones((2, 5))
        net(x)
        net.hybridize()
        net(x)
        nd.waitall()

    base = asyncsim.Profile.ideal(t1=1e-3, t2=t2, t3=0.0)
    stepped = dataclasses.replace(base, costs={**base.costs, "cpu:graph": Cost(latency=step)})
    program = asyncsim.record(hybrid)
    graph = next(op for op in program.ops if op.name == "graph")
    members = len(graph.attrs["graph"].ops)
    assert base.cost(graph) == pytest.approx(members * t2)
    assert stepped.cost(graph) == pytest.approx(members * (t2 + step))


def _pairs(nets):
    a, b = (list(n.collect_params().values()) for n in nets)
    return [(p.name, (p, q)) for p, q in zip(a, b, strict=True)]


def test_the_model_prices_a_graph_as_the_sum_of_its_ops():
    """With constant costs (issue t1, every op t2) a graph op holds its lane for t2 times its
    ops, and is issued once: an issue-bound imperative loop becomes n * (t1 + m * t2)."""
    t1, t2, n = 1e-3, 1e-6, 20

    def loop(nd, hybrid):
        net = mlp()
        x = nd.ones((2, 5))
        net(x)
        if hybrid:
            net.hybridize()
            net(x)
        nd.waitall()
        with nd.benchmark("forwards"):
            for _ in range(n):
                net(x)
            nd.waitall()

    profile = asyncsim.Profile.ideal(t1=t1, t2=t2, t3=0.0)
    ops_per_forward = sum(asyncsim.record(lambda nd: mlp()(nd.ones((2, 5)))).counts()[k]
                          for k in ("dot", "add", "relu", "tanh"))
    imperative = asyncsim.predict(loop, profile, hybrid=False)
    hybridized = asyncsim.predict(loop, profile, hybrid=True)
    graph_spans = [s for s in hybridized.spans if s.name == "graph" and s.kind == "exec"]
    assert len(graph_spans) == n + 1  # the traced call's graph, then the loop's
    for span in graph_spans:
        assert span.duration == pytest.approx(ops_per_forward * t2)
    assert imperative.regions["forwards"] == pytest.approx(n * ops_per_forward * t1, rel=0.01)
    assert hybridized.regions["forwards"] == pytest.approx(n * t1 + ops_per_forward * t2,
                                                           rel=0.01)


def test_training_and_inference_get_their_own_graphs(nd):
    """A hybridized BatchNorm uses running statistics outside record and batch statistics
    (moving the running ones) under it, as the imperative one does, whichever mode came
    first."""
    x = _data(nd, (4, 3, 2, 2), seed=5) * 3.0 + 1.0
    nets = []
    for hybrid in (False, True):
        net = nn.HybridSequential()
        net.add(nn.BatchNorm(), nn.Dense(2))
        net.initialize(init=init.One())
        net(x)
        if hybrid:
            net.hybridize()
        nets.append(net)
    for step in ("predict", "train", "predict", "train"):
        outs = []
        for net in nets:
            if step == "train":
                with autograd.record():
                    outs.append(net(x).asnumpy())
            else:
                outs.append(net(x).asnumpy())
        np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-6, err_msg=step)
    (_, (a, b)), = [pair for pair in _pairs(nets) if pair[0].endswith("running_mean")]
    np.testing.assert_allclose(b.data().asnumpy(), a.data().asnumpy(), rtol=1e-6)
    moved = (1 - 0.9 ** 2) * x.asnumpy().mean(axis=(0, 2, 3))  # two training calls
    np.testing.assert_allclose(b.data().asnumpy(), moved, rtol=1e-4)


def test_arrays_made_inside_a_block_replay_under_record(nd):
    """A block that makes an array (ones_like) replays under record on the input's device,
    with the imperative gradient."""

    class Shifted(nn.HybridBlock):
        def hybrid_forward(self, F, x):
            return x * x + F.ones_like(x)

    x = nd.array(np.array([1.0, -2.0, 3.0]))
    x.attach_grad()
    net = Shifted()
    net.hybridize()
    np.testing.assert_allclose(net(x).asnumpy(), [2.0, 5.0, 10.0])
    with autograd.record():
        y = net(x)
    y.backward()
    np.testing.assert_allclose(y.asnumpy(), [2.0, 5.0, 10.0])
    np.testing.assert_allclose(x.grad.asnumpy(), [2.0, -4.0, 6.0])


def test_the_error_names_the_child_block_too(nd):
    """Inside a hybridized HybridSequential the error names the traced block and the child
    that did it."""
    net = nn.HybridSequential()
    bad = Misbehaving("asnumpy")
    net.add(nn.Dense(3), bad)
    net.initialize()
    net.hybridize()
    with pytest.raises(HybridizeError, match=f"^{net.name}/{bad.name}: asnumpy inside"):
        net(nd.ones((2, 3)))


def test_with_the_book_profile_a_graph_costs_its_ops_and_saves_issues():
    """With the book's profile a graph op's predicted run is the sum of its ops' costs, and
    the hybridized loop is predicted faster than the imperative one (one issue per forward)."""
    from asyncsim.lab.scenarios.training import hybridize_mlp

    profile = asyncsim.Profile.preset("book")
    program = asyncsim.record(hybridize_mlp, n=50)
    graphs = [op for op in program.ops if op.name == "graph"]
    assert len(graphs) == 50
    members = graphs[0].attrs["graph"].ops
    assert {m.name for m in members} == {"dot", "add", "relu"}
    assert profile.cost(graphs[0]) == pytest.approx(sum(profile.cost(m, m.name == "add")
                                                        for m in members))
    trace = asyncsim.simulate(program, profile)
    spans = [s for s in trace.spans if s.name == "graph" and s.kind == "exec"]
    assert [s.duration for s in spans] == pytest.approx([profile.cost(graphs[0])] * 50)
    assert trace.regions["after hybridizing"] < trace.regions["before hybridizing"]
