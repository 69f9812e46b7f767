"""The compiled engine's placement rule (`realexec.engine.placement`): a worker that finds a busy
worker on its core moves to a core free of busy workers and of the pushing frontend; otherwise
it stays, and says where it runs. The calling thread stands in for the worker: it is pinned to
one core first, so the core it starts on is known, and its affinity is restored afterwards."""

from __future__ import annotations

import os
import threading

import pytest

from realexec.engine import placement
from realexec.engine import table as t
from realexec.engine.atomics import FUTEX

pytestmark = pytest.mark.skipif(not FUTEX or not hasattr(os, "sched_setaffinity"),
                                reason="placement acts on Linux only")


def _state(cores):
    buf, s = t.new_state(16, 0)
    assert placement.allow(s, cores)
    return buf, s


@pytest.fixture
def two_cores():
    """(this core, another): the thread is pinned to the first while the test runs."""
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        pytest.skip("needs two cores")
    os.sched_setaffinity(0, {mine[0]})
    try:
        yield mine[0], mine[1]
    finally:
        os.sched_setaffinity(0, set(mine))


def test_allow_refuses_what_it_cannot_mask():
    buf, s = t.new_state(16, 0)
    assert not placement.allow(s, set())
    assert not placement.allow(s, {3, 64})
    assert s[t.H_PLACES] == 0  # moves stay off
    assert placement.cores_of(s, 2) == [-1, -1]


def test_a_worker_says_where_it_runs_and_clears_it_when_idle(two_cores):
    here, _ = two_cores
    buf, s = _state({here})
    placement.busy(s, 1)
    assert placement.cores_of(s, 2) == [-1, here]
    placement.idle(s, 1)
    assert placement.cores_of(s, 2) == [-1, -1]


def test_a_worker_beside_a_busy_one_moves_to_the_free_core(two_cores):
    here, other = two_cores
    buf, s = _state({here, other})
    s[t.H_BLOCKING] = 1  # the frontend waits in a blocker: its core is free too
    placement.busy(s, 1)  # worker 1 busy here
    placement.busy(s, 0)  # worker 0 wakes here as well
    assert placement.cores_of(s, 2) == [other, here]  # it asked for the free core
    assert os.sched_getaffinity(0) == {here, other}  # and gave itself every allowed core back
    # (where the OS runs it afterwards is the OS's choice again: not asserted)


def test_the_pushing_frontends_core_is_not_taken(two_cores):
    here, other = two_cores
    buf, s = _state({here, other})
    s[t.H_FRONT_CPU] = other  # the frontend pushes there, not from inside a blocker
    placement.busy(s, 1)
    placement.busy(s, 0)
    assert placement.cores_of(s, 2) == [here, here]  # nowhere better: it stays
    assert os.sched_getaffinity(0) == {here}  # untouched


def test_nothing_moves_when_placement_is_off(two_cores):
    here, other = two_cores
    buf, s = t.new_state(16, 0)  # no `allow`: as with pinned workers
    s[t.H_BLOCKING] = 1
    placement.busy(s, 1)
    placement.busy(s, 0)
    assert placement.cores_of(s, 2) == [-1, -1]
    assert os.sched_getaffinity(0) == {here}


def test_a_waker_steers_an_idle_worker_off_a_busy_core(two_cores):
    """Before waking a worker, the waker lets it run only where no busy worker runs (the OS
    would queue it behind the busy worker on the core it last ran on); the worker gives itself
    every allowed core back at its next op."""
    here, other = two_cores
    buf, s = _state({here, other})
    s[t.H_BLOCKING] = 1
    placement.busy(s, 1)  # worker 1 busy here
    placement.register(s, 0, threading.get_native_id())  # worker 0 (this thread) is idle
    t._wake_worker(s, 0)
    assert os.sched_getaffinity(0) == {other}
    placement.busy(s, 0)
    assert os.sched_getaffinity(0) == {here, other}
    assert placement.cores_of(s, 2) == [other, here]


def test_a_waker_leaves_busy_unregistered_and_lone_workers_alone(two_cores):
    here, other = two_cores
    buf, s = _state({here, other})
    s[t.H_BLOCKING] = 1
    t._wake_worker(s, 0)  # nobody registered, nobody busy
    placement.register(s, 0, threading.get_native_id())
    t._wake_worker(s, 0)  # no busy worker: the OS's placement is left alone
    assert os.sched_getaffinity(0) == {here}
    placement.busy(s, 0)  # worker 0 (this thread) busy here
    placement.busy(s, 1)  # and worker 1 beside it: moved to the free core
    os.sched_setaffinity(0, {here})
    placement.idle(s, 1)
    t._wake_worker(s, 0)  # worker 0 is busy: not steered
    assert os.sched_getaffinity(0) == {here}


def test_a_waker_steers_an_idle_worker_off_the_pushing_frontends_core(two_cores):
    """No worker busy, the frontend pushing from this core, where the idle worker 0 (this
    thread) went idle: woken there, it would wait behind the frontend while the other core
    idles, so the waker lets it run only on the other core."""
    here, other = two_cores
    buf, s = _state({here, other})
    s[t.H_FRONT_CPU] = here
    placement.busy(s, 0)
    placement.idle(s, 0)  # kept on this core
    placement.register(s, 0, threading.get_native_id())
    t._wake_worker(s, 0)
    assert os.sched_getaffinity(0) == {other}
    s[t.H_FRONT_CPU] = other  # pushing from the other core now: off that one in turn
    t._wake_worker(s, 0)
    assert os.sched_getaffinity(0) == {here}
    s[t.H_BLOCKING] = 1  # the frontend waits in a blocker: its core is free, nothing moves
    t._wake_worker(s, 0)
    assert os.sched_getaffinity(0) == {here}
