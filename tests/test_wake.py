"""Waking a sleeping thread: the model's GIL saying when a release wakes a waiter (what
`Profile.wake` charges; the charges themselves are tested in test_host.py), how the calibration
measures a wake-up, and the real engine waking a sleeping blocker only when its condition holds."""

from __future__ import annotations

import threading
import time

import pytest
import simpy

from asyncsim.model.gil import Gil
from asyncsim.model.wakes import WakeQueue
from realexec.calibration.host import wake
from realexec.engine.core import Engine


def test_a_gil_release_says_whether_it_woke_a_sleeping_waiter():
    """Releasing the GIL to a sleeping waiter is a wake-up (True, and `signals` says so before
    the release); to nobody, or to a waiter spinning on the spot, it is not (False)."""
    env = simpy.Environment()
    gil = Gil(env, wake=1e-5, switch=5e-3)
    assert gil.take("a") is None
    assert not gil.signals("a")
    assert gil.release("a") is False  # nobody waits
    assert gil.take("a") is None
    assert gil.take("b") is not None  # b sleeps on it
    assert gil.signals("a") and not gil.signals("b")  # only the holder releases
    assert gil.release("a") is True
    env.run()
    assert gil.holder == "b"
    assert gil.take("a", awake=True) is not None  # a spins on it
    assert not gil.signals("b")
    assert gil.release("b") is False
    assert gil.holder == "a"


def test_a_put_goes_to_a_spinning_worker_before_a_sleeping_one():
    """The model's ready queue, as the compiled engine's: an op queued while one idle worker
    still spins goes to it, with no wake-up, even though another has slept longer; once none
    spins, the longest asleep is woken (and counted)."""
    env = simpy.Environment()
    queue = WakeQueue(env, idle_spin=50e-6)
    asleep, spinning = env.event(), env.event()
    queue.sleepers.append((asleep, 0.0))
    env.run(until=1e-3)
    queue.sleepers.append((spinning, env.now))
    queue.put("op 1")
    assert spinning.triggered and spinning.value is True
    assert not asleep.triggered and queue.wakes == 0
    queue.put("op 2")
    assert asleep.triggered and asleep.value is False and queue.wakes == 1


def test_calibration_measures_a_wake_up_as_a_nonnegative_cost():
    """`microbench_host.wake`: a put that wakes a sleeping getter, one that does not, and
    their difference, each a positive time under a millisecond."""
    result = wake(rounds=20, pause=2e-4)
    assert 0.0 < result["alone"] < 1e-3 and 0.0 < result["woke"] < 1e-3
    assert result["wake"] == pytest.approx(max(0.0, result["woke"] - result["alone"]))


def test_a_sleeping_blocker_is_woken_only_when_its_condition_holds():
    """A blocker asleep on one var is not notified by the ops other vars finish meanwhile
    (each used to wake it to test its condition): one notify, when its own op is done."""
    with Engine(workers=2, spin_s=0.0) as engine:
        held, other = engine.new_var("held"), engine.new_var("other")
        notified = []
        notify_all = engine._cond.notify_all

        def counting():
            notified.append(time.perf_counter())
            notify_all()

        engine._cond.notify_all = counting
        engine.push(time.sleep, (), (held,), name="hold", args=(0.2,))
        for _ in range(30):
            engine.push(time.sleep, (), (other,), name="tick", args=(1e-3,))
        waiter = threading.Thread(target=engine.wait_for_var, args=(held,))
        waiter.start()
        waiter.join(5.0)
        assert not waiter.is_alive()
        assert held.writes_done == 1 and other.writes_done == 30
        assert len(notified) == 1


def test_a_spinning_blocker_is_signalled_only_when_its_condition_holds():
    """A blocker spinning on one var (GIL-free, watching the engine's progress counter) sees the
    counter move once, when its own op is done, not at every op other vars finish meanwhile:
    the worker tests the blocker's condition, so the spinner takes the GIL only to return."""
    with Engine(workers=2, spin_s=60.0) as engine:
        held, other = engine.new_var("held"), engine.new_var("other")
        engine.push(time.sleep, (), (held,), name="hold", args=(0.2,))
        for _ in range(30):
            engine.push(time.sleep, (), (other,), name="tick", args=(1e-3,))
        before = engine._progress.counts[0]
        waiter = threading.Thread(target=engine.wait_for_var, args=(held,))
        waiter.start()
        waiter.join(5.0)
        assert not waiter.is_alive()
        assert held.writes_done == 1 and other.writes_done == 30
        assert engine._progress.counts[0] - before == 1
        assert not engine._blockers  # the blocker unregistered on its way out
