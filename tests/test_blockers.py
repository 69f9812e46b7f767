"""Blockers on the real engine: pushes return at once; wait_to_read, asnumpy, item, print and
waitall wait for exactly what they depend on; max_inflight caps pending ops.

Orderings are read from the Trace (or from a kernel held on an Event), never from wall-clock
thresholds.
"""

from __future__ import annotations

import threading
import time

import numpy as np

import realexec
from realexec.cpu import kernels as cpu


def gated(name, gate: threading.Event, started: threading.Event | None = None):
    """The real kernel of `name`, held until `gate` is set."""
    real = cpu.KERNELS[name]

    def kernel(inputs, out, attrs):
        if started is not None:
            started.set()
        gate.wait()
        real(inputs, out, attrs)

    return kernel


def exec_span(trace, name):
    return next(s for s in trace.spans_of(kind="exec") if s.name == name)


def test_push_returns_while_the_op_is_still_running():
    """A dot held inside its kernel does not hold up the frontend: it keeps issuing ops, and
    wait_to_read then returns only after the dot has run."""
    gate = threading.Event()
    with realexec.session(workers=2) as nd:
        nd._backend.kernels = {**cpu.KERNELS, "dot": gated("dot", gate)}
        x = nd.ones((64, 64))
        y = nd.dot(x, x)
        z = x + 1  # independent of the dot
        z.wait_to_read()
        assert nd._backend.engine.pending >= 1  # the dot is still pending
        gate.set()
        np.testing.assert_array_equal(y.asnumpy(), np.full((64, 64), 64, np.float32))
        trace = nd._backend.trace()
    issue = next(s for s in trace.spans_of("frontend", "issue") if s.name == "dot")
    assert issue.end < exec_span(trace, "dot").end


def test_issue_span_ends_before_a_large_dot_finishes():
    """On a real 1000x1000 product the push span ends before the exec span does, and the
    wait_to_read span ends after it (the frontend waited, then woke). (The product is large
    because the compiled worker starts it at once, BLAS's threads beside it: a frontend kept off
    its core for longer than the product would stamp its push's end late.)"""
    def work(nd):
        x = nd.ones((1000, 1000))
        y = nd.dot(x, x)
        y.wait_to_read()

    trace = realexec.run(work, workers=1)
    dot = exec_span(trace, "dot")
    issue = next(s for s in trace.spans_of("frontend", "issue") if s.name == "dot")
    wait = trace.spans_of("frontend", "wait")[0]
    assert wait.name == "wait_to_read"
    assert issue.start < dot.start and issue.end < dot.end <= wait.end
    assert issue.end <= wait.start


def test_each_blocker_waits_for_its_op():
    """asnumpy, item, print and wait_to_read each end after the op that wrote their array."""
    def work(nd):
        x = nd.ones((50, 50))
        a = x * 2
        a.wait_to_read()
        b = a + 1
        b.asnumpy()
        c = b.sum()
        c.item()
        d = c * 3
        repr(d)

    trace = realexec.run(work, workers=2)
    waits = trace.spans_of("frontend", "wait")
    assert [w.name for w in waits] == ["wait_to_read", "asnumpy", "item", "print"]
    issues = trace.spans_of("frontend", "issue")
    for wait in waits:
        producer = [s for s in issues if s.start < wait.start][-1]
        op = next(s for s in trace.spans_of(kind="exec") if s.op_id == producer.op_id)
        assert op.end <= wait.end


def test_values_read_by_blockers():
    """asnumpy returns a copy of the values; item and asscalar the one element; print shows them."""
    with realexec.session(workers=2) as nd:
        x = nd.array(np.arange(6, dtype=np.float32).reshape(2, 3))
        host = (x * 2).asnumpy()
        np.testing.assert_array_equal(host, np.arange(6).reshape(2, 3) * 2)
        host[:] = -1  # a copy: the engine's array is untouched
        np.testing.assert_array_equal(x.asnumpy(), np.arange(6).reshape(2, 3))
        assert x.sum().item() == 15.0
        assert x[1].sum().asscalar() == 12.0
        assert "NDArray 2x3" in repr(x) and "5." in repr(x)


