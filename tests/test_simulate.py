"""The SimPy model against the book's closed forms and the max-plus pipeline solver, plus lanes,
blockers, modes, instruction kinds and its input errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncsim import Profile, Trace, predict, record, simulate
from asyncsim.model import analytic
from asyncsim.model.profile import Cost


def loop(nd, n=10, shape=(4,), sync=False):
    """The chapter's loop: x is ready before the region; y = x + 1 n times; then waitall."""
    x = nd.ones(shape)
    x.wait_to_read()
    with nd.benchmark("loop"):
        for _ in range(n):
            y = x + 1
            if sync:
                y.wait_to_read()
        nd.waitall()
    return y


def _exact(value):
    return pytest.approx(float(value), rel=1e-9, abs=1e-15)


_n = st.integers(1, 60)
_t = st.floats(1e-6, 1e-2)
_ratio = {"backend-bound": st.floats(1.01, 20.0), "frontend-bound": st.floats(0.05, 0.99)}


@pytest.mark.parametrize("regime", ["backend-bound", "frontend-bound"])
@settings(max_examples=30, deadline=None)
@given(data=st.data(), n=_n, t1=_t, t3=_t)
def test_async_loop_equals_the_closed_form(regime, data, n, t1, t3):
    """Back-to-back ops closed by waitall take max(t1 + n t2, n t1 + t2) + t3, in both regimes."""
    t2 = t1 * data.draw(_ratio[regime])
    assert n == 1 or analytic.regime(n, t1, t2) == regime
    trace = predict(loop, Profile.ideal(t1=t1, t2=t2, t3=t3), n=n)
    assert trace.regions["loop"] == _exact(analytic.async_time(n, t1, t2, t3))


@pytest.mark.parametrize("regime", ["backend-bound", "frontend-bound"])
@settings(max_examples=30, deadline=None)
@given(data=st.data(), n=_n, t1=_t, t3=_t)
def test_blocking_loop_equals_the_closed_form(regime, data, n, t1, t3):
    """A wait_to_read per iteration gives n (t1 + t2 + t3), and the closing waitall one more t3;
    MXNet's NaiveEngine (mode='sync') gives the same for the loop without blockers."""
    t2 = t1 * data.draw(_ratio[regime])
    profile = Profile.ideal(t1=t1, t2=t2, t3=t3)
    expected = analytic.sync_time(n, t1, t2, t3) + t3
    assert predict(loop, profile, n=n, sync=True).regions["loop"] == _exact(expected)
    assert predict(loop, profile, mode="sync", n=n).regions["loop"] == _exact(expected)


def test_sync_mode_still_charges_every_blocker():
    """In mode='sync' each op already costs t1 + t2 + t3, and each blocker adds its own t3."""
    t1, t2, t3, n = 1e-5, 1e-3, 2e-5, 7
    trace = predict(loop, Profile.ideal(t1=t1, t2=t2, t3=t3), mode="sync", n=n, sync=True)
    assert trace.regions["loop"] == _exact(n * (t1 + t2 + t3) + n * t3 + t3)


_STEPS = {"add_scalar": lambda a: a + 1, "mul_scalar": lambda a: a * 2,
          "sub_scalar": lambda a: a - 1, "div_scalar": lambda a: a / 2,
          "relu": lambda a: a.relu(), "copy": lambda a: a.copy()}
_names = list(_STEPS)


def _block(x, k):
    """A blocker on x, cycling through the kinds that wait for one var."""
    if k % 3 == 2:
        repr(x)
    else:
        (x.wait_to_read if k % 3 == 0 else x.asnumpy)()


def _pipeline_workload(nd, names, blockers):
    """A chain x = step(x); blockers[i] puts a blocker on x after op i (op 0 is `ones`)."""
    x = nd.ones((3,))
    for k, name in enumerate(names):
        if blockers[k]:
            _block(x, k)
        x = _STEPS[name](x)
    if blockers[len(names)]:
        _block(x, len(names))
    nd.waitall()


