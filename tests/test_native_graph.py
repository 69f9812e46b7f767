"""A hybridized graph that the compiled worker runs whole (`realexec.cpu.native_ops.GRAPH`).

A graph of dense layers with relu (products, bias adds, elementwise ops) is encoded once
(`realexec.cpu.graph.program`) and each call is one op the worker runs with no Python and no
GIL: its outputs equal the imperative ones under one and two workers and in sync mode, two
workers run calls of one graph at once (each call has its own temporaries), a failed input
surfaces at the blocker naming the op that failed, and on the Python engine the same graph
still runs in Python. The model's `Graph.compiled` says which graphs run whole as the engine
does, and prices them without the graph kernel's Python and without the GIL.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import asyncsim
import realexec
import realexec.cpu.graph as cpu_graph
from asyncsim import init
from asyncsim.gluon import nn
from asyncsim.model.profile import Cost
from realexec.cpu import kernels as cpu
from realexec.cpu.worker import GEMM_ADDRESSES
from realexec.engine.deps import OpError

# the worker multiplies through numpy's ILP64 OpenBLAS, found by address; with another BLAS a
# product, and so any graph holding one, stays in Python
needs_gemm = pytest.mark.skipif(GEMM_ADDRESSES is None,
                                reason="numpy's BLAS is not the ILP64 OpenBLAS the worker calls")


def dense_relu(dtype="float32", hidden=(16, 8), outputs=3):
    net = nn.HybridSequential()
    for width in hidden:
        net.add(nn.Dense(width, activation="relu", dtype=dtype))
    net.add(nn.Dense(outputs, dtype=dtype))
    net.initialize(init=init.Normal(0.5))
    return net


def with_tanh():
    net = nn.HybridSequential()
    net.add(nn.Dense(8, activation="tanh"), nn.Dense(2))
    net.initialize(init=init.Normal(0.5))
    return net


def flattening():
    net = nn.HybridSequential()
    net.add(nn.Flatten(), nn.Dense(4, activation="relu"), nn.Dense(2))
    net.initialize(init=init.Normal(0.5))
    return net


def _x(nd, shape, seed=0, dtype="float32"):
    return nd.array(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def _refuse(*args, **kwargs):
    raise AssertionError("the graph kernel's Python ran")


def _calls_after_the_first(engine, workers, mode, dtype, monkeypatch):
    """Outputs of a hybridized `dense_relu` on four inputs, the graph kernel's Python refused
    after the first hybridized call (the trace, and the program made once), beside the
    imperative outputs."""
    with realexec.session(workers=workers, mode=mode, engine=engine) as nd:
        net = dense_relu(dtype)
        xs = [_x(nd, (5, 7), seed=s, dtype=dtype) for s in range(4)]
        want = [net(x).asnumpy() for x in xs]
        net.hybridize()
        net(xs[0]).wait_to_read()
        monkeypatch.setattr(cpu_graph, "_cached_plan", _refuse)
        got = [net(x).asnumpy() for x in xs]
    return got, want


@needs_gemm
@pytest.mark.parametrize("workers, mode", [(1, "async"), (2, "async"), (1, "sync")])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_worker_runs_the_graph_and_matches_the_imperative_call(workers, mode, dtype,
                                                                    monkeypatch):
    got, want = _calls_after_the_first("native", workers, mode, dtype, monkeypatch)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_on_the_python_engine_the_graph_runs_in_python(monkeypatch):
    """The check above bites: the Python engine's graph kernel asks for its plan per call."""
    with pytest.raises(OpError, match="graph"):
        _calls_after_the_first("python", 1, "async", "float32", monkeypatch)


