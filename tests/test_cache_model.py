"""The last-level cache in the model (`asyncsim.model.caches`) and its calibration
(`realexec.calibration.caches`): which bytes an op finds cold, what they cost, and the fit."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncsim import Profile, predict
from asyncsim.model import caches as model_caches
from asyncsim.model.caches import size_class
from asyncsim.model.cost import Cost, ProfileError
from asyncsim.nd.program import Var
from realexec.calibration import caches

N = 1000  # float32 elements of the arrays below
NB = 4 * N  # their bytes
BW = 1e9  # warm bytes/s of every CPU op
DRAM = 0.25e9


def _profile(llc=0.0, dram=0.0, **costs) -> Profile:
    return Profile(name="caches", t1=0.0, t3=0.0, workers=1,
                   costs={"cpu:*": Cost(bandwidth=BW), **costs}, llc=llc, dram=dram)


def _exec(trace, name="add_scalar"):
    return [s.duration for s in trace.spans if s.kind == "exec" and s.name == name]


def _kept(nd, k=4):
    """k outputs kept alive: each takes a buffer nobody has touched."""
    x = nd.ones((N,))
    ys = [x + 1 for _ in range(k)]
    nd.waitall()
    return ys


def _reused(nd, n=6):
    """y = x + 1 with a blocker each time: two buffers take turns, one given back each time."""
    x = nd.ones((N,))
    y = x + 1
    for _ in range(n):
        y.wait_to_read()
        y = x + 1
    nd.waitall()


def test_an_output_whose_buffer_went_untouched_too_long_is_cold():
    """The run follows a warm-up whose buffers the pool gives back, each touched two or more
    ops of 2 NB bytes before: past an llc of NB / 2, each x + 1 writes NB cold bytes (at DRAM
    speed instead of BW) and reads x warm."""
    warm = 2 * NB / BW
    cold = NB * (1 / DRAM - 1 / BW)
    durations = _exec(predict(_kept, _profile(llc=NB / 2, dram=DRAM)))
    assert durations == pytest.approx([warm + cold] * 4)
    assert _exec(predict(_kept, _profile())) == pytest.approx([warm] * 4)


def test_a_run_takes_its_warm_up_runs_buffers_warm(monkeypatch):
    """Under a large llc the warm-up's buffers come back warm; a pool that keeps only two of
    them (POOL_BYTES) lets the rest go, and those outputs are fresh memory: cold."""
    warm = 2 * NB / BW
    assert _exec(predict(_kept, _profile(llc=1e9, dram=DRAM))) == pytest.approx([warm] * 4)
    monkeypatch.setattr(model_caches, "POOL_BYTES", 2 * size_class(NB))
    durations = _exec(predict(_kept, _profile(llc=1e9, dram=DRAM)))
    assert durations[0] == pytest.approx(warm)  # the two kept: x's and the first output's
    assert durations[1:] == pytest.approx([warm + NB * (1 / DRAM - 1 / BW)] * 3)


def test_a_buffer_given_back_is_warm_when_taken_again_soon():
    """In the blocked loop each output takes the buffer given back last, touched 2 ops before:
    warm under a large llc, cold under one smaller than those two ops' bytes."""
    warm = 2 * NB / BW
    large = _exec(predict(_reused, _profile(llc=4 * 2 * NB, dram=DRAM)))
    assert large == pytest.approx([warm] * len(large))
    small = _exec(predict(_reused, _profile(llc=NB, dram=DRAM)))
    assert small[2:] == pytest.approx([warm + NB * (1 / DRAM - 1 / BW)] * (len(small) - 2))


def test_an_op_slower_than_memory_pays_nothing_more_but_a_product_pays_its_cold_bytes():
    """A sampler whose pace is slower than DRAM hides main memory: no more time. A product
    pays its cold bytes at DRAM speed on top of its compute, however slow that is: BLAS packs
    its operands before it computes on them. Under llc 0 the product's output, a buffer the
    warm-up touched before other ops, is cold; its input, written by the op just before, is
    not."""

    def program(nd):
        a = nd.ones((64, 64))
        b = nd.dot(a, a)
        s = nd.random.normal(shape=(64, 64))
        c = a + 1
        nd.waitall()
        return b, s, c

    slow = {"cpu:dot": Cost(bandwidth=BW, peak=1e6), "cpu:normal": Cost(bandwidth=DRAM / 10)}
    on = predict(program, _profile(llc=0.0, dram=DRAM, **slow))
    off = predict(program, _profile(**slow))
    assert _exec(on, "normal") == pytest.approx(_exec(off, "normal"))
    (dot_on,), (dot_off,) = _exec(on, "dot"), _exec(off, "dot")
    assert dot_on - dot_off == pytest.approx(64 * 64 * 4 / DRAM)
    # the add's output takes a buffer the warm-up touched before other ops: cold under llc 0
    assert _exec(on)[0] > _exec(off)[0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=12),
       st.floats(0, 20 * NB), st.floats(0.1e9, 2e9))
