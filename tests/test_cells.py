"""Notebook cells: `nd.cell()` is a pause both halves honour: the frontend idles until every
queued op has finished, pays no blocker cost, and the trace shows a "cell" wait span."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import realexec
from asyncsim.lab.scenarios import get
from asyncsim.model.profile import Profile
from asyncsim.model.simulate import predict
from asyncsim.nd.program import Sync


def _two_cells(nd, n=4, size=64):
    x = nd.ones((size, size))
    with nd.benchmark("queued"):
        for _ in range(n):
            y = nd.dot(x, x)
    nd.cell()
    with nd.benchmark("next cell"):
        y = x + 1
        y.wait_to_read()


def _cell_span(trace):
    (span,) = [s for s in trace.spans_of("frontend", "wait") if s.name == "cell"]
    return span


def test_predicted_cell_waits_for_the_queue_and_costs_nothing_more():
    """The predicted "cell" span ends when the last queued op ends, not t3 later, and the next
    cell's first op starts on an idle lane."""
    profile = Profile.ideal(t1=1e-5, t2=1e-3, t3=5e-4)
    trace = predict(_two_cells, profile)
    cell = _cell_span(trace)
    execs = sorted(trace.spans_of(kind="exec"), key=lambda s: s.start)
    before = [s for s in execs if s.start < cell.end]
    assert cell.end == pytest.approx(max(s.end for s in before))
    after = [s for s in execs if s.start >= cell.end]
    assert after and after[0].start >= cell.end + profile.t1 - 1e-12


def test_measured_cell_waits_for_the_queue():
    """On the real engine the frontend's "cell" span lasts until every op issued before it has
    run, and nothing issued after it starts earlier."""
    trace = realexec.run(_two_cells, workers=1, n=4, size=64)
    cell = _cell_span(trace)
    products = [s for s in trace.spans_of(kind="exec") if s.name == "dot"]
    assert len(products) == 4
    assert max(s.end for s in products) <= cell.end
    later = [s for s in trace.spans_of(kind="exec") if s.name == "add_scalar"]
    assert later and all(s.start >= cell.end for s in later)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(min_value=0, max_value=12),
       t2=st.floats(min_value=1e-6, max_value=1e-2),
       t3=st.floats(min_value=0.0, max_value=1e-2))
def test_a_cell_lasts_exactly_as_long_as_the_backlog(n, t2, t3):
    """Whatever the queue holds, the cell's span is the time its ops still need: it starts when
    the frontend reaches it and ends when the last of them ends (at once when none is left)."""
    profile = Profile.ideal(t1=1e-5, t2=t2, t3=t3)
    trace = predict(_two_cells, profile, n=n, size=4)
    cell = _cell_span(trace)
    ends = [s.end for s in trace.spans_of(kind="exec") if s.start < cell.end]
    assert cell.end == pytest.approx(max([cell.start, *ends]))


def test_the_warmup_scenarios_run_done_as_the_next_cell():
    """12.2.1's and the PyTorch page's 'Done' are the cell after the queued block: a cell
    boundary stands between the two regions, so 'Done' starts with an idle backend."""
    for name, queued in (("warmup", "mxnet.np"), ("torch_warmup", "torch")):
        program = get(name).record(quick=True)
        kinds = [(type(i).__name__, getattr(i, "kind", getattr(i, "label", None)))
                 for i in program.instrs if not hasattr(i, "reads")]
        cell = kinds.index(("Sync", "cell"))
        assert kinds.index(("Mark", queued)) < cell < kinds.index(("Mark", "Done"))
        assert sum(isinstance(i, Sync) and i.kind == "cell" for i in program.instrs) == 1


def test_the_warmup_pause_shows_in_the_predicted_and_the_measured_trace():
    """12.2.1's warm-up at quick sizes: both the model's trace and the engine's have the "cell"
    span between 'mxnet.np' and 'Done'."""
    sc = get("warmup")
    pred = predict(sc.workload, Profile.preset("book"), **sc.kwargs(quick=True))
    meas = realexec.run(sc.workload, **sc.kwargs(quick=True))
    for trace in (pred, meas):
        cell = _cell_span(trace)
        marks = {label: (a, b) for label, a, b in trace.marks}
        assert marks["mxnet.np"][1] <= cell.start <= cell.end <= marks["Done"][0]
