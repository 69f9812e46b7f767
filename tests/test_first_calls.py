"""What runs once costs more: a program's first blocker of a kind is priced cold and a later one
warm ("frontend:<kind>:again"); a block's first call notes one "init" per parameter it makes and
its first call after hybridize() one "trace" per op it traces, which the model prices
("frontend:init", "frontend:trace"), and later calls note neither."""

from __future__ import annotations

import pytest

import asyncsim
from asyncsim import Profile
from asyncsim.gluon import nn
from asyncsim.model.profile import Cost, ProfileError
from asyncsim.nd.program import Call, Mark

T3 = 1e-6
COLD, WARM = 200e-6, 70e-6


def _prints(nd):
    x = nd.ones((2, 3))
    nd.waitall()
    with nd.benchmark("first"):
        repr(x)
    y = x + 1.0
    nd.waitall()
    with nd.benchmark("second"):
        repr(y)
    with nd.benchmark("third"):
        repr(x)


def test_a_later_print_is_priced_warm_the_first_cold():
    profile = Profile.ideal(t3=T3)
    profile.costs["frontend:print"] = Cost(latency=COLD)
    cold_only = asyncsim.predict(_prints, profile).regions
    profile.costs["frontend:print:again"] = Cost(latency=WARM)
    regions = asyncsim.predict(_prints, profile).regions
    assert regions["first"] == pytest.approx(T3 + COLD)
    assert regions["second"] == pytest.approx(T3 + WARM)
    assert regions["third"] == pytest.approx(T3 + WARM)
    # without an "again" price every print pays the cold one
    assert cold_only["second"] == cold_only["third"] == pytest.approx(T3 + COLD)


def test_again_is_per_kind():
    """An asnumpy after a print is still the program's first asnumpy: cold."""
    def mixed(nd):
        x = nd.ones((4,))
        nd.waitall()
        repr(x)
        with nd.benchmark("asnumpy"):
            x.asnumpy()

    profile = Profile.ideal(t3=T3)
    profile.costs["frontend:asnumpy"] = Cost(latency=COLD)
    profile.costs["frontend:asnumpy:again"] = Cost(latency=WARM)
    profile.costs["frontend:print:again"] = Cost(latency=WARM)
    assert asyncsim.predict(mixed, profile).regions["asnumpy"] == pytest.approx(T3 + COLD)


def test_only_blockers_have_an_again_price():
    with pytest.raises(ProfileError, match="frontend:dot:again"):
        Profile.ideal().replace(**{"frontend:dot:again.latency": 1e-6})


def _mlp():
    net = nn.HybridSequential()
    net.add(nn.Dense(5, activation="relu"), nn.Dense(2))
    net.initialize()
    return net


def _calls(program, kind: str) -> int:
    return sum(1 for ins in program.instrs if isinstance(ins, Call) and ins.kind == kind)


def _first_calls(nd, hybridize: bool):
    net = _mlp()
    x = nd.ones((1, 3))
    with nd.benchmark("first"):
        net(x)
    with nd.benchmark("second"):
        net(x)
    if hybridize:
        net.hybridize()
        with nd.benchmark("traced"):
            net(x)
        with nd.benchmark("replayed"):
            net(x)


def test_deferred_initialisation_notes_each_parameter_made_once():
    program = asyncsim.record(_first_calls, hybridize=False)
    assert _calls(program, "init") == 4  # two weights, two biases
    begin = next(i for i, ins in enumerate(program.instrs)
                 if isinstance(ins, Mark) and ins.label == "second")
    assert not any(isinstance(ins, Call) and ins.kind == "init"
                   for ins in program.instrs[begin:])


def test_a_trace_notes_each_op_it_traces_once():
    program = asyncsim.record(_first_calls, hybridize=True)
    graphs = [op.attrs["graph"] for op in program.ops if op.name == "graph"]
    assert len(graphs) == 2 and graphs[0] is graphs[1]
    assert _calls(program, "trace") == len(graphs[0].ops) > 0


def test_the_model_prices_inits_and_traces_per_call():
    """Each noted init and traced op costs its price in the region of the call that made it;
    the second and the replayed call pay none."""
    init, trace = 30e-6, 40e-6
    plain = Profile.ideal()
    priced = plain.replace(**{"frontend:init.latency": init, "frontend:trace.latency": trace})
    before = asyncsim.predict(_first_calls, plain, hybridize=True).regions
    after = asyncsim.predict(_first_calls, priced, hybridize=True).regions
    traced = _calls(asyncsim.record(_first_calls, hybridize=True), "trace")
    assert after["first"] - before["first"] == pytest.approx(4 * init)
    assert after["traced"] - before["traced"] == pytest.approx(traced * trace)
    assert after["second"] == pytest.approx(before["second"])
    assert after["replayed"] == pytest.approx(before["replayed"])
