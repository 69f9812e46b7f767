"""Idle compiled workers (`realexec.engine.table`): a push wakes a sleeping worker only when more
ops are queued than the lane has workers spinning, who will take them; and an idle worker does
not spin on the core the frontend pushes from while the frontend is awake. Checked on a table
driven from this one thread, so the outcome is the rule's, not the scheduler's."""

from __future__ import annotations

import os
from time import perf_counter_ns

import numpy as np
import pytest
from numba import njit

from realexec.engine import layout, sleep
from realexec.engine import table as t
from realexec.engine.atomics import cpu

NONE = np.empty(0, np.int64)
LANE = layout.LANES  # lane 0's header


@njit(cache=True)
def _cpu():
    return cpu()


def _push(s, token):
    """A ready op of lane 0 (no predecessors); its kernel never runs here."""
    return t.push(s, token, token, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0, -1, -1, -1, NONE,
                  token, 0, 0)


def _spin_once(buf, s):
    """One idle round of a worker that just went idle, stopped at once by H_STOP; whether it
    counted itself a spinner."""
    buf[layout.H_STOP] = 1
    spinning = sleep.idle(s, 0, perf_counter_ns(), False)  # the compiled clock's, CLOCK_MONOTONIC
    buf[layout.H_STOP] = 0
    return spinning


def test_a_push_wakes_a_sleeper_only_past_the_spinning_workers():
    buf, s = layout.new_state(16, 10**12, cores=8)
    assert _spin_once(buf, s)  # a spinner now, counted in the lane's header
    assert buf[LANE + layout.Q_SPINNERS] == 1
    buf[LANE + layout.Q_SLEEPERS] = 1  # and another worker asleep
    assert _push(s, 0)
    assert buf[LANE + layout.Q_FUTEX] == 0  # the spinner takes it: nobody woken
    assert _push(s, 1)
    assert buf[LANE + layout.Q_FUTEX] == 1  # two queued, one spinner: the sleeper is woken
    sleep.unspin(s, 0)
    assert buf[LANE + layout.Q_SPINNERS] == 0


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_an_idle_worker_does_not_spin_beside_an_awake_frontend():
    allowed = os.sched_getaffinity(0)
    core = min(allowed)
    os.sched_setaffinity(0, {core})  # this thread stays on `core` throughout
    try:
        assert _cpu() == core
        buf, s = layout.new_state(16, 10**12, cores=8)
        buf[layout.H_FRONT_CPU] = core  # the frontend pushes from this core and is awake
        assert not _spin_once(buf, s)
        assert buf[LANE + layout.Q_SPINNERS] == 0
        buf[layout.H_SLEEPERS] = 1  # the frontend sleeps in a blocker: its core is free to spin on
        assert _spin_once(buf, s)
        sleep.unspin(s, 0)
        buf[layout.H_SLEEPERS] = 0
        buf[layout.H_FRONT_CPU] = core + 1  # the frontend is elsewhere
        assert _spin_once(buf, s)
    finally:
        os.sched_setaffinity(0, allowed)
