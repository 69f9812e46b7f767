"""A Gluon block call's price (`frontend:block`): the calibrated layer calls less what the model
charges for the ops they issue, per block call (`realexec.calibration.calibrate._block_price`).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import asyncsim
from asyncsim.model.profile import Cost
from asyncsim.nd.ops import BROADCASTING, broadcasts
from asyncsim.nd.program import Call, Op
from realexec.calibration.calibrate import _block_price
from realexec.calibration.issuing import LAYER_OPS, _layer_calls

_MARK = "layer call"  # a Call noted just before the layer call a test looks at


def _calls_issue(call: str):
    """(the frontend cost keys of the ops `call` of `_layer_calls` issues, its block calls),
    as the model's recording of it sees them."""

    def workload(nd):
        layers = _layer_calls(nd)
        nd.waitall()
        nd.note(_MARK)
        layers[call]()

    program = asyncsim.record(workload)
    start = max(i for i, ins in enumerate(program.instrs)
                if isinstance(ins, Call) and ins.kind == _MARK)
    keys, blocks = [], 0
    for ins in program.instrs[start + 1:]:
        if isinstance(ins, Call) and ins.kind == "block":
            blocks += 1
        elif isinstance(ins, Op):
            wide = ins.name in BROADCASTING and broadcasts(ins, program.vars)
            keys.append("broadcast" if wide else ins.name)
    return tuple(keys), blocks


def test_each_layer_call_issues_the_ops_and_blocks_its_price_subtracts():
    for call, (keys, blocks) in LAYER_OPS.items():
        assert _calls_issue(call) == (keys, blocks), call


_price = st.floats(1e-6, 50e-6)


@settings(max_examples=60, deadline=None)
@given(prices=st.fixed_dictionaries({"dot": _price, "broadcast": _price, "relu": _price}),
       block=st.floats(0.0, 30e-6), mix=st.floats(0.0, 0.6))
def test_a_block_is_priced_at_what_its_calls_cost_beyond_their_mixed_ops(prices, block, mix):
    costs = {f"frontend:{key}": Cost(latency=secs) for key, secs in prices.items()}
    # layer calls that cost exactly their ops at the model's mixed price and `block` per block
    phases = {}
    for call, (keys, blocks) in LAYER_OPS.items():
        mixed = 1.0 + mix * (1.0 - 1.0 / len(set(keys)))
        phases[call] = sum(prices[key] for key in keys) * mixed + blocks * block
    assert abs(_block_price(phases, costs, mix) - block) < 1e-12


def test_a_layer_call_cheaper_than_its_ops_prices_no_block_below_zero():
    costs = {f"frontend:{key}": Cost(latency=10e-6) for key in ("dot", "broadcast", "relu")}
    phases = {call: 1e-6 for call in LAYER_OPS}
    assert _block_price(phases, costs, 0.3) == 0.0
