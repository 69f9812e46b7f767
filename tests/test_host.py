"""The host's contention in the model (asyncsim.model.host): waking idle workers, the GIL and its
switch interval, releases, crowding of memory-bound kernels, cores shared by the threads that
want them, the blockers' own costs, and costs whose bytes outgrow a cache -- each off unless a
profile asks."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncsim import Profile, predict, record, simulate
from asyncsim.model.profile import Cost, ProfileError


def _exact(value):
    return pytest.approx(value, rel=1e-9, abs=1e-15)


def _profile(**kv) -> Profile:
    base = dict(name="host", t1=1e-5, t3=2e-5, workers=1, cores=8,
                costs={"cpu:*": Cost(latency=1e-4)})
    base.update(kv)
    return Profile(**base)


def blocking_loop(nd, n=5):
    x = nd.ones((4,))
    x.wait_to_read()
    with nd.benchmark("loop"):
        for _ in range(n):
            y = x + 1
            y.wait_to_read()
    return y


def burst(nd, n=5):
    x = nd.ones((4,))
    x.wait_to_read()
    with nd.benchmark("burst"):
        ys = [x + 1 for _ in range(n)]
        nd.waitall()
    return ys


def test_ideal_and_book_profiles_model_no_contention():
    """The presets leave every host effect off, so the closed forms stay exact."""
    for profile in (Profile.ideal(workers=4), Profile.preset("book")):
        assert not profile.contended


def test_an_idle_worker_takes_dispatch_to_start():
    """With a blocker after each op, every op finds its worker asleep: each iteration costs
    t1 + dispatch + t2 + t3."""
    t1, t2, t3, d, n = 1e-5, 1e-4, 2e-5, 3e-5, 5
    profile = _profile(t1=t1, t3=t3, dispatch=d, costs={"cpu:*": Cost(latency=t2)})
    trace = predict(blocking_loop, profile, n=n)
    assert trace.regions["loop"] == _exact(n * (t1 + d + t2 + t3))


def test_a_busy_worker_takes_the_next_op_at_once():
    """Ops queued behind a running one start when it ends: only the first pays dispatch."""
    t1, t2, d, n = 1e-6, 1e-4, 3e-5, 5
    profile = _profile(t1=t1, t3=0.0, dispatch=d, costs={"cpu:*": Cost(latency=t2)})
    trace = predict(burst, profile, n=n)
    assert trace.regions["burst"] == _exact(t1 + d + n * t2)


def test_workers_wait_for_the_gil_while_the_frontend_issues():
    """The frontend keeps the GIL while it issues back to back: the first op starts only when it
    blocks in waitall (its issues take less than a switch interval)."""
    t1, n = 1e-5, 20
    profile = _profile(t1=t1, t3=0.0, gil=1e-6, costs={"cpu:*": Cost(latency=1e-6)})
    trace = predict(burst, profile, n=n)
    first = min(s.start for s in trace.spans_of(kind="exec") if s.name == "add_scalar")
    last_issue = max(s.end for s in trace.spans_of("frontend", "issue"))
    assert first >= last_issue


def test_a_waiting_worker_gets_the_gil_after_a_switch_interval():
    """When the frontend issues for longer than the switch interval, a waiting worker is handed
    the GIL after `switch` seconds (plus a wake-up), before the frontend is done."""
    t1, n, switch = 1e-4, 200, 2e-3
    profile = _profile(t1=t1, t3=0.0, gil=1e-6, switch=switch, dispatch=1e-5,
                       costs={"cpu:*": Cost(latency=1e-6)})
    trace = predict(burst, profile, n=n)
    region_start = trace.marks[0][1]
    first = min(s.start for s in trace.spans_of(kind="exec") if s.name == "add_scalar")
    last_issue = max(s.end for s in trace.spans_of("frontend", "issue"))
    assert first < last_issue
    assert first - region_start >= switch


def test_a_finished_op_releases_dropped_buffers_on_its_worker():
    """Each buffer that an op was the last to use, already dropped by the frontend, adds
    `release` seconds to its worker after the op."""
    def chain(nd, n=6):
        x = nd.ones((4,))
        x.wait_to_read()
        with nd.benchmark("chain"):
            for _ in range(n):
                x = x + 1
            x.wait_to_read()

    t2, rel, n = 1e-4, 7e-6, 6
    base = _profile(t1=1e-7, t3=0.0, dispatch=1e-9, costs={"cpu:*": Cost(latency=t2)})
    plain = predict(chain, base, n=n).regions["chain"]
    released = predict(chain, base.replace(release=rel), n=n).regions["chain"]
    # op k frees the x it read (dropped as soon as op k was issued); the release comes after
    # the op, so the last one falls after the wait on its result: n - 1 releases delay the chain
    assert released - plain == _exact((n - 1) * rel)


def test_an_issuing_frontend_keeps_its_core_two_busy_workers_share_the_other():
    """Two workers on two cores, four 1 ms ops issued 0.5 ms apart. Once the second op starts,
    three threads want the two cores: the frontend, issuing, keeps its own (realexec's placement
    keeps workers off the pushing frontend's core) and the two workers share the other at half
    speed, so the first two ops take 1.5 ms each and every issue 0.5 ms. When the frontend
    blocks in waitall (asleep at once, or spinning: realexec's blocker spins only on a core free
    of busy workers) the workers run at full speed again. The work is conserved: 3.5 ms in all,
    where one worker running all four would take 4.5 ms. With three cores nothing is shared:
    3.0 ms."""
    t1, t2 = 5e-4, 1e-3
    profile = _profile(workers=2, cores=2, t1=t1, t3=0.0, dispatch=1e-9, spin=0.0,
                       costs={"cpu:*": Cost(latency=t2)})
    trace = predict(burst, profile, n=4)
    spinning = predict(burst, profile.replace(spin=2e-3), n=4).regions["burst"]
    three = predict(burst, profile.replace(cores=3, spin=2e-3), n=4).regions["burst"]
    assert trace.regions["burst"] == pytest.approx(7 * t1, abs=1e-8)  # dispatch (1 ns) aside
    assert spinning == pytest.approx(7 * t1, abs=1e-8)
    assert three == pytest.approx(6 * t1, abs=1e-8)
    adds = sorted((s for s in trace.spans_of(kind="exec") if s.name == "add_scalar"),
                  key=lambda s: s.op_id)
    assert [s.duration / t2 for s in adds] == pytest.approx([1.5, 1.5, 1.0, 1.0], abs=1e-5)
    issues = sorted(trace.spans_of("frontend", "issue"), key=lambda s: s.op_id)[1:]
    assert [s.duration / t1 for s in issues] == pytest.approx([1.0, 1.0, 1.0, 1.0], abs=1e-5)


def test_a_blocker_adds_its_frontend_cost_on_the_bytes_it_returns():
    """asnumpy costs t3 plus its frontend:asnumpy cost for the array's bytes."""
    def convert(nd):
        x = nd.ones((1000,))
        nd.waitall()
        with nd.benchmark("asnumpy"):
            x.asnumpy()

    t3 = 2e-5
    profile = Profile.ideal(t3=t3)
    assert predict(convert, profile).regions["asnumpy"] == _exact(t3)
    profile.costs["frontend:asnumpy"] = Cost(latency=1e-6, bandwidth=4000.0)
    assert predict(convert, profile).regions["asnumpy"] == _exact(t3 + 1e-6 + 1.0)
    assert profile.blocker("waitall") == t3


@pytest.mark.parametrize("op_s", [5e-3, 1e-4])
def test_a_blocker_that_fell_asleep_pays_t3_asleep(op_s):
    """A wait_to_read whose op outlasts the 1 ms spin falls asleep and returns t3_asleep after
    the op; a shorter wait is still spinning and returns t3 after it; without t3_asleep both
    pay t3."""
    def one(nd):
        x = nd.ones((4,))
        nd.waitall()
        with nd.benchmark("op"):
            (x + 1).wait_to_read()

    t1, t3, asleep = 1e-6, 2e-6, 3e-5
    profile = _profile(t1=t1, t3=t3, t3_asleep=asleep, spin=1e-3, dispatch=1e-9,
                       costs={"cpu:*": Cost(latency=op_s)})
    woke = asleep if op_s > profile.spin else t3
    assert predict(one, profile).regions["op"] == pytest.approx(t1 + op_s + woke, abs=1e-8)
    plain = predict(one, profile.replace(t3_asleep=0.0)).regions["op"]
    assert plain == pytest.approx(t1 + op_s + t3, abs=1e-8)


def test_bytes_beyond_the_cache_move_at_the_spill_bandwidth():
    """Cost.time: up to `cache` bytes at `bandwidth`, the rest at `spill`."""
    cost = Cost(latency=1.0, bandwidth=10.0, cache=100.0, spill=5.0)
    assert cost.time(50.0, 0.0) == _exact(1.0 + 5.0)
    assert cost.time(300.0, 0.0) == _exact(1.0 + 10.0 + 40.0)
    assert Cost(bandwidth=10.0).time(300.0, 0.0) == _exact(30.0)


def test_new_fields_round_trip_and_are_checked(tmp_path):
    """dispatch, wake, gil, release, switch, spin, handover, t3_asleep and the Cost fields cache,
    spill, crowd
    survive a JSON round trip; a negative crowd or a zero spill is refused in one line."""
    profile = _profile(dispatch=1e-5, wake=5e-6, gil=2e-6, release=3e-6, switch=4e-3, spin=1e-3,
                       handover=4e-5, t3_asleep=3e-5,
                       costs={"cpu:*": Cost(latency=1e-6, bandwidth=1e9, cache=1e6,
                                            spill=5e8, crowd=0.7)})
    profile.save(tmp_path / "p.json")
    assert Profile.load(tmp_path / "p.json") == profile
    with pytest.raises(ProfileError, match="crowd"):
        _profile(costs={"cpu:*": Cost(crowd=-1.0)})
    with pytest.raises(ProfileError, match="spill"):
        Profile.from_dict({"name": "p", "t1": 0, "t3": 0, "costs": {"cpu:*": {"spill": 0}}})
    assert not math.isinf(profile.switch)


_steps = st.lists(st.sampled_from(["add", "mul", "relu"]), min_size=1, max_size=25)


def _chain(nd, steps, blockers):
    x = nd.ones((16,))
    for step, block in zip(steps, blockers, strict=True):
        x = x + 1 if step == "add" else x * 2 if step == "mul" else x.relu()
        if block:
            x.wait_to_read()
    nd.waitall()


@settings(max_examples=40, deadline=None)
@given(data=st.data(), steps=_steps, workers=st.integers(1, 3))
def test_host_effects_only_add_time_to_a_chain(data, steps, workers):
    """For a chain of dependent ops (one runs at a time), turning on wake-ups (and what they
    cost the waker), the GIL and releases never makes the run shorter."""
    blockers = data.draw(st.lists(st.booleans(), min_size=len(steps), max_size=len(steps)))
    program = record(_chain, steps=steps, blockers=blockers)
    plain = _profile(workers=workers, costs={"cpu:*": Cost(latency=5e-5)})
    hosted = plain.replace(dispatch=data.draw(st.floats(0, 1e-4)),
                           wake=data.draw(st.floats(0, 1e-5)),
                           gil=data.draw(st.floats(1e-7, 1e-5)),
                           release=data.draw(st.floats(0, 1e-5)))
    assert simulate(program, hosted).duration >= simulate(program, plain).duration - 1e-12


def test_a_worker_needs_the_gil_again_when_its_kernel_returns():
    """A kernel that ends while the frontend keeps issuing (holding the GIL) cannot complete:
    its worker waits for the GIL, so the op ends only once the frontend blocks in waitall."""
    def kernel_then_issues(nd, n=30):
        big = nd.ones((1000,))
        big.wait_to_read()
        with nd.benchmark("region"):
            y = big + 1  # a 0.1 ms kernel
            big.wait_to_read()  # ready: the worker takes the GIL while the frontend returns
            ys = [big * 2 for _ in range(n)]  # 30 issues of 10 us each: 0.3 ms
            nd.waitall()
        return y, ys

    cost = Cost(latency=1e-6, bandwidth=8000 / 1e-4)  # 8000 bytes: 0.1 ms out of the GIL
    profile = _profile(t1=1e-5, t3=2e-6, gil=1e-6, costs={"cpu:*": cost})
    trace = predict(kernel_then_issues, profile)
    first = next(s for s in trace.spans_of(kind="exec") if s.name == "add_scalar")
    last_issue = max(s.end for s in trace.spans_of("frontend", "issue"))
    assert first.start < last_issue - 2e-4  # it started during the issues...
    assert first.end >= last_issue  # ...and finished only when the frontend let go


def chain(nd, n=8):
    x = nd.ones((4,))
    x.wait_to_read()
    with nd.benchmark("chain"):
        for _ in range(n):
            x = x + 1
        x.wait_to_read()


@pytest.mark.parametrize("spin", [0.0, 1.0])
def test_a_blocked_frontend_costs_each_op_recheck(spin):
    """While the frontend waits in a blocker, asleep (spin 0) or spinning (spin 1 s), each op
    its worker finishes before the one it waits for costs the worker `recheck` more: n - 1 of
    them for a chain of n (the worker tests the blocker's condition, as realexec's does)."""
    n, recheck = 8, 3e-6
    base = _profile(t1=1e-7, t3=0.0, dispatch=1e-9, spin=spin,
                    costs={"cpu:*": Cost(latency=1e-4)})
    plain = predict(chain, base, n=n).regions["chain"]
    blocked = predict(chain, base.replace(recheck=recheck), n=n).regions["chain"]
    assert blocked - plain == _exact((n - 1) * recheck)


def test_waiting_workers_each_get_a_turn_from_a_busy_frontend():
    """A frontend issuing for many switch intervals hands the GIL to a waiting worker each
    interval, to each of two waiting workers in turn: a waiter that lost a hand-over to an
    older one asks again one interval later (CPython's take_gil)."""
    def long_burst(nd, n=300):
        x = nd.ones((4,))
        x.wait_to_read()
        with nd.benchmark("burst"):
            ys = [x + 1 for _ in range(n)]
            nd.waitall()
        return ys

    switch = 1e-3
    profile = _profile(workers=2, t1=5e-5, t3=0.0, gil=1e-6, dispatch=1e-5, switch=switch,
                       costs={"cpu:*": Cost(latency=1e-6, bandwidth=64 / 1e-5)})
    trace = predict(long_burst, profile)
    last_issue = max(s.end for s in trace.spans_of("frontend", "issue"))
    during = [s for s in trace.spans_of(kind="exec") if s.end < last_issue]
    assert {s.lane for s in during} == {"cpu/w0", "cpu/w1"}
    assert len(during) >= 0.5 * last_issue / switch


def test_the_first_op_of_a_fresh_engine_costs_startup():
    """The first op issued costs the frontend t1 + startup; the others t1; the presets have no
    startup, and it alone turns no host effect on."""
    def two_ops(nd):
        with nd.benchmark("two"):
            a = nd.ones((4,))
            b = a + 1
            b.wait_to_read()

    t1, t2, t3, startup = 1e-5, 1e-4, 2e-5, 3e-4
    profile = Profile.ideal(t1=t1, t2=t2, t3=t3).replace(startup=startup)
    assert not profile.contended and Profile.ideal().startup == 0.0
    issues = predict(two_ops, profile).spans_of("frontend", "issue")
    assert [s.duration for s in issues] == [_exact(t1 + startup), _exact(t1)]
    # the second issue overlaps the first op (t2 > t1): the chain is startup + t1 + 2 t2 + t3
    assert predict(two_ops, profile).regions["two"] == _exact(startup + t1 + 2 * t2 + t3)


def test_the_first_issue_of_each_later_op_name_costs_first_kind():
    """Beyond the first op (startup), each op name's first issue adds first_kind and its later
    issues do not: ones, add_scalar, add_scalar, mul, mul pay 0, k, 0, k, 0."""
    def kinds(nd):
        a = nd.ones((4,))
        b = a + 1
        c = b + 1
        d = c * c
        return d * d

    t1, startup, first = 1e-5, 3e-4, 4e-5
    profile = Profile.ideal(t1=t1).replace(startup=startup, first_kind=first)
    assert Profile.ideal().first_kind == 0.0 and not profile.contended
    issues = sorted(predict(kinds, profile).spans_of("frontend", "issue"), key=lambda s: s.op_id)
    assert [s.duration for s in issues] == [_exact(t1 + startup), _exact(t1 + first), _exact(t1),
                                            _exact(t1 + first), _exact(t1)]


def _waking(**kv) -> Profile:
    # a wake-up (dispatch) longer than the waker's cost, so the worker that finished an op takes
    # the next one itself before the one it woke arrives, and shorter than an op, so that one
    # is asleep again when the next link is put
    return _profile(t1=1e-7, t3=0.0, dispatch=2e-5, **kv)


def test_each_op_a_chain_hands_to_an_idle_worker_costs_its_waker_wake():
    """A chain on two workers: each of its n - 1 links puts the next op into the queue while
    the other worker sleeps, so the worker that finished pays `wake` before it goes on: the
    chain is exactly (n - 1) * wake longer. On one worker nobody sleeps: no change."""
    n, cost = 8, 7e-6
    for workers, expected in ((2, (n - 1) * cost), (1, 0.0)):
        plain = predict(chain, _waking(workers=workers), n=n).regions["chain"]
        woken = predict(chain, _waking(workers=workers, wake=cost), n=n).regions["chain"]
        assert woken - plain == _exact(expected)


def test_a_push_that_wakes_a_worker_lengthens_its_issue_span():
    """The frontend pays `wake` in each push whose op wakes the idle worker (`ones`, and the
    chain's first op after the blocker), and in no other push."""
    cost = 7e-6
    plain = predict(chain, _waking()).spans_of("frontend", "issue")
    woken = predict(chain, _waking(wake=cost)).spans_of("frontend", "issue")
    longer = [b.duration - a.duration for a, b in zip(plain, woken, strict=True)]
    assert [round(d / cost, 6) for d in longer] == [1.0, 1.0] + [0.0] * (len(longer) - 2)


def test_a_worker_signalling_a_gil_waiter_keeps_the_gil_until_the_signal_is_sent():
    """Two workers drain tiny ops: the one that releases the GIL to the other, asleep on it,
    pays `wake` first, still holding it (CPython signals under the GIL's own mutex). So the
    woken worker cannot take it during that time, and hand-overs stay rare: most ops run
    without waiting for the GIL after their kernel, as measured on the real engine (p50 exec
    equal to one worker's)."""
    profile = _profile(workers=2, cores=2, t1=1e-6, t3=0.0, gil=1.5e-6, dispatch=1.2e-5,
                       wake=1e-5, costs={"cpu:*": Cost(latency=1e-6, bandwidth=64 / 2e-7)})
    spans = [s for s in predict(burst, profile, n=400).spans_of(kind="exec")
             if s.name == "add_scalar"]
    alone = predict(burst, profile.replace(workers=1), n=400).spans_of(kind="exec")
    one = sorted(s.duration for s in alone if s.name == "add_scalar")
    two = sorted(s.duration for s in spans)
    assert two[len(two) // 2] == _exact(one[len(one) // 2])
    waited = sum(d > 2 * one[len(one) // 2] for d in two)
    assert waited < len(two) // 2
