"""Cold bytes share the memory bus (`Profile.dram_crowd`): in the model (`asyncsim.model.host`)
and its calibration (`realexec.calibration.caches.crowding`, `fit_crowding`), and the cache
fit's warm point that decides whether the caches are modelled at all."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncsim import Profile, predict
from asyncsim.model.cost import Cost, ProfileError
from realexec.calibration import caches

N = 1000  # float32 elements of the arrays below
NB = 4 * N  # their bytes
BW = 1e9  # warm bytes/s of every CPU op
DRAM = 0.25e9
F32 = 4


def _profile(crowd=0.0, dram_crowd=0.0, llc=NB / 2, workers=2) -> Profile:
    return Profile(name="bus", t1=1e-9, t3=0.0, workers=workers, dispatch=1e-12,
                   costs={"cpu:*": Cost(bandwidth=BW, crowd=crowd)}, llc=llc, dram=DRAM,
                   dram_crowd=dram_crowd)


def _pair(nd):
    """Two ops issued together, each reading x (warm) into a fresh output (cold under llc
    NB / 2: the warm-up's buffer was touched two ops ago)."""
    x = nd.ones((N,))
    x.wait_to_read()
    a = x + 1
    b = x + 2
    nd.waitall()
    return a, b


def _last_two(profile):
    spans = sorted(predict(_pair, profile).spans_of(kind="exec"), key=lambda s: s.op_id)
    return [s.duration for s in spans[-2:]]


def test_two_ops_moving_cold_bytes_share_the_bus():
    """Each op alone: its warm bytes (x in, 4 us at BW) and its output's cold bytes (16 us at
    DRAM). Issued together, each runs beside the other (their starts a nanosecond apart): its
    cold part is stretched by dram_crowd, its warm part by crowd. With dram_crowd 0 the whole op
    is stretched by crowd, as before the bus was modelled; in the caches (a large llc)
    dram_crowd changes nothing."""
    warm, cold = NB / BW, NB / DRAM

    def both(value):
        return pytest.approx([value] * 2, rel=1e-3)

    assert _last_two(_profile()) == both(warm + cold)
    assert _last_two(_profile(dram_crowd=1.0)) == both(warm + 2 * cold)
    assert _last_two(_profile(crowd=0.5, dram_crowd=0.25)) == both(1.5 * warm + 1.25 * cold)
    assert _last_two(_profile(crowd=0.5)) == both(1.5 * (warm + cold))
    assert _last_two(_profile(crowd=0.5, dram_crowd=1.0, llc=1e9)) == both(1.5 * 2 * warm)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=10),
       st.floats(0.0, 1.0), st.floats(0, 8 * NB))
def test_one_worker_never_shares_the_bus(steps, dram_crowd, llc):
    """On one worker no kernel runs beside another, so for any program, cache and dram_crowd
    every op takes what it takes with dram_crowd 0."""

    def program(nd):
        xs = [nd.ones((N,)) for _ in range(4)]
        for i, keep in steps:
            y = xs[i] + 1
            if keep:
                xs[i] = y
        nd.waitall()

    def spans(profile):
        return [s.duration for s in predict(program, profile).spans if s.kind == "exec"]

    alone = spans(_profile(llc=llc, workers=1))
    assert spans(_profile(dram_crowd=dram_crowd, llc=llc, workers=1)) == alone


def test_profile_keeps_dram_crowd_and_refuses_a_negative_one(tmp_path):
    profile = _profile(dram_crowd=0.8)
    profile.save(tmp_path / "p.json")
    assert Profile.load(tmp_path / "p.json").dram_crowd == 0.8
    quiet = profile.replace(dispatch=0.0)  # the bus alone makes the model a contended one
    assert quiet.contended and not quiet.replace(dram_crowd=0.0).contended
    with pytest.raises(ProfileError, match="dram_crowd"):
        profile.replace(dram_crowd=-0.1)


def test_fit_crowding_stretches_the_cold_part_only():
    """An 8 MiB output at 40 GB/s is 210 us of a 300 us op: a pair 1.7x as slow each means a
    cold part stretched 2x (1, the bus shared evenly); 1.35x means half that; faster together
    (a noisy moment) is none, and more than even sharing is clamped."""
    elements, dram = 1 << 21, 40e9
    share = elements * F32 / dram / 300e-6

    def points(ratio):
        return {"elements": elements, "alone": [300e-6] * 3, "together": [ratio * 300e-6] * 3}

    assert caches.fit_crowding(points(1 + share), dram) == pytest.approx(1.0)
    assert caches.fit_crowding(points(1 + share / 2), dram) == pytest.approx(0.5)
    assert caches.fit_crowding(points(0.9), dram) == 0.0
    assert caches.fit_crowding(points(3.0), dram) == 1.0
    assert caches.fit_crowding(points(1.7), 0.0) == 0.0  # no dram: no cold part to stretch


def test_fit_crowding_takes_the_median_round():
    """One round met a slow moment (3x): the median round decides."""
    elements, dram = 1 << 21, 40e9
    alone = [300e-6] * 5
    together = [r * 300e-6 for r in (1.2, 3.0, 1.2, 1.2, 1.1)]
    share = elements * F32 / dram / 300e-6
    found = caches.fit_crowding({"elements": elements, "alone": alone, "together": together}, dram)
    assert found == pytest.approx(0.2 / share)


def test_crowding_times_one_thread_and_two_each_round():
    points = caches.crowding(1 << 12, 3, rounds=2)
    assert points["outputs"] == 3 and len(points["alone"]) == len(points["together"]) == 2
    assert all(0 < s < 0.1 for s in points["alone"] + points["together"])


def test_fit_takes_the_faster_of_one_and_two_buffers_as_warm():
    """A slow moment met the one-buffer point (338 us against 279 at two): the caches are
    still read as on, from the two-buffer point, as run M's third calibration should have."""
    points = {"elements": 1 << 21, "buffers": [1, 2, 3, 5, 9, 17, 33],
              "seconds": [338e-6, 279e-6, 265e-6, 269e-6, 294e-6, 306e-6, 316e-6]}
    found = caches.fit(points)
    assert found["warm"] == 279e-6
    assert found["dram"] > 0 and found["llc"] > 0


def test_calibration_measures_the_bus_and_fits_dram_crowd_from_it(quick_profile):
    """A calibration with two workers or more keeps the crowding rounds among its measurements
    and fits dram_crowd from them (0 where the caches are off: no cold bytes to share)."""
    raw = quick_profile.meta["measurements"]
    if quick_profile.workers < 2:
        assert "dram_crowding" not in raw and quick_profile.dram_crowd == 0.0
        return
    points = raw["dram_crowding"]
    assert len(points["alone"]) == len(points["together"]) >= 2
    want = caches.fit_crowding(points, quick_profile.dram) if quick_profile.dram else 0.0
    assert quick_profile.dram_crowd == want and 0.0 <= want <= 1.0
