"""Streaming ops right after a product run slower (`Profile.after_gemm`): the model stretches the
bytes time of a streaming op that starts on a worker soon after a product there, and nothing
else; calibration measures the factor on the engine."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import realexec
from asyncsim import Profile, record, simulate
from asyncsim.model.places import AFTER_GEMM_S
from asyncsim.model.profile import Cost
from realexec.calibration.aftergemm import after_gemm
from realexec.calibration.microbench import _Bench

BANDWIDTH, PEAK = 1e9, 1e9  # bytes/s of every streaming op, flops/s of the product


def _profile(factor: float) -> Profile:
    return Profile(name="after", t1=1e-9, t3=0.0, workers=1,
                   costs={"cpu:*": Cost(bandwidth=BANDWIDTH), "cpu:dot": Cost(peak=PEAK)},
                   after_gemm=factor)


def product_then(nd, n=4, side=64, elements=250_000, product=True):
    """A product (or an op of its kind), then `n` relus chained on an array of `elements`."""
    x = nd.ones((side, side))
    y = nd.ones((elements,))
    nd.waitall()
    h = nd.dot(x, x) if product else x + 1.0
    h.wait_to_read()
    for _ in range(n):
        y = nd.relu(y)
    y.wait_to_read()


def _relus(trace) -> list[float]:
    return [s.end - s.start for s in sorted(trace.spans, key=lambda s: s.start)
            if s.name == "relu" and s.kind == "exec"]


@given(st.floats(1.0, 3.0))
def test_a_streaming_op_right_after_a_product_takes_factor_times_its_bytes_time(factor):
    program = record(product_then)
    plain = simulate(program, _profile(0.0))
    after = simulate(program, _profile(factor))
    relu = 2 * 250_000 * 4 / BANDWIDTH  # reads and writes 1 MB: 2 ms each, all within the window
    assert _relus(plain) == pytest.approx([relu] * 4)
    assert _relus(after) == pytest.approx([relu * factor] * 4)
    dot = next(s for s in after.spans if s.name == "dot" and s.kind == "exec")
    assert dot.end - dot.start == pytest.approx(2 * 64**3 / PEAK)  # the product is not stretched


def test_only_ops_that_start_within_the_window_are_stretched():
    # relus of 10 ms each: the first two start within 20 ms of the product's end, the rest after
    elements = int(BANDWIDTH * 0.01 / 8)
    program = record(product_then, n=4, elements=elements)
    spans = _relus(simulate(program, _profile(1.5)))
    assert AFTER_GEMM_S == pytest.approx(0.02)
    assert spans == pytest.approx([0.015, 0.015, 0.01, 0.01])


def test_without_a_product_before_them_nothing_is_stretched():
    program = record(product_then, product=False)
    assert _relus(simulate(program, _profile(2.0))) == pytest.approx(
        _relus(simulate(program, _profile(0.0))))


def test_calibration_measures_the_factor_on_the_engine():
    with realexec.session(workers=1) as nd:
        found = after_gemm(_Bench(nd, 1), repeats=2, rounds=3)
    assert found["after_gemm"] >= 1.0
    assert found["after"] > 0 and found["alone"] > 0
    assert found["after_gemm"] == pytest.approx(max(1.0, found["after"] / found["alone"]))
    # the round in the middle gives the factor
    assert len(found["rounds"]) == 3
    assert found["after_gemm"] == pytest.approx(max(1.0, sorted(found["rounds"])[1]))
