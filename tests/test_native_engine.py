"""The compiled engine (`realexec.engine.native`): its op table without threads, then its workers.

The table's functions are plain compiled code: pushing a chain, a diamond and a failure through
them by hand checks the queueing, the low-water mark, the failure flags and that every edge goes
back to the pool. With threads: small independent ops really run on two workers at once, many
short ops with frees racing their completions give numpy's result and give all memory back, a
failing Python kernel surfaces at the blocker of a native op that depends on it, and no thread
outlives the engine.
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import realexec
from realexec import OpError
from realexec.cpu import kernels as cpu
from realexec.cpu import worker
from realexec.cpu.worker import BINARY, GEMM, PYTHON, SCALAR, address, work
from realexec.engine import layout, ready
from realexec.engine import table as t
from realexec.engine.native import NativeEngine

NONE = np.empty(0, np.int64)


def push(s, token, kind=PYTHON, preds=(), lane=0):
    p = list(preds) + [-1, -1, -1]
    more = np.array(p[3:-3], np.int64) if len(preds) > 3 else NONE
    return t.push(s, token, token, lane, kind, 0, 0, 0, 0, 0, 0, 0.0, 0, p[0], p[1], p[2], more,
                  token, 0, 0)


def test_a_chain_runs_in_order_and_gives_its_edges_back():
    buf, s = layout.new_state(16, 0)
    assert push(s, 0)
    assert not push(s, 1, preds=[0])
    assert not push(s, 2, preds=[1])
    assert buf[layout.H_ECOUNT] == 2
    assert ready.pop(s, 0) == 0 and ready.pop(s, 0) == -1  # 1 waits for 0
    ready.complete(s, 0, 0)
    assert buf[layout.H_LOW] == 1 and t.is_done(s, 0) and not t.is_done(s, 1)
    assert ready.pop(s, 0) == 1
    ready.complete(s, 1, 0)
    assert ready.pop(s, 0) == 2
    ready.complete(s, 2, 0)
    assert buf[layout.H_DONE] == 3 and buf[layout.H_LOW] == 3 and buf[layout.H_ECOUNT] == 0


def test_push_past_numbas_dispatcher_converts_and_refuses_as_the_dispatcher_does():
    entry = t.entry(t.push, t.PUSH_TYPES)
    assert entry is not t.push  # compiled, not the dispatcher
    buf, s = layout.new_state(16, 0)
    # a numpy integer, and an int where the scalar (a float) is declared
    assert entry(s, 0, 0, 0, PYTHON, 0, 0, np.int64(3), 0, 0, 0, 1, 0, -1, -1, -1, NONE, 7,
                 0, 0)
    assert not entry(s, 1, 1, 0, PYTHON, 0, 0, 3, 0, 0, 0, 2.5, 0, 0, -1, -1, NONE, 8, 0, 0)
    assert buf[layout.H_NEXT] == 2 and buf[layout.H_ECOUNT] == 1  # op 1 waits for op 0
    rec = layout.OPS + layout.STRIDE
    assert buf[rec + layout.F_N] == 3 and buf[rec + layout.F_OP] == 8
    assert s.view(np.float64)[rec + layout.F_SCALAR] == 2.5
    with pytest.raises(TypeError):  # an array of another dtype is refused, not misread
        entry(s, 2, 2, 0, PYTHON, 0, 0, 0, 0, 0, 0, 0.0, 0, -1, -1, -1, np.empty(0, np.int32),
              9, 0, 0)
    with pytest.raises(OverflowError):
        entry(s, 2, 2, 0, PYTHON, 0, 0, 0, 0, 0, 0, 0.0, 0, -1, -1, -1, NONE, 1 << 70, 0, 0)
    assert buf[layout.H_NEXT] == 2  # neither refused call recorded anything


def test_a_diamond_waits_for_both_sides_and_the_mark_waits_for_the_slowest():
    buf, s = layout.new_state(16, 0)
    push(s, 0)
    push(s, 1, preds=[0])
    push(s, 2, preds=[0])
    push(s, 3, preds=[1, 2, 1, 0, 2])  # repeats and a 4th pred: each counted, each released
    ready.complete(s, ready.pop(s, 0), 0)
    assert sorted([ready.pop(s, 0), ready.pop(s, 0)]) == [1, 2]
    ready.complete(s, 2, 0)
    assert buf[layout.H_LOW] == 1  # 1 still runs: the mark stops below it
    assert ready.pop(s, 0) == -1
    ready.complete(s, 1, 0)
    assert buf[layout.H_LOW] == 3 and ready.pop(s, 0) == 3
    ready.complete(s, 3, 0)
    assert buf[layout.H_ECOUNT] == 0


def test_a_failure_marks_the_successors_and_a_finished_predecessor_is_skipped():
    buf, s = layout.new_state(16, 0)
    push(s, 0)
    push(s, 1, preds=[0])
    ready.complete(s, ready.pop(s, 0), layout.FAILED_OWN)
    assert ready.pop(s, 0) == 1
    assert buf[layout.at(1, layout.F_FAILED)] == layout.FAILED_INHERITED
    ready.complete(s, 1, layout.FAILED_INHERITED)
    assert push(s, 2, preds=[0, 1])  # both done: ready at once


def test_ops_go_to_their_own_lane():
    buf, s = layout.new_state(16, 0)
    push(s, 0, lane=0)
    push(s, 1, preds=[0], lane=3)
    ready.complete(s, ready.pop(s, 0), 0)
    assert ready.pop(s, 0) == -1 and ready.pop(s, 3) == 1


def test_the_compiled_worker_runs_native_ops_and_hands_python_ones_back():
    buf, s = layout.new_state(16, 0)
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(4, np.float32)
    a, b = address(x), address(y)
    t.push(s, 0, 0, 0, SCALAR, 2, 0, 4, a, a, b, 3.0, 0, -1, -1, -1, NONE, 0, 0, 0)  # y = x * 3
    t.push(s, 1, 1, 0, BINARY, 0, 0, 4, a, b, b, 0.0, 0, 0, -1, -1, NONE, 1, 0, 0)  # y = x + y
    push(s, 2, preds=[1])
    assert work(s, 0, 5) == 2
    np.testing.assert_array_equal(y, x * 4)
    assert buf[layout.at(0, layout.F_WORKER)] == 5
    assert buf[layout.at(0, layout.F_END)] >= buf[layout.at(0, layout.F_START)]
    ready.complete(s, 2, 0)
    buf[layout.H_STOP] = 1
    assert work(s, 0, 0) == -1


needs_blas = pytest.mark.skipif(worker.GEMM_ADDRESSES is None,
                                reason="numpy's BLAS is not the ILP64 OpenBLAS the worker calls")


@needs_blas
@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 9), k=st.integers(1, 9), n=st.integers(1, 9), ta=st.booleans(),
       tb=st.booleans(), dtype=st.sampled_from([np.float32, np.float64]))
def test_the_compiled_worker_multiplies_matrices_through_numpys_blas(m, k, n, ta, tb, dtype):
    """A `dot` of 2-d arrays is a native op (`GEMM`): the worker calls numpy's BLAS by address,
    without Python, and gives numpy's product for every transpose and both dtypes."""
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    out = np.empty((m, n), dtype)
    attrs = {"transpose_a": ta, "transpose_b": tb}
    kind, code, sizes = worker.native_op("dot", attrs, [a.shape, b.shape])
    assert kind == GEMM
    buf, s = layout.new_state(4, 0, gemm=worker.GEMM_ADDRESSES)
    t.push(s, 0, 0, 0, kind, code, worker.DTYPES[np.dtype(dtype)], out.size, address(a.ravel()),
           address(b.ravel()), address(out.ravel()), sizes, 0, -1, -1, -1, NONE, 0, 0, 0)
    buf[layout.H_STOP] = 0
    push(s, 1, preds=[0])  # a Python op after it: the worker hands it back once GEMM is done
    assert work(s, 0, 0) == 1
    left, right = (a.T if ta else a), (b.T if tb else b)
    # BLAS and numpy may sum in another order: an item where the products cancel (float32, m=1,
    # k=7, n=7: 0.0062721 against 0.0062723) differs by rounding relative to the products' sum
    tol = 1e-5 if dtype is np.float32 else 1e-12
    np.testing.assert_allclose(out, left @ right, rtol=tol,
                               atol=tol * float(np.max(np.abs(left) @ np.abs(right))))


