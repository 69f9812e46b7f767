"""A Gluon block call's price: "frontend:block:CLASS" for the classes calibration times, else
"frontend:block" (`Rules.call_cost`); calibration derives both from its layer calls less what
the model charges for the ops they issue (`realexec.calibration.calibrate._block_prices`).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncsim
from asyncsim.gluon import nn
from asyncsim.model.profile import Cost, Profile, ProfileError
from asyncsim.nd.ops import BROADCASTING, broadcasts
from asyncsim.nd.program import Call, Op
from realexec.calibration.calibrate import _block_prices
from realexec.calibration.issuing import LAYER_OPS, _layer_calls

_MARK = "layer call"  # a Call noted just before the layer call a test looks at


def _calls_issue(call: str):
    """(the frontend cost keys of the ops `call` of `_layer_calls` issues, the classes of the
    blocks it calls), as the model's recording of it sees them."""

    def workload(nd):
        layers = _layer_calls(nd)
        nd.waitall()
        nd.note(_MARK)
        layers[call]()

    program = asyncsim.record(workload)
    start = max(i for i, ins in enumerate(program.instrs)
                if isinstance(ins, Call) and ins.kind == _MARK)
    keys, blocks = [], []
    for ins in program.instrs[start + 1:]:
        if isinstance(ins, Call) and ins.kind == "block":
            blocks.append(ins.block)
        elif isinstance(ins, Op):
            wide = ins.name in BROADCASTING and broadcasts(ins, program.vars)
            keys.append("broadcast" if wide else ins.name)
    return tuple(keys), tuple(blocks)


def test_each_layer_call_issues_the_ops_and_blocks_its_price_subtracts():
    for call, (keys, blocks) in LAYER_OPS.items():
        assert _calls_issue(call) == (keys, blocks), call


_price = st.floats(1e-6, 50e-6)
_CLASSES = sorted({block for _, blocks in LAYER_OPS.values() for block in blocks})


@settings(max_examples=60, deadline=None)
@given(prices=st.fixed_dictionaries({"dot": _price, "broadcast": _price, "relu": _price}),
       blocks=st.fixed_dictionaries({block: st.floats(0.0, 30e-6) for block in _CLASSES}),
       mix=st.floats(0.0, 0.6))
def test_each_class_is_priced_at_what_its_calls_cost_beyond_their_mixed_ops(prices, blocks, mix):
    costs = {f"frontend:{key}": Cost(latency=secs) for key, secs in prices.items()}
    # layer calls that cost exactly their ops at the model's mixed price and their blocks'
    phases, total, calls = {}, 0.0, 0
    for call, (keys, called) in LAYER_OPS.items():
        mixed = 1.0 + mix * (1.0 - 1.0 / len(set(keys)))
        phases[call] = sum(prices[key] for key in keys) * mixed + sum(blocks[b] for b in called)
        total, calls = total + sum(blocks[b] for b in called), calls + len(called)
    got = _block_prices(phases, costs, mix)
    for block, secs in blocks.items():
        assert got[f"frontend:block:{block}"].latency == pytest.approx(secs, abs=1e-12)
    # any other class: the mean over the block calls timed
    assert got["frontend:block"].latency == pytest.approx(total / calls, abs=1e-12)


def test_a_layer_call_cheaper_than_its_ops_prices_no_block_below_zero():
    costs = {f"frontend:{key}": Cost(latency=10e-6) for key in ("dot", "broadcast", "relu")}
    phases = {call: 1e-6 for call in LAYER_OPS}
    assert all(cost.latency == 0.0 for cost in _block_prices(phases, costs, 0.3).values())


def _two_layers(nd):
    x = nd.ones((1, 4))
    net = nn.Sequential()
    net.add(nn.Dense(3), nn.Dense(2))
    net.initialize()
    net(x).wait_to_read()


def test_a_block_call_costs_its_class_price_and_any_other_class_the_fallback():
    program = asyncsim.record(_two_layers)
    blocks = [ins.block for ins in program.instrs if isinstance(ins, Call) and ins.kind == "block"]
    assert blocks == ["Sequential", "Dense", "Dense"]
    base = Profile(name="p", t1=1e-6, t3=0, costs={"cpu:*": Cost(latency=1e-6)})
    plain = asyncsim.simulate(program, base).duration
    fallback = asyncsim.simulate(program, base.replace(**{"frontend:block.latency": 1e-3}))
    dense = base.replace(**{"frontend:block.latency": 1e-3,
                            "frontend:block:Dense.latency": 5e-3})
    assert fallback.duration - plain == pytest.approx(3e-3, rel=1e-6)
    # the two Dense calls at their class's price, the Sequential at the fallback
    assert asyncsim.simulate(program, dense).duration - plain == pytest.approx(11e-3, rel=1e-6)


@pytest.mark.parametrize("key", ["frontend:block:Dense", "frontend:block:HybridSequential"])
def test_a_block_class_is_a_frontend_cost_key(key):
    assert Profile(name="p", t1=0, t3=0, costs={key: Cost(latency=1e-6)}).costs[key].latency


@pytest.mark.parametrize("key", ["frontend:block:", "frontend:block:2x", "cpu:block:Dense"])
def test_a_block_key_without_a_class_or_off_the_frontend_is_refused(key):
    with pytest.raises(ProfileError, match="unknown cost key"):
        Profile(name="p", t1=0, t3=0, costs={key: Cost(latency=1e-6)})
