"""A long session can record less: `trace=False` keeps no spans, memory samples or marks (live
and peak bytes are still counted), `trace=N` keeps about the last N of each, and `trace=True`
(the default) keeps everything.
"""

from __future__ import annotations

import pytest

import realexec


def loop(nd, n=200):
    x = nd.ones((8, 8))
    with nd.benchmark("loop"):
        for _ in range(n):
            y = x + 1
        nd.waitall()
    return y


def test_trace_false_records_nothing_but_counts_memory():
    """trace=False: no span in the engine's log, no memory sample beyond the first, no mark;
    the pool still knows its live and peak bytes (of every result: no light results), and the
    trace still builds."""
    with realexec.session(workers=1, trace=False, engine="native") as nd:
        loop(nd)
        backend = nd._backend
        assert len(backend.engine.log) == 0
        assert len(backend.pools["cpu"].samples) == 1
        assert backend.pools["cpu"].peak_bytes >= 2 * 8 * 8 * 4
        trace = backend.trace()
    assert trace.spans == [] and trace.marks == []


def test_trace_n_keeps_the_last_n():
    """trace=50: at most 50 spans and about 100 memory samples at most, the latest ones."""
    with realexec.session(workers=1, trace=50) as nd:
        loop(nd)
        backend = nd._backend
        spans = backend.engine.spans()
        samples = backend.pools["cpu"].samples
    assert 0 < len(spans) <= 50
    assert 0 < len(samples) <= 110  # trimmed at releases: about twice the cap at most
    assert max(s.op_id for s in spans) >= 200  # the last ops are among those kept


def test_run_takes_trace_too():
    """realexec.run(..., trace=False) returns a Trace without spans, with its meta."""
    trace = realexec.run(loop, workers=1, trace=False, n=20)
    assert trace.spans == [] and trace.meta["workload"] == "loop"
    full = realexec.run(loop, workers=1, n=20)
    assert len(full.spans) > 40


@pytest.mark.parametrize("bad", [-1, "all", 2.5])
def test_a_bad_trace_value_is_a_value_error(bad):
    """trace must be True, False or a non-negative count."""
    with pytest.raises(ValueError, match="trace"):
        with realexec.session(trace=bad):
            pass
