"""The GIL-free spin of a blocker (`realexec.engine.spin.Progress`): it returns as soon as its
condition holds once a worker has bumped the counter, gives up at its deadline, and never reports a
condition that does not hold.
"""

from __future__ import annotations

import threading
import time
from time import perf_counter_ns

from realexec.engine.spin import Progress


def test_spin_returns_when_a_worker_bumps_after_the_condition_holds():
    """A thread that makes the condition true and then bumps the counter ends the spin, which
    reports the condition as met."""
    progress, flag = Progress(), []

    def worker():
        time.sleep(0.02)
        flag.append(True)
        progress.counts[0] += 1

    t = threading.Thread(target=worker)
    t.start()
    assert progress.spin(lambda: bool(flag), perf_counter_ns() + 60_000_000_000)
    t.join()


def test_spin_gives_up_at_the_deadline():
    """With nothing happening, the spin returns False once its deadline has passed."""
    progress = Progress()
    deadline = perf_counter_ns() + 5_000_000
    assert not progress.spin(lambda: False, deadline)
    assert perf_counter_ns() >= deadline


def test_a_bump_alone_does_not_end_the_spin():
    """Counter moves without the condition (other ops finishing) keep the spin going."""
    progress, stop = Progress(), threading.Event()

    def busy_worker():
        while not stop.is_set():
            progress.counts[0] += 1
            time.sleep(0.0005)

    t = threading.Thread(target=busy_worker)
    t.start()
    try:
        assert not progress.spin(lambda: False, perf_counter_ns() + 20_000_000)
    finally:
        stop.set()
        t.join()
