"""The compiled engine's side of the frontend's fast path: `EngineBackend.issue_same` does what
`issue` does with the records `same_records` builds (results, spans, memory), takes the general
path wherever the common case does not hold, and says at the call what went wrong; the engine
gives a deleted var's memory back at once when the low-water mark says its ops are done, and
reads spans out of a table that wraps around many times, each once; a push's own span, which
the push stamps in the table, is read out once however often the log is read.
"""

from __future__ import annotations

import threading
from time import perf_counter_ns

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import realexec
from asyncsim.nd import ops
from asyncsim.nd.frontend import ND, same_records
from asyncsim.nd.program import Op, Program
from asyncsim.nd.record import Recorder
from realexec.cpu import kernels as cpu
from realexec.engine.native import NativeEngine
from realexec.engine.shutdown import EngineStopped
from realexec.engine.spans import _clear
from realexec.frontend import EngineBackend

# every operator that takes `ND._same` with a fresh result
FRESH = [
    lambda a, b: a + 2.5, lambda a, b: 3 - a, lambda a, b: a * 0.5, lambda a, b: 4 / a,
    lambda a, b: -a, lambda a, b: a.relu(), lambda a, b: a.copy(), lambda a, b: a + b,
    lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a / b,
]


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(0, 4), max_size=3).map(tuple), dtype=st.sampled_from(ops.DTYPES))
def test_same_records_are_what_a_recording_nd_issues(shape, dtype):
    """The records a backend's `issue_same` stands for are the ones `ND._same` hands `issue`."""
    for call in FRESH:
        program = Program()
        nd = ND(Recorder(program))
        result = call(nd.ones(shape, dtype=dtype), nd.full(shape, 2.0, dtype=dtype))
        op = [i for i in program.instrs if isinstance(i, Op)][-1]
        var = program.vars[result.var]
        assert same_records(op.id, op.name, op.reads, op.out, var.shape, var.dtype, var.device,
                            op.attrs, var.nbytes) == (op, var)


def _watch(backend, seen: list):
    """Make `backend.issue` note each op's name in `seen`; the method as it was."""
    issue = backend.issue
    backend.issue = lambda op, *rest: seen.append(op.name) or issue(op, *rest)
    return issue


def _program(nd):
    """Fast-path ops with frees between them, ending in one array, as numpy values."""
    x, y = nd.array(np.arange(6.0).reshape(2, 3) + 1), nd.full((2, 3), 3.0)
    for _ in range(50):
        x = (x * 0.5 + y).relu() - y / 4
        y = -(x.copy() - 1) * 2
    return x.asnumpy(), y.asnumpy()


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_issue_same_does_what_issue_does(mode):
    """The same program, with the fast path and with the records handed to `issue`: the same
    values, an "issue" span per op on the frontend and an "exec" span per op, in the same order
    of op names, and in sync mode (where each op runs in its push) the same live bytes at every
    change. The fast path was taken: `issue` saw only the arrays made from data and numbers."""
    runs = []
    for fast in (True, False):
        with realexec.session(workers=1, mode=mode) as nd:
            backend, general = nd._backend, []
            issue = _watch(backend, general)
            if not fast:
                nd._issue_same = nd._issue_scalar = None
            values = _program(nd)
            nd.waitall()
            trace = backend.trace()
            backend.issue = issue
        issues = [s.name for s in trace.spans_of("frontend", "issue")]
        execs = sorted(s.name for s in trace.spans if s.kind == "exec")
        lives = [b for _, dev, b in trace.memory if dev == "cpu"]
        runs.append((values, issues, execs, lives, general))
    (fast_values, *fast_rest), (slow_values, *slow_rest) = runs
    for a, b in zip(fast_values, slow_values, strict=True):
        np.testing.assert_array_equal(a, b)
    assert fast_rest[0] == slow_rest[0] and len(fast_rest[0]) == 2 + 50 * 9
    assert fast_rest[1] == slow_rest[1]
    if mode == "sync":
        assert fast_rest[2] == slow_rest[2]
    assert fast_rest[3] == ["array", "full"] and len(slow_rest[3]) == len(fast_rest[0])


def test_the_general_path_serves_what_the_fast_path_does_not_cover():
    """cpu(1), a replaced kernel and the Python engine go through `issue` and still compute."""
    with realexec.session(workers=1) as nd:
        backend, seen = nd._backend, []
        issue = _watch(backend, seen)
        a = nd.ones((2, 2), ctx=nd.cpu(1))
        np.testing.assert_array_equal((a + 1).asnumpy(), np.full((2, 2), 2, np.float32))
        assert seen == ["ones", "add_scalar"]

        def doubled(inputs, out, attrs):  # a teacher's tracer: runs in Python, as given
            seen.append("traced")
            out[...] = inputs[0] * 2

        backend.kernels = {**cpu.KERNELS, "mul_scalar": doubled}
        b = nd.ones((2, 2)) * 5
        np.testing.assert_array_equal(b.asnumpy(), np.full((2, 2), 2, np.float32))
        assert seen[-2:] == ["mul_scalar", "traced"]
        backend.kernels, backend.issue = cpu.KERNELS, issue
    with realexec.session(workers=1, engine="python") as nd:
        assert nd._issue_same is None
        np.testing.assert_array_equal((nd.ones((3,)) - 1).asnumpy(), np.zeros(3, np.float32))