def test_cold_bytes_only_add_time_and_a_larger_cache_never_slows(steps, llc, dram):
    """For any blocked program (its buffers chosen in program order): every op takes at least
    its warm time, and a larger llc or a faster DRAM never makes an op slower."""

    def program(nd):
        xs = [nd.ones((N,)) for _ in range(4)]
        for i, keep in steps:
            y = xs[i] + 1
            y.wait_to_read()
            if keep:
                xs[i] = y
        nd.waitall()

    def spans(profile):
        return [s.duration for s in predict(program, profile).spans if s.kind == "exec"]

    off = spans(_profile())
    on = spans(_profile(llc=llc, dram=dram))
    larger = spans(_profile(llc=2 * llc + NB, dram=dram))
    faster = spans(_profile(llc=llc, dram=2 * dram))
    for o, a, b, c in zip(off, on, larger, faster, strict=True):
        assert o <= a * (1 + 1e-12)
        assert b <= a * (1 + 1e-12) and c <= a * (1 + 1e-12)


def test_profile_keeps_llc_and_dram_and_rejects_bad_values(tmp_path):
    profile = _profile(llc=64e6, dram=12e9)
    path = tmp_path / "p.json"
    profile.save(path)
    loaded = Profile.load(path)
    assert (loaded.llc, loaded.dram) == (64e6, 12e9)
    assert profile.replace(dram="5e9").dram == 5e9
    with pytest.raises(ProfileError, match="dram"):
        profile.replace(dram=-1)
    with pytest.raises(ProfileError, match="llc"):
        profile.replace(llc=math.inf)


def test_fit_reads_llc_and_dram_off_a_sweep():
    """Warm 1 ms up to 2 buffers, cold 2 ms from 5 on: llc is the reuse distance of 2 buffers
    (one op of 2 arrays), and DRAM makes the model's cold op 2 ms."""
    elements = 1 << 20
    points = {"elements": elements, "buffers": [1, 2, 5, 9],
              "seconds": [1e-3, 1.1e-3, 2e-3, 2e-3]}
    found = caches.fit(points)
    out = 4 * elements
    assert found["llc"] == 2 * out
    pace = found["warm"] / (2 * out)
    assert found["warm"] + out * (1 / found["dram"] - pace) == pytest.approx(2e-3)


def test_fit_takes_the_furthest_point_for_cold():
    """A sweep still slowing at its end (the last level outgrown only partly at the second
    largest k): cold is the largest k's op, so DRAM makes the model's cold op that slow, not
    the midway one."""
    elements = 1 << 20
    points = {"elements": elements, "buffers": [1, 2, 5, 9, 17],
              "seconds": [1e-3, 1e-3, 1.1e-3, 1.6e-3, 2e-3]}
    found = caches.fit(points)
    out = 4 * elements
    assert found["cold"] == 2e-3
    pace = found["warm"] / (2 * out)
    assert found["warm"] + out * (1 / found["dram"] - pace) == pytest.approx(2e-3)
    assert found["llc"] == 4 * 2 * out  # k = 5 is closer to warm, k = 9 to cold


def test_fit_is_off_where_cold_is_no_slower():
    points = {"elements": 1 << 20, "buffers": [1, 2, 5, 9], "seconds": [1e-3, 1e-3, 1.05e-3, 1e-3]}
    found = caches.fit(points)
    assert (found["llc"], found["dram"]) == (0.0, 0.0)


def test_sweep_times_each_count_of_buffers():
    points = caches.sweep(1 << 12, (1, 2, 3), rounds=1, sweeps=1)
    assert points["buffers"] == [1, 2, 3] and len(points["seconds"]) == 3
    assert all(0 < s < 0.1 for s in points["seconds"])


def test_buffers_still_held_at_the_end_go_back_most_recent_on_top():
    """after_run gives back what a program never freed, so the next run takes the buffer
    touched last first; the time each was last seen restarts at the next run's start (its
    clock starts at 0 again)."""
    variables = {0: Var(0, (N,), "float32", "cpu", NB), 1: Var(1, (N,), "float32", "cpu", NB)}
    cache = model_caches.LastLevelCache(0.0, DRAM, variables)
    cache.touched = {0: 5.0, 1: 3.0}
    cache.see((1, 0), 0.01)
    cache.see((0,), 0.02)
    cache.after_run()
    assert cache.touched == {} and cache.seen == {}
    assert cache.spare == {size_class(NB): [(3.0, None, 0.01), (5.0, None, 0.02)]}
    nxt = model_caches.LastLevelCache(0.0, DRAM, variables, before=cache)
    nxt.take(1)
    assert nxt.touched[1] == 5.0 and nxt.spare_bytes == size_class(NB)
    assert nxt.seen[1] == 0.0


