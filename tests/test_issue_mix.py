"""Issuing ops of several kinds in turn (`Profile.mix`): the model's price per op against the
kinds in its window, recomputed here, and the calibration's fit of the law."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncsim import Profile, record, simulate
from asyncsim.model.prices import MIX_WINDOW
from asyncsim.model.profile import Cost
from realexec.calibration.issuing import fit_mix

KINDS = {"relu": lambda nd, x: nd.relu(x), "sigmoid": lambda nd, x: nd.sigmoid(x),
         "add": lambda nd, x: x + x, "mul": lambda nd, x: x * x}


def _profile(t1: float, mix: float, **costs) -> Profile:
    return Profile(name="mixing", t1=t1, t3=1e-6, costs={"cpu:*": Cost(latency=1e-9), **costs},
                   mix=mix)


def _issues(program, profile) -> list[float]:
    trace = simulate(program, profile)
    return [s.end - s.start for s in trace.spans if s.lane == "frontend" and s.kind == "issue"]


@settings(max_examples=40, deadline=None)
@given(names=st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=40),
       mix=st.floats(0.0, 1.0), t1=st.floats(1e-6, 1e-4))
def test_each_issue_costs_t1_times_the_kinds_in_its_window(names, mix, t1):
    """Op i costs t1 (1 + mix (1 - 1/k)), k the distinct kinds among ops i - 15 .. i."""
    def workload(nd):
        x = nd.ones((4,))
        keep = [KINDS[name](nd, x) for name in names]
        nd.waitall()
        return keep

    program = record(workload)
    issues = _issues(program, _profile(t1, mix))
    issued = ["ones", *names]
    assert len(issues) == len(issued)
    for i, seconds in enumerate(issues):
        kinds = len(set(issued[max(0, i - MIX_WINDOW + 1):i + 1]))
        assert seconds == pytest.approx(t1 * (1 + mix * (1 - 1 / kinds)), rel=1e-9)


def test_a_loop_of_one_kind_pays_its_calibrated_price():
    """The first op differs (ones); once the window holds x + 1 alone, each costs t1 again."""
    def workload(nd):
        x = nd.ones((4,))
        keep = [x + x for _ in range(40)]
        nd.waitall()
        return keep

    issues = _issues(record(workload), _profile(1e-5, 0.5))
    assert issues[1] == pytest.approx(1e-5 * 1.25)
    assert issues[MIX_WINDOW:] == pytest.approx([1e-5] * (len(issues) - MIX_WINDOW))


def test_ops_priced_by_their_phase_are_not_multiplied():
    """backward's ops cost "frontend:backward" whatever kinds came before (timed on a mixed
    sequence already); the forward's ops are multiplied."""
    from asyncsim.nd import autograd

    def workload(nd):
        x = nd.ones((4,))
        x.attach_grad()
        with autograd.record():
            y = (nd.relu(x) * x).sum()
        y.backward()
        nd.waitall()

    program = record(workload)
    phases = {ins.id: ins.attrs.get("phase") for ins in program.instrs if hasattr(ins, "attrs")}
    profile = _profile(1e-5, 0.5, **{"frontend:backward": Cost(latency=3e-6)})
    trace = simulate(program, profile)
    spans = [s for s in trace.spans if s.lane == "frontend" and s.kind == "issue"]
    backward = [s.end - s.start for s in spans if phases.get(s.op_id) == "backward"]
    forward = [s.end - s.start for s in spans if phases.get(s.op_id) is None]
    assert backward and backward == pytest.approx([3e-6] * len(backward))
    assert max(forward) > 1e-5 * 1.2


@given(mix=st.floats(0.0, 2.0))
def test_the_fit_gives_back_the_law_it_fits(mix):
    ratios = {str(k): 1 + mix * (1 - 1 / k) for k in (2, 5, 10)}  # JSON keys are strings
    assert fit_mix(ratios) == pytest.approx(mix, abs=1e-12)


def test_the_fit_is_never_negative_and_one_kind_says_nothing():
    assert fit_mix({2: 0.9, 5: 0.95}) == 0.0
    assert fit_mix({1: 1.3}) == 0.0