def test_the_fast_path_fails_at_the_call_and_leaves_nothing_counted():
    """An output that cannot be had is a MemoryError naming the op and the shape; an op refused
    by a closed engine gives its fresh output back. Live bytes are as before either way (the
    pool's: every result in it, no light results)."""
    with realexec.session(workers=1, engine="native") as nd:
        backend = nd._backend
        pool = backend.pools["cpu"]
        x = nd.ones((3, 4))
        nd.waitall()
        live = pool.live_bytes

        def refused(shape, dtype):
            raise MemoryError("no pages left")

        backend._acquire_cpu = refused
        with pytest.raises(MemoryError, match=r"mul_scalar: .*shape \(3, 4\) \(float32\)"):
            x * 2
        assert pool.live_bytes == live
        backend._acquire_cpu = pool.acquire
        backend.engine.close()
        with pytest.raises(EngineStopped, match="add_scalar"):
            x + 1
        assert pool.live_bytes == live
        del x


def test_a_deleted_var_whose_ops_are_done_is_given_back_at_once():
    """Below the low-water mark every op is done: the deletion runs at the call, without asking
    about each user (as a free per op would) and without waiting in the heap."""
    with NativeEngine(workers=1) as engine:
        readers = [engine.new_var(i) for i in range(3)]
        var = engine.new_var("v")
        engine.push(_nothing, (), (var,))
        for r in readers:
            engine.push(_nothing, (var,), (r,))
        engine.wait_all()
        asked, freed = [], []
        done = engine._done
        engine._done = lambda token: asked.append(token) or done(token)
        engine.delete_var(var, freed.append, ("v",))
        assert freed == ["v"] and asked == [] and engine._frees == []


def test_a_small_table_reads_every_span_out_once():
    """A table of 16 slots wraps around many times: each native op's exec span is read out
    once, and the records of the ops read out are dropped (no buffer is kept alive by them)."""
    engine = NativeEngine(workers=1, capacity=16)
    backend = EngineBackend(engine)
    nd = ND(backend, current=False)
    x = nd.ones((4,))
    for _ in range(300):
        y = x + 1
    nd.waitall()
    engine.flush()
    assert engine._ops == [None] * 16
    execs = [s for s in backend.trace().spans if s.kind == "exec"]
    assert sorted(s.op_id for s in execs) == list(range(301))
    np.testing.assert_array_equal(y.asnumpy(), np.full(4, 2, np.float32))
    del x, y
    backend.close()


def test_a_frontend_ahead_of_its_workers_reads_spans_out_every_few_pushes_not_every_push():
    """While a held op keeps the low-water mark still, pushes past a block's worth look at the
    table once per `spans.RECHECK` pushes (each look copied out the few ops done since, at every
    push, before), and still every span is read out once the ops ran."""
    from realexec.engine import spans

    with NativeEngine(workers=1, capacity=1024) as engine:
        looks = []
        harvest = engine._harvest
        engine._harvest = lambda token, beyond=False: (looks.append(token),
                                                        harvest(token, beyond))[1]
        gate, held = threading.Event(), engine.new_var("held")
        engine.push(gate.wait, (), (held,), name="gate", op_id=0)
        pushes = engine._harvest_every + 8 * spans.RECHECK
        for i in range(1, pushes):
            engine.push(_nothing, (held,), (engine.new_var(i),), name="op", op_id=i)
        assert 1 <= len(looks) <= 9
        gate.set()
        engine.wait_all()
        engine.flush()
        execs = sorted(e[3] for e in engine.log if e[1] == "exec")
    assert execs == list(range(pushes))


def test_issue_spans_are_read_out_once_however_often_the_log_is_read():
    """Each push stamps its issue span in the table, on the clock the frontend reads. Reading
    the log while the ops still wait behind a held one gives all their issue spans; reading it
    again after they ran, and again, gives none twice, and each op's own exec span once."""
    with NativeEngine(workers=1, capacity=16) as engine:
        gate = threading.Event()
        held = engine.new_var("held")
        around = []
        before = perf_counter_ns()
        engine.push(gate.wait, (), (held,), name="gate", op_id=0)
        around.append((before, perf_counter_ns()))
        for i in range(1, 12):
            before = perf_counter_ns()
            engine.push(_nothing, (held,), (engine.new_var(i),), name=f"op{i}", op_id=i)
            around.append((before, perf_counter_ns()))
        engine.flush()
        first = [e for e in engine.log if e[1] == "issue"]
        gate.set()
        engine.wait_all()
        engine.flush()
        engine.flush()
        issues = [e for e in engine.log if e[1] == "issue"]
        execs = [e for e in engine.log if e[1] == "exec"]
    assert sorted(e[3] for e in first) == list(range(12)) and issues == first
    for _, _, name, op_id, a, b in issues:
        assert name == ("gate" if op_id == 0 else f"op{op_id}")
        assert around[op_id][0] <= a <= b <= around[op_id][1]
    assert sorted(e[3] for e in execs) == list(range(12))


@given(cap=st.sampled_from([1, 2, 8]), lo=st.integers(0, 40), n=st.integers(0, 20))
def test_clearing_a_range_of_tokens_drops_exactly_their_slots(cap, lo, n):
    """`_clear` empties the ring slots of tokens lo..lo+n-1, wrapping, and touches no other."""
    ops = list(range(cap))
    _clear(ops, lo, lo + n)
    gone = {token % cap for token in range(lo, lo + n)}
    assert ops == [None if i in gone else i for i in range(cap)]


def _nothing():
    return None