@needs_gemm
def test_two_workers_run_calls_of_one_graph_at_once():
    """Fifty calls on different inputs, queued at once on two workers: each output is its
    own input's (a call's temporaries are its own)."""
    with realexec.session(workers=2) as nd:
        net = dense_relu(hidden=(64, 32))
        xs = [_x(nd, (16, 7), seed=i) for i in range(50)]
        want = [net(x).asnumpy() for x in xs]
        net.hybridize()
        net(xs[0]).wait_to_read()
        outs = [net(x) for x in xs]
        nd.waitall()
        for out, expect in zip(outs, want, strict=True):
            np.testing.assert_allclose(out.asnumpy(), expect, rtol=1e-5, atol=1e-6)
        lanes = {s.lane for s in nd._backend.trace().spans
                 if s.name == "graph" and s.kind == "exec"}
    assert lanes and lanes <= {"cpu/w0", "cpu/w1"}


@needs_gemm
def test_a_failed_input_surfaces_naming_the_op_that_failed():
    def broken(inputs, out, attrs):
        raise ZeroDivisionError("broken sigmoid")

    with realexec.session(workers=2) as nd:
        net = dense_relu()
        x = nd.ones((2, 7))
        net.hybridize()
        net(x).wait_to_read()
        nd._backend.kernels = {**cpu.KERNELS, "sigmoid": broken}  # the graph's are untouched
        y = net(nd.sigmoid(x))
        with pytest.raises(OpError, match="'sigmoid'"):
            y.asnumpy()
        with pytest.raises(OpError, match="sigmoid"):
            nd.waitall()
        nd._backend.kernels = cpu.KERNELS
        assert net(x).asnumpy().shape == (2, 3)


def _graph(make, shape, dtype="float32"):
    def workload(nd):
        net = make()
        x = nd.ones(shape, dtype=dtype)
        net(x)
        net.hybridize()
        net(x)

    program = asyncsim.record(workload)
    return next(op for op in program.ops if op.name == "graph")


@needs_gemm
@pytest.mark.parametrize("make, shape, dtype, whole", [
    (dense_relu, (3, 7), "float32", True),
    (lambda: dense_relu(hidden=(32,), outputs=1), (9, 7), "float32", True),
    (with_tanh, (3, 5), "float32", False),  # tanh: a Python kernel
    (flattening, (2, 1, 3, 3), "float32", False),  # the flatten is a reshape: Python
], ids=["dense-relu", "one-hidden", "tanh", "flatten"])
def test_the_model_and_the_engine_agree_on_which_graphs_run_whole(make, shape, dtype, whole):
    graph = _graph(make, shape, dtype).attrs["graph"]
    assert graph.compiled is whole
    assert (cpu_graph.program(graph) is not None) is whole


def test_a_graph_run_whole_pays_no_graph_python_and_no_gil():
    """With `native`, a graph the worker runs whole costs its members' sum (no "cpu:graph"
    per member) and holds no GIL; without `native` it pays both, as a graph run in Python."""
    def loop(nd, n=20):
        net = dense_relu()
        x = nd.ones((2, 7))
        net(x)
        net.hybridize()
        net(x)
        nd.waitall()
        with nd.benchmark("calls"):
            for _ in range(n):
                net(x)
            nd.waitall()

    op = _graph(dense_relu, (2, 7))
    members = len(op.attrs["graph"].ops)
    base = asyncsim.Profile.ideal(t1=1e-6, t2=1e-6, t3=0.0)
    step = dataclasses.replace(base, costs={**base.costs, "cpu:graph": Cost(latency=5e-6)})
    assert step.cost(op) == pytest.approx(members * (1e-6 + 5e-6))
    assert dataclasses.replace(step, native=1).cost(op) == pytest.approx(members * 1e-6)
    program = asyncsim.record(loop)
    gil = dataclasses.replace(step, gil=20e-6, handover=30e-6, workers=2, cores=8)
    python = asyncsim.simulate(program, gil).regions["calls"]
    native = asyncsim.simulate(program, dataclasses.replace(gil, native=1)).regions["calls"]
    assert native < python - 20 * members * 5e-6 / 2
