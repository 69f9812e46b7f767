"""The compiled engine's placement rule (`realexec.engine.placement`): a worker that finds a busy
worker on its core moves to a core free of busy workers and of the pushing frontend; otherwise
it stays, and says where it runs. The calling thread stands in for the worker: it is pinned to
one core first, so the core it starts on is known, and its affinity is restored afterwards."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from realexec.engine import layout, placement
from realexec.engine import table as t
from realexec.engine.atomics import FUTEX

pytestmark = pytest.mark.skipif(not FUTEX or not hasattr(os, "sched_setaffinity"),
                                reason="placement acts on Linux only")


def _state(cores):
    buf, s = layout.new_state(16, 0)
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
    buf, s = layout.new_state(16, 0)
    assert not placement.allow(s, set())
    assert not placement.allow(s, {3, 64})
    assert s[layout.H_PLACES] == 0  # moves stay off
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
    s[layout.H_BLOCKING] = 1  # the frontend waits in a blocker: its core is free too
    placement.busy(s, 1)  # worker 1 busy here
    placement.busy(s, 0)  # worker 0 wakes here as well
    assert placement.cores_of(s, 2) == [other, here]  # it asked for the free core
    assert os.sched_getaffinity(0) == {here, other}  # and gave itself every allowed core back
    # (where the OS runs it afterwards is the OS's choice again: not asserted)


def test_the_pushing_frontends_core_is_not_taken(two_cores):
    here, other = two_cores
    buf, s = _state({here, other})
    s[layout.H_FRONT_CPU] = other  # the frontend pushes there, not from inside a blocker
    placement.busy(s, 1)
    placement.busy(s, 0)
    assert placement.cores_of(s, 2) == [here, here]  # nowhere better: it stays
    assert os.sched_getaffinity(0) == {here}  # untouched


def test_nothing_moves_when_placement_is_off(two_cores):
    here, other = two_cores
    buf, s = layout.new_state(16, 0)  # no `allow`: as with pinned workers
    s[layout.H_BLOCKING] = 1
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
    s[layout.H_BLOCKING] = 1
    placement.busy(s, 1)  # worker 1 busy here
    placement.register(s, 0, threading.get_native_id())  # worker 0 (this thread) is idle
    placement.wake_worker(s, 0)
    assert os.sched_getaffinity(0) == {other}
    placement.busy(s, 0)
    assert os.sched_getaffinity(0) == {here, other}
    assert placement.cores_of(s, 2) == [other, here]


def test_a_waker_leaves_busy_unregistered_and_lone_workers_alone(two_cores):
    here, other = two_cores
    buf, s = _state({here, other})
    s[layout.H_BLOCKING] = 1
    placement.wake_worker(s, 0)  # nobody registered, nobody busy
    placement.register(s, 0, threading.get_native_id())
    placement.wake_worker(s, 0)  # no busy worker: the OS's placement is left alone
    assert os.sched_getaffinity(0) == {here}
    placement.busy(s, 0)  # worker 0 (this thread) busy here
    placement.busy(s, 1)  # and worker 1 beside it: moved to the free core
    os.sched_setaffinity(0, {here})
    placement.idle(s, 1)
    placement.wake_worker(s, 0)  # worker 0 is busy: not steered
    assert os.sched_getaffinity(0) == {here}


def test_a_waker_steers_an_idle_worker_off_the_pushing_frontends_core(two_cores):
    """No worker busy, the frontend pushing from this core, where the idle worker 0 (this
    thread) went idle: woken there, it would wait behind the frontend while the other core
    idles, so the waker lets it run only on the other core."""
    here, other = two_cores
    buf, s = _state({here, other})
    s[layout.H_FRONT_CPU] = here
    placement.busy(s, 0)
    placement.idle(s, 0)  # kept on this core
    placement.register(s, 0, threading.get_native_id())
    placement.wake_worker(s, 0)
    assert os.sched_getaffinity(0) == {other}
    s[layout.H_FRONT_CPU] = other  # pushing from the other core now: off that one in turn
    placement.wake_worker(s, 0)
    assert os.sched_getaffinity(0) == {here}
    s[layout.H_BLOCKING] = 1  # the frontend waits in a blocker: its core is free, nothing moves
    placement.wake_worker(s, 0)
    assert os.sched_getaffinity(0) == {here}


def test_a_push_for_a_spinner_steers_it_off_the_pushing_frontends_core(two_cores):
    """An op queued for a spinning worker wakes nobody; if that worker went idle on the core the
    frontend pushes from (the OS queued the frontend there when the worker's last completion
    woke it), it gets no turn while the frontend issues, so the push lets it run only on the
    other core. An op still waiting for a predecessor, a frontend in a blocker, or a worker
    idle elsewhere moves nothing. This thread is both the frontend and worker 0."""
    here, other = two_cores
    none = np.empty(0, np.int64)
    buf, s = _state({here, other})

    def push(token, pred=-1):
        os.sched_setaffinity(0, {here})  # the frontend pushes from here
        t.push(s, token, token, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0, pred, -1, -1, none, token, 0, 0)
        return os.sched_getaffinity(0)

    def idle_on(core):
        os.sched_setaffinity(0, {core})
        placement.busy(s, 0)  # gives back every core, if steered
        placement.idle(s, 0)

    idle_on(here)
    placement.register(s, 0, threading.get_native_id())
    assert push(0) == {other}
    idle_on(here)
    assert push(1, pred=0) == {here}  # op 0 is not done: op 1 waits, queued for nobody
    s[layout.H_BLOCKING] = 1
    assert push(2) == {here}
    s[layout.H_BLOCKING] = 0
    idle_on(other)
    assert push(3) == {here}
    idle_on(here)
    assert push(4) == {other}