@st.composite
def bias_shapes(draw):
    """A result's shape and a bias's: a run of its dims kept, the others 1, leading 1s maybe
    dropped."""
    a = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    first = draw(st.integers(0, len(a)))
    last = draw(st.integers(first, len(a)))
    b = tuple(d if first <= i < last else 1 for i, d in enumerate(a))
    return a, b[draw(st.integers(0, first)):] or (1,)


@settings(max_examples=40, deadline=None)
@given(shapes=bias_shapes(), op=st.sampled_from(["__add__", "__sub__", "__mul__",
                                                  "__truediv__"]))
def test_a_bias_broadcast_runs_compiled_and_gives_numpys_result(shapes, op):
    """x op b where b repeats as a bias (a dense layer's, a convolution's) is a native op
    (`BLOCK`), and its result is numpy's, bit for bit."""
    a_shape, b_shape = shapes
    assert worker.native_op(op.strip("_").replace("truediv", "div"), {},
                            [a_shape, b_shape]) is not None or a_shape == b_shape
    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape))
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.uniform(0.5, 2.0, b_shape).astype(np.float32)
    with realexec.session(workers=2) as nd:
        got = getattr(nd.array(a), op)(nd.array(b)).asnumpy()
    np.testing.assert_array_equal(got, getattr(a, op)(b))


