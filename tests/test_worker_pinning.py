"""With `pin=True` the compiled engine pins each CPU worker to a core of its own, in turn over
the cores the process may use, and unpins it while it runs Python ops; other lanes' threads
(GPU launchers) and the frontend stay where the OS puts them. By default every thread keeps the
process's cores (a worker that moves off a busy worker's core takes them all back at once:
`realexec.engine.placement`, tests/test_placement.py)."""

import os
import threading

import pytest

from realexec.engine.native import NativeEngine

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux only")


def _affinity(lane):
    """Each of the lane's threads' allowed cores, once it has started its loop."""
    out = []
    for th in lane.threads:
        for _ in range(2000):  # the thread pins itself first thing; give it the moment
            cores = os.sched_getaffinity(th.native_id)
            if len(cores) == 1 or len(os.sched_getaffinity(0)) == 1:
                break
            threading.Event().wait(0.001)
        out.append(cores)
    return out


def test_cpu_workers_pinned_one_core_each_in_turn():
    allowed = sorted(os.sched_getaffinity(0))
    with NativeEngine(workers=3, pin=True) as engine:
        got = _affinity(engine.lanes["cpu"])
        other = engine.add_lane("gpu0", workers=1)
        gpu = [os.sched_getaffinity(th.native_id) for th in other.threads]
        frontend = os.sched_getaffinity(0)
    assert got == [{allowed[i % len(allowed)]} for i in range(3)]
    assert gpu == [set(allowed)]
    assert frontend == set(allowed)


def test_workers_free_by_default():
    allowed = os.sched_getaffinity(0)
    with NativeEngine(workers=2) as engine:
        threading.Event().wait(0.01)
        got = [os.sched_getaffinity(th.native_id) for th in engine.lanes["cpu"].threads]
    assert got == [allowed, allowed]


def test_a_worker_running_python_ops_is_unpinned_meanwhile():
    allowed = os.sched_getaffinity(0)
    seen = []
    with NativeEngine(workers=1, pin=True) as engine:
        var = engine.new_var()
        engine.push(lambda: seen.append(os.sched_getaffinity(0)), (), (var,), "cpu", "probe")
        engine.wait_all()
        after = _affinity(engine.lanes["cpu"])
    assert seen == [allowed]
    assert after == [{min(allowed)}]