def test_a_prints_wait_span_covers_its_formatting():
    """The "print" wait span ends after numpy has formatted the values, as the model draws a
    print's wait (t3 and the formatting in one span): every call of the formatter falls inside
    it."""
    from time import perf_counter_ns

    called = []

    def formatter(value):
        called.append(perf_counter_ns())
        return f"{value:.1f}"

    with realexec.session(workers=2) as nd:
        x = nd.ones((2, 3)) * 2.0
        with np.printoptions(formatter={"float": formatter}):
            text = repr(x)
        (start, end), = [(e[4], e[5]) for e in nd._backend.engine.log
                         if e[:3] == ("frontend", "wait", "print")]
    assert "2.0" in text and len(called) >= 6
    assert start <= min(called) and max(called) <= end


def test_waitall_waits_for_every_op():
    """waitall ends after every exec span of ops issued before it."""
    def work(nd):
        xs = [nd.ones((100, 100)) for _ in range(4)]
        ys = [nd.dot(x, x) for x in xs]
        nd.waitall()
        del ys

    trace = realexec.run(work, workers=2)
    waitall = trace.spans_of("frontend", "wait")[0]
    assert waitall.name == "waitall"
    execs = trace.spans_of(kind="exec")
    assert len(execs) == 8
    assert max(s.end for s in execs) <= waitall.end


def test_sync_mode_runs_each_op_inside_its_push():
    """In sync mode every op has finished before the frontend issues the next one."""
    def work(nd):
        x = nd.ones((100, 100))
        for _ in range(5):
            x = x + 1
        x.wait_to_read()

    trace = realexec.run(work, mode="sync")
    issues = trace.spans_of("frontend", "issue")
    execs = trace.spans_of(kind="exec")
    assert {s.lane for s in execs} == {"cpu/w0"}
    for op, next_issue in zip(execs, issues[1:], strict=False):
        assert op.end <= next_issue.start
    # as asyncsim.simulate draws sync mode: a frontend "wait" named after each op covers it
    waits = {s.op_id: s for s in trace.spans_of("frontend", "wait") if s.op_id >= 0}
    for op in execs:
        assert waits[op.op_id].start <= op.start <= op.end <= waits[op.op_id].end


def release_when_blocked(engine, gate):
    """Open `gate` once the frontend is asleep in a wait (so the wait surely happened)."""
    while not engine.blocked:
        time.sleep(0.001)
    gate.set()


def test_max_inflight_caps_pending_ops():
    """With max_inflight=k no op ever sees more than k ops pending, and the frontend's push waits
    (a "max_inflight" wait span) while the cap is reached."""
    seen = []
    with realexec.Engine(workers=1, max_inflight=2) as engine:
        gate = threading.Event()
        v = engine.new_var()
        engine.push(gate.wait, (), (v,), name="gate")
        engine.push(lambda: seen.append(engine.pending), (), (v,), name="second")
        releaser = threading.Thread(target=release_when_blocked, args=(engine, gate))
        releaser.start()
        for _ in range(6):
            engine.push(lambda: seen.append(engine.pending), (), (engine.new_var(),))
        engine.wait_all()
        releaser.join()
        spans = engine.spans()
    assert seen and max(seen) <= 2
    waits = [s for s in spans if s.kind == "wait" and s.name == "max_inflight"]
    gate_span = next(s for s in spans if s.name == "gate")
    assert waits and waits[0].end >= gate_span.end


def test_max_inflight_one_serialises_the_frontend():
    """max_inflight=1: each push returns only after the previous op has finished."""
    def work(nd):
        x = nd.ones((200, 200))
        for _ in range(4):
            x = x * 1.0
        nd.waitall()

    trace = realexec.run(work, workers=2, max_inflight=1)
    issues = trace.spans_of("frontend", "issue")
    execs = sorted(trace.spans_of(kind="exec"), key=lambda s: s.start)
    for op, next_issue in zip(execs, issues[1:], strict=False):
        assert op.end <= next_issue.start
