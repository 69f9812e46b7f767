"""Data another worker wrote: the model's last writer of each buffer (`asyncsim.model.caches`),
its price on an op's bytes time (`asyncsim.model.host`) and its calibration
(`realexec.calibration.places`)."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncsim
from asyncsim import Profile
from asyncsim.model.caches import LastLevelCache
from asyncsim.model.cost import Cost
from asyncsim.nd.program import Var
from realexec.calibration import places

N = 1000  # float32 elements
NB = 4 * N
DRAM = 1e9


def _vars(count: int) -> dict:
    return {v: Var(v, (N,), "float32", "cpu", NB) for v in range(count)}


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["cpu/w0", "cpu/w1", "cpu/w2"]), min_size=1, max_size=30))
def test_a_chain_pays_for_its_input_at_every_change_of_worker(lanes):
    """Op i reads var i and writes var i + 1, on lanes[i]: its input is foreign exactly where
    the op before it ran on another lane (the first op's input no op wrote)."""
    cache = LastLevelCache(1e12, DRAM, _vars(len(lanes) + 1))
    moved = [cache.foreign((i,), i + 1, lane) for i, lane in enumerate(lanes)]
    assert moved == [0] + [NB if a != b else 0 for a, b in zip(lanes, lanes[1:], strict=False)]


def test_a_buffer_from_the_pool_keeps_its_last_writer():
    cache = LastLevelCache(1e12, DRAM, _vars(2))
    cache.take(0)
    cache.foreign((), 0, "cpu/w0")  # an op on w0 writes var 0
    cache.give_back(0)
    cache.take(1)  # var 1 takes var 0's buffer, written on w0
    assert cache.owner[1] == "cpu/w0"
    assert cache.foreign((1,), 1, "cpu/w1") == NB
    assert cache.foreign((1,), 1, "cpu/w1") == 0  # w1 wrote it now


def test_a_buffer_read_on_another_worker_is_shared_until_written_again():
    cache = LastLevelCache(1e12, DRAM, _vars(3))
    cache.foreign((), 0, "cpu/w0")  # w0 writes var 0
    assert cache.foreign((0,), 1, "cpu/w1") == NB  # w1 fetches it from w0's caches
    assert cache.foreign((0,), 2, "cpu/w1") == 0
    assert cache.foreign((0,), 2, "cpu/w0") == 0  # w0 kept a clean copy
    cache.foreign((), 0, "cpu/w0")  # written again on w0
    assert cache.foreign((0,), 1, "cpu/w1") == NB


def _profile(foreign: float) -> Profile:
    return Profile(name="places", t1=1e-9, t3=0.0, workers=2, cores=4,
                   costs={"cpu:*": Cost(bandwidth=1e9)}, llc=1e12, dram=DRAM, foreign=foreign)


def _two_inputs(nd):
    x = nd.ones((N,))
    y = nd.ones((N,))
    z = x + y
    z.wait_to_read()


def test_an_op_reading_another_workers_output_pays_foreign_per_byte():
    """x and y are made on the two workers at once; z = x + y runs on one of them and finds
    the other's output written elsewhere: its span grows by one input's bytes at `foreign`."""
    program = asyncsim.record(_two_inputs)
    price = 2e-9  # seconds per byte
    base, priced = (asyncsim.simulate(program, _profile(p)) for p in (0.0, price))
    ones = [s.lane for s in priced.spans if s.kind == "exec" and s.name == "ones"]
    assert len(set(ones)) == 2  # the premise: the inputs were written on two workers
    before, after = (next(s for s in t.spans if s.kind == "exec" and s.name == "add")
                     for t in (base, priced))
    assert after.duration - before.duration == pytest.approx(NB * price, rel=1e-6)
    assert _profile(price).contended and not _profile(0.0).contended


def test_calibration_prices_are_non_negative_and_named():
    found = places.other_core(1 << 12, (8, 16, 8), rounds=3)
    if len(os.sched_getaffinity(0)) < 2:
        assert found == {"foreign": 0.0, "foreign_gemm": 0.0, "cores": 1}
        return
    assert found["foreign"] >= 0.0 and found["foreign_gemm"] >= 0.0
    assert set(found["streaming"]) == set(found["product"]) == {"same", "other"}
    assert all(s > 0 for s in (*found["streaming"].values(), *found["product"].values()))


def test_one_core_prices_nothing(monkeypatch):
    monkeypatch.setattr(places.os, "sched_getaffinity", lambda pid: {0})
    assert places.other_core(1 << 12, (8, 16, 8), rounds=3) == {
        "foreign": 0.0, "foreign_gemm": 0.0, "cores": 1}
