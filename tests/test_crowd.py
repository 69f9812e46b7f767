"""Kernels crowding each other (`asyncsim.model.crowd`): the stretch follows the kernels running
at each moment, alike for kernels started together, re-timed when one starts or ends, and at a
share of a core when the cores are shared."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncsim import Profile, predict
from asyncsim.model.cores import Cores
from asyncsim.model.crowd import Crowd
from asyncsim.model.profile import Cost


def _exact(value):
    return pytest.approx(value, rel=1e-9, abs=1e-15)


def _run(kernels, dram_crowd=0.0, cores=None):
    """Simulate kernels (start s, bytes s, crowd, from_dram s) in a bare environment: each one's
    duration."""
    env = simpy.Environment()
    shared = Cores(env, cores) if cores else None
    if shared is not None:
        shared.leave(front=True)  # no frontend here
    crowd = Crowd(env, dram_crowd, shared)
    out = [None] * len(kernels)

    def kernel(k, start, by_bytes, c, from_dram):
        yield env.timeout(start)
        if shared is not None:
            shared.join()
        began = env.now
        yield from crowd.run(0.0, by_bytes, 0.0, c, from_dram)
        if shared is not None:
            shared.leave()
        out[k] = env.now - began

    for k, spec in enumerate(kernels):
        env.process(kernel(k, *spec))
    env.run()
    assert crowd.count == crowd.streaming == 0 and not crowd.running
    return out


def _two(a: float, b: float, delay: float, c: float) -> tuple[float, float]:
    """Durations of a kernel of `a` seconds alone started at 0 and one of `b` started at
    `delay`, each stretched by (1 + c) while both run."""
    if delay >= a:
        return a, b
    done_a = delay  # a's seconds of work done alone
    left_a, left_b = a - done_a, b
    together = min(left_a, left_b) * (1 + c)  # both at 1 / (1 + c) until the first is done
    if left_a <= left_b:
        return delay + together, together + (left_b - left_a)
    return delay + together + (left_a - left_b), together


@settings(max_examples=200, deadline=None)
@given(a=st.floats(1e-5, 1e-2), b=st.floats(1e-5, 1e-2), delay=st.floats(0.0, 2e-2),
       c=st.floats(0.0, 1.0))
def test_two_kernels_are_stretched_only_while_both_run(a, b, delay, c):
    first, second = _run([(0.0, a, c, 0.0), (delay, b, c, 0.0)])
    want_first, want_second = _two(a, b, delay, c)
    assert first == pytest.approx(want_first, rel=1e-9)
    assert second == pytest.approx(want_second, rel=1e-9)


def test_kernels_started_together_are_stretched_alike():
    """Three of 1 ms with crowd 0.25: each meets two others for its whole time."""
    assert _run([(0.0, 1e-3, 0.25, 0.0)] * 3) == [_exact(1.5e-3)] * 3


def test_a_kernel_without_crowd_neither_stretches_nor_is_stretched_by_bytes():
    """crowd 0 (compute-bound): a crowded kernel beside it runs as if alone, and so does it."""
    assert _run([(0.0, 1e-3, 0.0, 0.0), (0.0, 1e-3, 0.5, 0.0)]) == [_exact(1e-3)] * 2


def test_cold_bytes_are_stretched_by_the_memory_bus_not_by_crowd():
    """Two kernels of 1 ms, 0.4 ms of it cold bytes, dram_crowd 1, crowd 0.5: 0.6 * 1.5 +
    0.4 * 2; a kernel with cold bytes and no crowd is stretched on its cold part alone."""
    assert _run([(0.0, 1e-3, 0.5, 4e-4)] * 2, dram_crowd=1.0) == [_exact(1.7e-3)] * 2
    assert _run([(0.0, 1e-3, 0.0, 4e-4)] * 2, dram_crowd=1.0) == [_exact(1.4e-3)] * 2


def test_crowded_kernels_run_at_their_share_of_the_cores():
    """Two 1 ms kernels with crowd 0.5 on one core: each at half a core and stretched 1.5x while
    both run (3 ms). Two of 1.5 ms, the second started 1 ms after the first: the first has
    0.5 ms of work left, which at a third of a core's speed (half a core, stretched 1.5x) takes
    1.5 ms; the second has then done 0.5 ms of its work, and does the last 1 ms alone."""
    assert _run([(0.0, 1e-3, 0.5, 0.0)] * 2, cores=1) == [_exact(3e-3)] * 2
    first, second = _run([(0.0, 1.5e-3, 0.5, 0.0), (1e-3, 1.5e-3, 0.5, 0.0)], cores=1)
    assert first == _exact(1e-3 + 1.5e-3)
    assert second == _exact(1.5e-3 + 1e-3)


def test_the_engine_model_stretches_two_ops_issued_together_alike():
    """Two memory-bound ops issued together on two workers: both take (1 + crowd) of their
    bytes time less half the gap between their starts (each alone for part of it)."""
    def pair(nd):
        x = nd.ones((1000,))
        x.wait_to_read()
        with nd.benchmark("pair"):
            a = x + 1
            b = x + 2
            nd.waitall()
        return a, b

    bytes_time = 1e-3
    cost = Cost(bandwidth=8000 / bytes_time, crowd=0.5)  # 1000 floats in, 1000 out
    profile = Profile(name="crowd", t1=1e-9, t3=0.0, workers=2, cores=8,
                      costs={"cpu:*": cost})
    runs = sorted(predict(pair, profile).spans_of(kind="exec"), key=lambda s: s.op_id)[-2:]
    gap = runs[1].start - runs[0].start
    assert 0.0 <= gap < 1e-6
    assert [r.duration for r in runs] == [_exact(1.5 * bytes_time - 0.5 * gap)] * 2
    uncrowded = profile.replace(**{"cpu:*.crowd": 0.0})
    runs = sorted(predict(pair, uncrowded).spans_of(kind="exec"), key=lambda s: s.op_id)[-2:]
    assert [r.duration for r in runs] == [_exact(bytes_time)] * 2
