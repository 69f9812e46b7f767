"""The GIL's hand-over to a sleeping thread: the model's rule (`asyncsim.model.gil.Gil`: a released
GIL goes to the sleeping waiter a scattered hand-over later, if still free) and the
microbenchmarks that measure a hand-over and how much two threads overlap
(`realexec.calibration.gil`)."""

from __future__ import annotations

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncsim import Profile, predict
from asyncsim.model.gil import Gil
from asyncsim.model.profile import Cost
from realexec.calibration.gil import handover, overlap


def burst(nd, n=5):
    x = nd.ones((1024,))
    x.wait_to_read()
    with nd.benchmark("burst"):
        ys = [x + 1 for _ in range(n)]
        nd.waitall()
    return ys


def _released_to_a_sleeper():
    """A GIL with a 100 us hand-over: "a" held it, "b" fell asleep on it, "a" let it go (a
    wake-up: True). (env, gil, b's turn)."""
    env = simpy.Environment()
    gil = Gil(env, wake=1e-4, switch=1.0)
    assert gil.take("a") is None
    turn = gil.take("b")
    assert gil.release("a") is True
    return env, gil, turn


def test_a_sleeping_waiter_takes_a_free_gil_a_scattered_handover_after_the_release():
    """The woken waiter holds the GIL no sooner than half a hand-over and no later than one and a
    half after the release."""
    env, gil, turn = _released_to_a_sleeper()
    env.run(until=0.49e-4)
    assert gil.holder is None and not turn.triggered
    env.run(until=1.51e-4)
    assert gil.holder == "b" and turn.triggered


def test_a_waiter_that_finds_the_gil_taken_again_sleeps_until_the_next_release():
    """The holder takes the GIL back before the woken waiter arrives and keeps it: the waiter
    finds it taken and sleeps again, and the next release is a new wake-up (True)."""
    env, gil, turn = _released_to_a_sleeper()
    env.run(until=0.4e-4)
    assert gil.take("a") is None
    env.run(until=2e-4)  # b arrived meanwhile and found it held
    assert gil.holder == "a" and not turn.triggered
    assert gil.release("a") is True
    env.run(until=2e-4 + 1.51e-4)
    assert gil.holder == "b"


@settings(max_examples=25, deadline=None)
@given(handover_us=st.floats(1.0, 200.0), dispatch_us=st.floats(1.0, 50.0))
def test_a_worker_gets_the_gil_a_handover_after_the_frontend_blocks(handover_us, dispatch_us):
    """A worker handed ops while the frontend issues waits for the GIL; when the frontend blocks
    in waitall (asleep at once), the worker runs a hand-over later, scattered by half either
    way: `handover` where the profile has one, else `dispatch` (an idle worker's wake-up)."""
    for handover_s, expected in ((handover_us * 1e-6, handover_us * 1e-6),
                                 (0.0, dispatch_us * 1e-6)):
        profile = Profile(name="gil", t1=1e-4, t3=0.0, workers=1, cores=8, gil=1e-6, spin=0.0,
                          dispatch=dispatch_us * 1e-6, handover=handover_s, switch=1.0,
                          costs={"cpu:*": Cost(latency=1e-6)})
        trace = predict(burst, profile, n=3)
        (wait,) = [s for s in trace.spans_of("frontend", "wait") if s.name == "waitall"]
        first = min(s.start for s in trace.spans_of(kind="exec") if s.name == "add_scalar")
        assert 0.5 * expected - 1e-12 <= first - wait.start <= 1.5 * expected + 1e-12


def test_calibration_measures_a_handover_as_a_wake_up():
    """`handover`: a sleeping thread runs after the GIL is let go, more than nothing and within
    a switch interval (here, 5 ms); p10 <= median <= p90."""
    result = handover(trials=12)
    assert 0.0 < result["handover"] < 5e-3
    assert result["p10"] <= result["handover"] <= result["p90"]


def test_overlap_reports_a_speedup_per_kernel_duration():
    """`overlap`: one speedup of two threads over one per duration asked for, between "worse
    than one thread" (a hand-over each call) and "twice as fast" (two cores). How much two bare
    threads overlap depends on where the OS puts them (1.2-1.8 for 1 ms kernels, run to run,
    on a 2-vCPU VM), so its size is printed by benchmarks/gil_overlap.py, not
    asserted. The median of three rounds: one round of ten calls fell outside the bounds once
    in a minute of frequent slow spells."""
    speedups = overlap((2e-5, 1e-3), calls=10, rounds=3)
    assert set(speedups) == {2e-5, 1e-3}
    assert all(0.2 < s < 2.3 for s in speedups.values())