@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=st.integers(0, 40), workers=st.integers(1, 3), t3=_t)
def test_random_linear_pipelines_match_the_max_plus_solver(data, n, workers, t3):
    """A chain of ops with random per-op issue and run costs and random blockers gives the same
    issue ends, lane ends and total time as analytic.pipeline."""
    names = data.draw(st.lists(st.sampled_from(_names), min_size=n, max_size=n))
    blockers = data.draw(st.lists(st.booleans(), min_size=n + 1, max_size=n + 1))
    costs = {}
    for name in ["ones", *_names]:
        costs[f"cpu:{name}"] = Cost(latency=data.draw(_t))
        costs[f"frontend:{name}"] = Cost(latency=data.draw(_t))
    profile = Profile(name="pipeline", t1=1.0, t3=t3, workers=workers, costs=costs)
    program = record(_pipeline_workload, names=names, blockers=blockers)
    ops = program.ops
    t1 = [costs[f"frontend:{op.name}"].latency for op in ops]
    t2 = [costs[f"cpu:{op.name}"].latency for op in ops]
    expected = analytic.pipeline(t1, t2, t3, sync=blockers)
    trace = simulate(program, profile)
    issue = [s.end for s in trace.spans_of(lane="frontend", kind="issue")]
    runs = sorted(trace.spans_of(kind="exec"), key=lambda s: s.op_id)
    np.testing.assert_allclose(issue, expected.issue_end, rtol=1e-9)
    np.testing.assert_allclose([s.end for s in runs], expected.lane_end, rtol=1e-9)
    assert trace.duration == _exact(expected.total)


def test_gpu_stream_runs_in_issue_order_and_copies_use_the_copy_engine():
    """On a GPU the compute stream keeps issue order (an op ready early still waits its turn),
    host<->device copies run on the copy lane priced by the link, and the CPU pool does not."""

    def gpu_work(nd):
        host = nd.ones((1000,))
        a = nd.ones((1000,), ctx=nd.gpu(0))
        b = host.copyto(nd.gpu(0))
        c = b + 1
        d = a + 1
        back = d.copyto(nd.cpu())
        nd.waitall()
        return c, back

    profile = Profile.ideal(t1=1e-6, t2=1e-3).replace(**{"cpu->gpu.latency": 0.0,
                                                          "cpu->gpu.bandwidth": 4000 / 0.5})
    trace = predict(gpu_work, profile)
    runs = {s.name + str(i): s for i, s in enumerate(sorted(
        (s for s in trace.spans if s.kind in ("exec", "copy")), key=lambda s: s.op_id))}
    up, c, d, down = runs["copyto2"], runs["add_scalar3"], runs["add_scalar4"], runs["copyto5"]
    assert (up.lane, up.kind, up.duration) == ("gpu0/copy", "copy", pytest.approx(0.5))
    assert c.lane == d.lane == "gpu0/compute"
    assert c.start == up.end and d.start == c.end  # d was ready long before, but waits its turn
    assert down.lane == "gpu0/copy" and down.start == d.end


def test_max_inflight_holds_the_frontend_back():
    """With max_inflight=k the frontend starts issuing op j only after op j-k has finished."""
    k = 3
    trace = predict(loop, Profile.ideal(t1=1e-6, t2=1e-3), max_inflight=k, n=10)
    issues = trace.spans_of(lane="frontend", kind="issue")
    runs = sorted(trace.spans_of(kind="exec"), key=lambda s: s.op_id)
    for j in range(k, len(issues)):
        assert issues[j].start >= runs[j - k].end
    assert trace.regions["loop"] > analytic.async_time(10, 1e-6, 1e-3, 20e-6)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 15), st.integers(1, 3))
def test_a_bounded_engine_table_holds_the_frontend_back(table, n, workers):
    """With `profile.table` = k (realexec's op table), the push of op j ends only after every op
    up to j - k has finished (the wait is part of its issue span); a table larger than the
    program changes nothing, and 0 means no bound."""
    base = Profile.ideal(t1=1e-6, t2=1e-3, workers=workers)
    trace = predict(loop, base.replace(table=table), n=n)
    issues = sorted(trace.spans_of(lane="frontend", kind="issue"), key=lambda s: s.op_id)
    runs = sorted(trace.spans_of(kind="exec"), key=lambda s: s.op_id)
    for j in range(table, len(issues)):
        done = max(r.end for r in runs[:j - table + 1])
        assert issues[j].end >= done + 1e-6 - 1e-12
    unbounded = predict(loop, base, n=n)
    assert predict(loop, base.replace(table=n + 1), n=n).regions == unbounded.regions
    if table < n:  # n ops of 1 ms issued in 1 us each: the frontend ran ahead, now it waits
        assert trace.spans_of(lane="frontend", kind="issue")[-1].end > \
            unbounded.spans_of(lane="frontend", kind="issue")[-1].end


