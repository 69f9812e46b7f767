"""Sync mode on the compiled engine (MXNet's NaiveEngine): each op runs inside its push.

Native ops run and stamp their table record in one compiled call (`worker.run_stamped`) and their
spans are read out of the table with the others'; Python ops still log theirs as they run. Either
way the trace shows, per op, an "issue" span on the frontend, then its "exec" span on the lane's
first worker, covered by a frontend "wait" named after the op, one op after another. Over more
ops than the table has slots, each span is read out exactly once."""

from __future__ import annotations

import numpy as np
import pytest

import realexec
from asyncsim.nd.frontend import ND
from realexec.engine.native import NativeEngine
from realexec.frontend import EngineBackend


def _mixed(nd, steps):
    """Native ops (x + 1, relu, a product) between Python ones (a sum, a broadcast)."""
    x = nd.ones((4, 4))
    for _ in range(steps):
        x = (x * 0.5 + 1).relu()
        x = nd.dot(x, x) / 4 + x.sum(axis=0)  # a reduction and a broadcast add: Python kernels
    return x.asnumpy()


@pytest.mark.parametrize("capacity", [8, 4096])
def test_each_op_is_issued_run_and_waited_for_once_in_turn(capacity):
    engine = NativeEngine(workers=1, mode="sync", capacity=capacity)
    backend = EngineBackend(engine)
    nd = ND(backend, current=False)
    value = _mixed(nd, 10)
    trace = backend.trace()
    engine.close()
    with realexec.session(workers=2) as ref:
        np.testing.assert_allclose(value, _mixed(ref, 10), rtol=1e-6)
    issues = trace.spans_of("frontend", "issue")
    execs = sorted((s for s in trace.spans if s.kind == "exec"), key=lambda s: s.start)
    waits = [s for s in trace.spans_of("frontend", "wait") if s.op_id >= 0]
    assert len(issues) == len(execs) == len(waits) == 1 + 10 * 7
    assert {s.lane for s in execs} == {"cpu/w0"}
    assert sorted(s.op_id for s in issues) == sorted(s.op_id for s in execs) == sorted(
        s.op_id for s in waits) == list(range(len(issues)))
    by_op = {s.op_id: s for s in execs}
    for issue, wait in zip(sorted(issues, key=lambda s: s.op_id),
                           sorted(waits, key=lambda s: s.op_id), strict=True):
        run = by_op[issue.op_id]
        assert issue.name == run.name == wait.name
        assert issue.start <= issue.end <= run.start <= run.end <= wait.end
        assert wait.start <= run.start
    for before, after in zip(execs, execs[1:], strict=False):
        assert before.end <= after.start  # one op at a time: each ran inside its push
    native = {"mul_scalar", "add_scalar", "relu", "dot", "div_scalar"}
    assert native <= {s.name for s in execs}


def test_a_sync_mode_op_is_done_when_its_push_returns():
    with realexec.session(workers=1, mode="sync") as nd:
        engine = nd._backend.engine
        x = nd.ones((3,))
        for _ in range(5):
            x = x + 1
            assert engine.pending == 0
        assert x.asnumpy().tolist() == [6.0, 6.0, 6.0]