def test_a_full_pool_lets_go_of_the_classes_given_back_least_recently(monkeypatch):
    """As realexec's buffer cache does: past POOL_BYTES the spare buffers of the size class
    given back least recently go first (its oldest first), not the one given back now."""
    big, small = size_class(NB), size_class(NB // 4)
    monkeypatch.setattr(model_caches, "POOL_BYTES", 2 * big + small)
    variables = {v: Var(v, (N,), "float32", "cpu", NB) for v in (0, 1)}
    variables.update({v: Var(v, (N // 4,), "float32", "cpu", NB // 4) for v in (2, 3)})
    cache = model_caches.LastLevelCache(0.0, DRAM, variables)
    cache.touched = {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0}
    for var in (0, 1, 2):
        cache.give_back(var)
    assert cache.spare_bytes == 2 * big + small
    cache.give_back(3)  # no room: the big class, given back least recently, loses its oldest
    never = -math.inf  # no op was seen touching them
    assert cache.spare == {big: [(2.0, None, never)],
                           small: [(3.0, None, never), (4.0, None, never)]}
    assert cache.spare_bytes == big + 2 * small


def _gap(nd):
    """x + 1, then a sampler, then x + 1 again, a blocker after each: neither x nor the
    buffer the second add takes from the pool (carried over from the warm-up run, seen at
    the run's start) is touched while the sampler runs."""
    x = nd.ones((N,))
    y = x + 1
    y.wait_to_read()
    s = nd.random.normal(shape=(N,))
    s.wait_to_read()
    z = x + 1
    nd.waitall()
    return y, s, z


@pytest.mark.parametrize("forget", [0.0, 0.5e-3, 5e-3])
def test_a_buffer_untouched_longer_than_forget_is_cold_however_large_the_cache(forget):
    """Under an llc nothing outgrows, the second add's x and output buffer are warm by the bytes
    gone through; with the sampler taking 1 ms, they are cold after all where the caches forget
    in 0.5 ms (their 2 NB bytes at DRAM speed), and warm where the caches keep them 5 ms or
    never forget (0)."""
    gap = {"cpu:normal": Cost(latency=1e-3)}
    trace = predict(_gap, _profile(llc=1e12, dram=DRAM, **gap).replace(forget=forget))
    first, second = _exec(trace)
    aged = 2 * NB * (1 / DRAM - 1 / BW) if 0 < forget < 1e-3 else 0.0
    assert second - first == pytest.approx(aged)


@settings(max_examples=30, deadline=None)
@given(st.floats(1e-6, 1.0), st.floats(1e-6, 1.0))
def test_caches_that_forget_sooner_never_make_an_op_faster(a, b):
    """For any two forget times, the one that forgets sooner prices every op at least as
    high (it only turns warm bytes cold)."""
    gap = {"cpu:normal": Cost(latency=1e-3)}
    sooner, later = sorted((a, b))
    fast = _exec(predict(_gap, _profile(llc=1e12, dram=DRAM, **gap).replace(forget=later)))
    slow = _exec(predict(_gap, _profile(llc=1e12, dram=DRAM, **gap).replace(forget=sooner)))
    assert all(s >= f - 1e-15 for s, f in zip(slow, fast, strict=True))


def test_forgetting_times_the_op_after_each_idle_spell():
    points = caches.forgetting(1 << 12, (0.0, 0.001, 0.002), rounds=2)
    assert points["idles"] == [0.0, 0.001, 0.002] and len(points["seconds"]) == 3
    assert all(0 < s < 0.1 for s in points["seconds"])


def test_fit_forget_finds_where_the_op_is_halfway_to_cold():
    """Halfway between 600 us (back to back) and 1000 us (80 ms idle) is 800 us, reached a
    quarter of the way from 40 ms (700 us) to 80 ms: 50 ms. Flat points forget nothing."""
    idles = [0.0, 0.01, 0.02, 0.04, 0.08]
    slope = {"idles": idles, "seconds": [600e-6, 600e-6, 620e-6, 700e-6, 1000e-6]}
    assert caches.fit_forget(slope) == pytest.approx(0.04 + 0.04 * 100 / 300)
    flat = {"idles": idles, "seconds": [600e-6, 610e-6, 590e-6, 620e-6, 640e-6]}
    assert caches.fit_forget(flat) == 0.0