def _every_kind(nd):
    with nd.benchmark("all"):
        x = nd.ones((1,))
        y = x + 1
        y.wait_to_read()
        y.asnumpy()
        y.item()
        print(y)
        del x
        nd.waitall()


def test_every_instruction_kind_shows_in_the_trace_and_survives_a_file(tmp_path):
    """Ops give issue and exec spans, each blocker kind a wait span lasting at least t3, Free a
    release, Mark a region; the trace saves and loads back unchanged, with its meta."""
    profile = Profile.ideal(t1=1e-5, t2=1e-3, t3=2e-5)
    program = record(_every_kind)
    assert set(program.counts()) >= {"ones", "add_scalar", "wait_to_read", "asnumpy", "item",
                                      "print", "waitall", "free", "mark"}
    trace = simulate(program, profile)
    waits = trace.spans_of(lane="frontend", kind="wait")
    assert [s.name for s in waits] == ["wait_to_read", "asnumpy", "item", "print", "waitall"]
    assert all(s.duration >= 2e-5 - 1e-15 for s in waits)
    assert [s.duration for s in waits[1:]] == pytest.approx([2e-5] * 4)  # nothing left pending
    assert len(trace.spans_of(kind="issue")) == len(trace.spans_of(kind="exec")) == 2
    assert trace.memory[-1][2] < max(b for _, _, b in trace.memory)  # x went back
    assert list(trace.regions) == ["all"]
    assert trace.meta["source"] == "predicted" and trace.meta["workload"] == "_every_kind"
    assert (trace.meta["profile"], trace.meta["mode"]) == ("ideal", "async")
    trace.save(tmp_path / "t.json")
    again = Trace.load(tmp_path / "t.json")
    assert again.spans == trace.spans and again.marks == [tuple(m) for m in trace.marks]
    assert again.memory == [tuple(m) for m in trace.memory] and again.meta == trace.meta


def test_a_blocker_with_nothing_pending_costs_t3():
    """wait_to_read on a var already computed waits for nothing and costs exactly t3."""

    def late(nd):
        x = nd.ones((1,))
        nd.waitall()
        with nd.benchmark("again"):
            x.wait_to_read()

    trace = predict(late, Profile.ideal(t1=1e-5, t2=1e-3, t3=3e-5))
    assert trace.regions["again"] == _exact(3e-5)


def test_unknown_device_is_one_clear_line():
    """A program on gpu1 with a one-GPU profile fails naming the device and what the profile has."""

    def two_gpus(nd):
        nd.ones((2,), ctx=nd.gpu(1))

    with pytest.raises(ValueError) as info:
        predict(two_gpus, Profile.ideal(gpus=1))
    message = str(info.value)
    assert "gpu1" in message and "1 GPU" in message and "\n" not in message


def test_a_workload_that_is_not_a_function_is_one_clear_line():
    """predict(42, ...) says what a workload must be, on one line."""
    with pytest.raises(TypeError) as info:
        predict(42, Profile.ideal())
    assert "workload" in str(info.value) and "\n" not in str(info.value)


def test_bad_mode_and_max_inflight_are_rejected():
    """mode must be async or sync, max_inflight a positive int."""
    program = record(loop)
    with pytest.raises(ValueError, match="mode"):
        simulate(program, Profile.ideal(), mode="naive")
    with pytest.raises(ValueError, match="max_inflight"):
        simulate(program, Profile.ideal(), max_inflight=0)


def test_a_preset_name_works_as_profile():
    """simulate and predict accept a preset name in place of a Profile."""
    trace = predict(loop, "ideal", n=3)
    assert trace.meta["profile"] == "ideal"
    assert trace.regions["loop"] == _exact(analytic.async_time(3, 10e-6, 1e-3, 20e-6))
