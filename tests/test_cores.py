"""Cores shared by the threads that want them (asyncsim.model.cores): processor sharing, exact
against its closed form, conserving work for any arrivals, free when nobody waits, and the
frontend's core its own while it issues."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncsim.model.cores import Cores

works = st.lists(st.floats(1e-6, 1e-2), min_size=1, max_size=8)


def _run(count: int, jobs, frontend: bool = False) -> list[float]:
    """Each job (arrival, work) joins at its arrival and does its work; their finish times. The
    frontend, runnable from the start, leaves at once unless `frontend`."""
    env = simpy.Environment()
    cores = Cores(env, count)
    if not frontend:
        cores.leave(front=True)
    done = [0.0] * len(jobs)

    def job(k, arrival, work):
        yield env.timeout(arrival)
        cores.join()
        yield from cores.work(work)
        cores.leave()
        done[k] = env.now

    for k, (arrival, work) in enumerate(jobs):
        env.process(job(k, arrival, work))
    env.run()
    return done


@settings(max_examples=60, deadline=None)
@given(works, st.integers(1, 4))
def test_jobs_that_start_together_finish_as_processor_sharing_says(work, count):
    """k jobs from time 0: while m are left, each runs at min(1, count / m); so the i-th
    shortest ends (w_i - w_{i-1}) / that rate after the one before it."""
    finish = _run(count, [(0.0, w) for w in work])
    expected, now, before = {}, 0.0, 0.0
    for i, (k, w) in enumerate(sorted(enumerate(work), key=lambda kw: kw[1])):
        now += (w - before) / min(1.0, count / (len(work) - i))
        before = w
        expected[k] = now
    assert finish == pytest.approx([expected[k] for k in range(len(work))], rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 1e-2), st.floats(1e-6, 1e-2)), min_size=1,
                max_size=8), st.integers(1, 4))
def test_the_cores_do_every_jobs_work_and_never_more_than_they_have(jobs, count):
    """Whatever the arrivals: no job ends before its work at full speed, the cores' busy time
    (min(count, jobs running) over time) equals the work done, and with no more jobs than
    cores each ends exactly its work after it arrived."""
    finish = _run(count, jobs)
    for (arrival, work), end in zip(jobs, finish, strict=True):
        assert end >= arrival + work * (1 - 1e-9)
    edges = sorted({t for (a, _), f in zip(jobs, finish, strict=True) for t in (a, f)})
    busy = 0.0
    for lo, hi in zip(edges, edges[1:], strict=False):
        running = sum(a <= lo and f >= hi for (a, _), f in zip(jobs, finish, strict=True))
        busy += min(count, running) * (hi - lo)
    assert busy == pytest.approx(sum(w for _, w in jobs), rel=1e-6)
    if len(jobs) <= count:
        assert finish == pytest.approx([a + w for a, w in jobs], rel=1e-9)


def test_the_frontend_is_runnable_from_the_start_and_a_share_that_holds_costs_no_event():
    """On one core a worker beside the (running) frontend gets half of it; on two it runs at
    full speed and joining and leaving never wake the threads at work."""
    assert _run(1, [(0.0, 1e-3)], frontend=True) == pytest.approx([2e-3])
    env = simpy.Environment()
    cores = Cores(env, 2)
    cores.leave(front=True)  # the frontend blocks: one thread at work, below

    def job():
        cores.join()
        yield from cores.work(1e-3)
        cores.leave()

    worker = env.process(job())
    env.run(until=5e-4)
    waiting = worker.target  # the timeout of its work
    cores.join()
    cores.leave()
    env.run(until=6e-4)
    assert worker.target is waiting and cores.share == 1.0
    cores.join()
    cores.join()
    env.run(until=7e-4)
    assert worker.target is not waiting and cores.share == pytest.approx(2 / 3)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1e-6, 1e-2), min_size=2, max_size=6), st.integers(2, 4),
       st.floats(1e-6, 2e-2))
def test_an_issuing_frontend_keeps_its_core_and_the_workers_share_the_others(work, count,
                                                                           front_work):
    """With the frontend issuing, workers started together share the other `count - 1` cores
    by processor sharing, whatever the frontend does meanwhile, and the frontend's own work
    runs at full speed (realexec's placement keeps workers off the pushing frontend's core);
    once the frontend blocks, the workers have every core."""
    env = simpy.Environment()
    cores = Cores(env, count)
    done = [0.0] * len(work)
    front_done = []

    def frontend():
        yield from cores.work(front_work, front=True)
        front_done.append(env.now)
        yield env.timeout(1.0)  # still issuing (runnable) long after every worker is done

    def job(k, seconds):
        cores.join()
        yield from cores.work(seconds)
        cores.leave()
        done[k] = env.now

    env.process(frontend())
    for k, seconds in enumerate(work):
        env.process(job(k, seconds))
    env.run(until=0.5)
    assert front_done == pytest.approx([front_work], rel=1e-9)
    expected, now, before = {}, 0.0, 0.0
    for i, (k, w) in enumerate(sorted(enumerate(work), key=lambda kw: kw[1])):
        now += (w - before) / min(1.0, (count - 1) / (len(work) - i))
        before = w
        expected[k] = now
    assert done == pytest.approx([expected[k] for k in range(len(work))], rel=1e-9)

    cores.leave(front=True)  # the frontend blocks: two workers on two cores, full speed
    assert cores.share == 1.0 if count >= 2 else True
    for _ in range(count + 1):
        cores.join()
    assert cores.share == pytest.approx(count / (count + 1))
    cores.join(front=True)
    assert cores.share_of(True) == 1.0
    assert cores.share == pytest.approx((count - 1) / (count + 1))