def test_products_too_large_or_empty_or_of_vectors_stay_python_ops():
    assert worker.native_op("dot", {}, [(2, 0), (0, 3)]) is None
    assert worker.native_op("dot", {}, [(3,), (3,)]) is None
    assert worker.native_op("dot", {}, [(1 << 17, 2), (2, 2)]) is None


def chains(nd, n=40, size=(100, 100)):
    """Two independent chains of small elementwise ops."""
    xs = [nd.ones(size), nd.ones(size)]
    for _ in range(n):
        xs = [x * 1.0001 + 0.5 for x in xs]
    nd.waitall()
    return xs


def finished_while_python_holds_the_gil(engine: str) -> tuple[int, int]:
    """Push 20 ops of ~50 us, then keep the GIL in pure Python for 50 ms with a switch interval
    of a second (no other thread gets the GIL meanwhile): (ops done by then, ops)."""
    interval = sys.getswitchinterval()
    with realexec.session(workers=1, engine=engine) as nd:
        x = nd.ones((400, 400))
        nd.waitall()
        sys.setswitchinterval(1.0)
        try:
            ys = [x + 1.0 for _ in range(20)]
            until = time.perf_counter() + 0.05
            while time.perf_counter() < until:
                pass
            held_until = time.perf_counter_ns()
        finally:
            sys.setswitchinterval(interval)
        nd.waitall()
        engine_ = nd._backend.engine
        ends = [s.end for s in engine_.spans() if s.kind == "exec" and s.name == "add_scalar"]
        cut = (held_until - engine_.origin_ns) * 1e-9
    del ys
    return sum(1 for e in ends if e <= cut), len(ends)


