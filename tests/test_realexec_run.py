"""The realexec entry points: run(workload) -> Trace and session() -> nd, with the same `nd`
surface as asyncsim.record (one workload, both backends), and the Trace they produce.
"""

from __future__ import annotations

import numpy as np
import pytest

import realexec
from asyncsim.nd.frontend import ND
from asyncsim.nd.program import Sync
from asyncsim.nd.record import record
from asyncsim.nd.trace import Trace
from realexec.engine.lanes import default_workers


def d2l_loop(nd, n=4, shape=(64, 64), sync=True):
    x = nd.ones(shape)
    with nd.benchmark("loop"):
        for _ in range(n):
            y = x + 1
            if sync:
                y.wait_to_read()
        nd.waitall()


def mixed(nd, n=3):
    x = nd.random.uniform(shape=(8, 8))
    w = nd.random.normal(shape=(8, 8))
    h = nd.relu(nd.dot(x, w))
    h[0:2] = 0.5
    h += 1
    loss = ((h - x) * (h - x)).mean()
    for _ in range(n):
        w = w - 0.1 * h
    print(loss)
    total = w.sum() + h.norm()
    total.item()
    x[3] = w[2]
    x.asnumpy()
    nd.waitall()


def test_run_returns_a_measured_trace():
    """The trace has issue/wait spans on the frontend, exec spans on cpu/w{i}, the benchmark
    region and the run's description in meta."""
    trace = realexec.run(d2l_loop, workers=2, n=3)
    assert isinstance(trace, Trace)
    assert trace.meta["source"] == "measured"
    assert trace.meta["workload"] == "d2l_loop" and trace.meta["params"] == {"n": 3}
    assert trace.meta["workers"] == 2 and trace.meta["mode"] == "async"
    assert trace.meta["device"] == "cpu" and "cores" in trace.meta["machine"]
    assert set(trace.lanes) <= {"frontend", "cpu/w0", "cpu/w1"} and "frontend" in trace.lanes
    assert {s.kind for s in trace.spans_of("frontend")} == {"issue", "wait"}
    assert {s.kind for s in trace.spans if s.lane != "frontend"} == {"exec"}
    assert all(0 <= s.start <= s.end for s in trace.spans)
    assert list(trace.regions) == ["loop"] and 0 < trace.regions["loop"] <= trace.duration
    assert len(trace.to_chrome()["traceEvents"]) > len(trace.spans)


def test_same_workload_same_ops_as_the_recorder():
    """One workload, two backends: realexec issues exactly the ops asyncsim.record records, with
    the same op ids, and runs each of them once."""
    program = record(mixed, seed=3)
    trace = realexec.run(mixed, seed=3)
    issued = [(s.name, s.op_id) for s in trace.spans_of("frontend", "issue")]
    assert issued == [(op.name, op.id) for op in program.ops]
    executed = sorted(s.op_id for s in trace.spans_of(kind="exec"))
    assert executed == sorted(op.id for op in program.ops)
    assert [s.name for s in trace.spans_of("frontend", "wait")] == [
        i.kind for i in program.instrs if isinstance(i, Sync)]


def test_results_follow_the_seed():
    """Random creation depends on the seed only, not on workers or mode."""
    def draw(nd, out):
        out.append(nd.random.uniform(shape=(5,)).asnumpy())

    a, b, c = [], [], []
    realexec.run(draw, seed=1, workers=1, out=a)
    realexec.run(draw, seed=1, mode="sync", out=b)
    realexec.run(draw, seed=2, workers=2, out=c)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])


def test_workload_and_params_are_checked_first():
    """A non-callable workload, an unknown parameter or a bad mode fail before anything runs."""
    with pytest.raises(TypeError, match="workload"):
        realexec.run(42)
    with pytest.raises(TypeError, match="unknown parameter"):
        realexec.run(d2l_loop, steps=3)
    with pytest.raises(ValueError, match="mode"):
        realexec.run(d2l_loop, mode="lazy")
    with pytest.raises(ValueError, match="workers"):
        realexec.run(d2l_loop, workers=0)


def test_session_gives_the_shared_nd_and_closes_its_engine():
    """session() yields the shared ND surface; leaving the block closes the engine."""
    with realexec.session(workers=1) as nd:
        assert isinstance(nd, ND)
        engine = nd._backend.engine
        assert (nd.ones((2, 2)) * 3).sum().item() == 12.0
    assert engine.closed


def test_default_workers_is_one_per_core():
    """workers=None gives one worker per core the process may use."""
    trace = realexec.run(d2l_loop, n=1)
    assert trace.meta["workers"] == default_workers()


def test_from_first_event_starts_a_measured_clock_at_the_workload():
    """A measured trace's clock starts when the engine is made; from_first_event moves it so
    that its first span or region starts at 0, keeping every duration, region and peak."""
    def workload(nd):
        x = nd.ones((64,))
        with nd.benchmark("region"):
            (x + 1).wait_to_read()

    trace = realexec.run(workload)
    durations = [s.duration for s in trace.spans]
    regions, peak, length = trace.regions, trace.peak_bytes(), trace.duration
    first = min([s.start for s in trace.spans] + [m[1] for m in trace.marks])
    assert first > 0
    assert trace.from_first_event() is trace
    assert min([s.start for s in trace.spans] + [m[1] for m in trace.marks]) == 0.0
    assert [s.duration for s in trace.spans] == pytest.approx(durations)
    assert trace.regions == pytest.approx(regions) and trace.peak_bytes() == peak
    assert trace.duration == pytest.approx(length - first)
    assert min(t for t, _, _ in trace.memory) >= 0.0