def test_compiled_workers_run_while_python_holds_the_gil():
    """The chapters' premise: the backend needs no interpreter. Python's worker cannot finish
    an op while the frontend keeps the GIL; the compiled one runs them all meanwhile."""
    done, total = finished_while_python_holds_the_gil("native")
    assert total == 20 and done == 20
    done, total = finished_while_python_holds_the_gil("python")
    assert total == 20 and done <= 2


def test_samplers_run_compiled_with_the_python_kernels_numbers():
    """normal and uniform are native ops (`RANDOM`): they finish while the frontend keeps the
    GIL, and with the frontend's seeds they draw what the Python kernels draw, bit for bit."""
    assert worker.native_op("normal", {"loc": 1.0, "scale": 2.0}, [])[0] == worker.RANDOM
    interval = sys.getswitchinterval()

    def draws(nd):
        return [nd.random.normal(1.0, 2.0, shape=(20000,)) for _ in range(5)] + [
            nd.random.uniform(-1.0, 3.0, shape=(20000,)) for _ in range(5)]

    with realexec.session(workers=1) as nd:
        nd.ones((4,)).wait_to_read()  # the worker is in its compiled loop
        sys.setswitchinterval(1.0)
        try:
            arrays = draws(nd)
            until = time.perf_counter() + 0.05
            while time.perf_counter() < until:  # the GIL kept: no Python op could run
                pass
            engine = nd._backend.engine
            done = sum(engine._done(token) for token in range(engine._next))
        finally:
            sys.setswitchinterval(interval)
        total = engine._next
        got = [a.asnumpy() for a in arrays]
    assert done == total
    with realexec.session(workers=1, engine="python") as nd:
        nd.ones((4,)).wait_to_read()  # the same op ids, so the same seeds
        expected = [a.asnumpy() for a in draws(nd)]
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)
    assert got[0].std() > 1.5 and got[5].min() >= -1.0 and got[5].max() <= 3.0


def test_a_hybridized_graph_keeps_its_samplers_in_python():
    """A sampler's record carries its seed and second bound (`random_fields`); a graph replays
    its records, so one with a sampler is not run as native records (its seed would repeat),
    while the same graph without it is."""
    from types import SimpleNamespace

    from realexec.cpu.graph import Step, _native_plan

    assert worker.random_fields("normal", {"scale": 3.0, "seed": 7}) == (
        7, int(np.float64(3.0).view(np.int64)))
    var = SimpleNamespace(shape=(4,), dtype="float32")
    graph = SimpleNamespace(vars={0: var, 1: var, 2: var})
    add = Step("add_scalar", (0,), 2, {"scalar": 1.0}, None, ())
    draw = Step("normal", (), 1, {"loc": 0.0, "scale": 1.0}, ((4,), np.float32), ())
    assert _native_plan(graph, [add]) is not None
    assert _native_plan(graph, [draw, add]) is None


def test_many_short_ops_with_frees_racing_their_completions():
    expected = np.ones((8, 8), np.float32)
    for _ in range(3000):
        expected = expected * np.float32(0.5) + np.float32(1.0)
    with realexec.session(workers=2) as nd:
        x, z = nd.ones((8, 8)), nd.ones((8, 8))
        for _ in range(3000):
            x = x * 0.5 + 1.0  # each rebinding frees the x before
            z = z + x - x
        np.testing.assert_array_equal(x.asnumpy(), expected)
        np.testing.assert_array_equal(z.asnumpy(), np.ones((8, 8), np.float32))
        del x, z
        nd.waitall()
        assert nd._backend.pools["cpu"].live_bytes == 0


def test_a_failing_python_kernel_surfaces_at_a_native_dependent():
    def broken(inputs, out, attrs):
        raise ZeroDivisionError("injected")

    with realexec.session(workers=2) as nd:
        x = nd.ones((4, 4))
        nd._backend.kernels = {**cpu.KERNELS, "relu": broken}
        y = nd.relu(x)  # a Python op now
        nd._backend.kernels = cpu.KERNELS
        z = (y + 1) * 2  # native ops after it
        w = x + 1  # independent
        np.testing.assert_array_equal(w.asnumpy(), np.full((4, 4), 2, np.float32))
        with pytest.raises(OpError, match="relu") as info:
            z.asnumpy()
        assert isinstance(info.value.__cause__, ZeroDivisionError)
        with pytest.raises(OpError, match="relu"):
            nd.waitall()


def test_no_thread_outlives_the_engine_and_a_long_queue_drains_at_close():
    before = threading.active_count()
    engine = NativeEngine(workers=3, capacity=64)  # a small table: pushes wait for slots
    done = []
    var = engine.new_var("v")
    for i in range(500):
        engine.push(done.append, (), (var,), args=(i,))
    engine.close()
    assert done == list(range(500))
    assert threading.active_count() == before


def test_the_python_engine_is_still_there_as_the_contrast():
    trace = realexec.run(chains, workers=2, engine="python", n=3)
    assert trace.meta["engine"] == "python"
    with pytest.raises(ValueError, match="engine must be one of"):
        realexec.run(chains, engine="cpp")


def test_memory_comes_back_while_the_frontend_waits():
    """The frontend frees: asleep in a long waitall it still gives back the memory of arrays
    dropped while their ops were queued. Two Python ops on the one worker pin the order: the
    first holds every op back until all are issued, the last holds the waitall open until a
    watcher sees live bytes fall, so no thread's scheduling can decide the outcome."""
    with realexec.session(workers=1) as nd:
        engine, pool = nd._backend.engine, nd._backend.pools["cpu"]
        x = nd.ones((500, 500))
        nd.waitall()
        base = pool.live_bytes
        first, last, fell = threading.Event(), threading.Event(), threading.Event()
        engine.push(first.wait, (), (engine.new_var("first"),), args=(30.0,))
        for _ in range(20):
            y = x * 1.0001  # one op, ready at once (a second op would queue behind `last`)
        engine.push(last.wait, (), (engine.new_var("last"),), args=(30.0,))
        queued = pool.live_bytes - base
        del y

        def watch():
            first.set()
            deadline = time.monotonic() + 30.0
            while time.monotonic() < deadline and pool.live_bytes > base + queued // 4:
                time.sleep(0.001)
            if pool.live_bytes <= base + queued // 4:
                fell.set()
            last.set()

        watcher = threading.Thread(target=watch)
        watcher.start()
        nd.waitall()
        watcher.join()
    assert queued == 20 * 500 * 500 * 4  # the float32 ys, none run yet
    assert fell.is_set(), "live bytes stayed up while the frontend waited on the last op"


def test_a_free_poll_looks_only_at_the_deletions_it_can_give_back():
    """A blocked frontend gives memory back every millisecond: with a thousand deletions
    waiting behind one held op, a poll asks about the first one's ops only (scanning them all
    took a fifth of a core from the workers), and once the op is let go every one comes back
    once, each only after its op has finished. Not in push order: the thousand ops become ready
    together and finish in the ready queue's order, which a poll in the middle sees (a loaded
    machine showed it)."""
    engine = NativeEngine(workers=1)
    gate, held = threading.Event(), engine.new_var("held")
    engine.push(gate.wait, (), (held,), args=(30.0,))
    freed, asked, early, writers = [], [], [], []
    done = engine._done

    def give_back(i):
        if not done(writers[i]):
            early.append(i)
        freed.append(i)

    for i in range(1000):
        var = engine.new_var(i)
        engine.push(_nothing, (held,), (var,))
        writers.append(engine._deps.last_write(var))
        engine.delete_var(var, give_back, (i,))
    engine._done = lambda token: asked.append(token) or done(token)
    engine._run_frees()
    assert freed == [] and len(asked) == 1
    gate.set()
    engine.wait_all()
    assert sorted(freed) == list(range(1000)) and early == []
    engine.close()


def _nothing():
    return None
