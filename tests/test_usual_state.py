"""`realexec.calibration.usual`: the machine's usual state kept across calibrations, and what
calibration does with it: one that ran in a slow phase throughout warns and is not cached."""

from __future__ import annotations

import importlib
import json
import statistics
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from realexec.calibration import usual
from realexec.calibration.steady import SLOW

cal = importlib.import_module("realexec.calibration.calibrate")


def gated(speed: float, products: float = 3e-3, issues: float = 5e-6) -> dict:
    """A calibration's raw numbers as far as its gates go."""
    return {"gate": {"fastest": speed, "products": {"fastest": products},
                     "issues": {"fastest": issues}}}


seconds = st.floats(1e-6, 1.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(kept=st.lists(st.tuples(seconds, seconds, seconds), max_size=usual.KEPT),
       mine=st.tuples(seconds, seconds, seconds))
def test_a_calibration_is_judged_against_the_median_of_those_kept(kept, mine):
    """Each probe's ratio is the calibration's fastest look over the median of the kept
    calibrations' (none below MIN_KEPT); it is slow on exactly the probes over SLOW."""
    history = [usual.fastest(gated(*k)) for k in kept]
    judged = usual.judge(gated(*mine), history)
    if len(kept) < usual.MIN_KEPT:
        assert judged == {}
        return
    for k, probe in enumerate(("speed", "products", "issues")):
        assert judged[probe] == pytest.approx(mine[k] / statistics.median(h[k] for h in kept))
    assert judged["calibrations"] == len(kept)
    assert usual.slow(judged) == [p for p in usual.PROBES if judged[p] > SLOW]


def test_the_record_keeps_the_last_calibrations_and_skips_one_without_gates(tmp_path):
    path = tmp_path / "usual-here.json"
    usual.record(path, {"speed_probe": [0.01]})  # a quick calibration: no gates, no record
    assert not path.exists()
    for k in range(usual.KEPT + 3):
        usual.record(path, gated(0.01 + k))
    kept = usual.load(path)
    assert [k["speed"] for k in kept] == [0.01 + k for k in range(3, usual.KEPT + 3)]
    path.write_text("not json")
    assert usual.load(path) == []


def _calibrate_with(monkeypatch, tmp_path, raw_gate: dict, history: list[dict], quick_profile):
    """calibrate() on the run's quick calibration's numbers, its gates reading `raw_gate`,
    against `history` kept in a temporary cache: (the profile, its cache path, the warnings)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    kept = cal.cache_dir() / f"usual-{cal._host()}.json"
    kept.parent.mkdir(parents=True)
    kept.write_text(json.dumps(history))
    raw = json.loads(json.dumps(quick_profile.meta["measurements"]))
    monkeypatch.setattr(cal, "_measure", lambda *args: {**raw, "gate": raw_gate})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profile = cal.calibrate(workers=1, quick=True, progress=False, gpu=False)
    return profile, cal.cache_path(1, quick=True), [str(w.message) for w in caught]


def test_a_calibration_in_a_slow_phase_warns_and_is_not_cached(monkeypatch, tmp_path,
                                                               quick_profile):
    """The interpreter 2.5x its usual state over the whole calibration (its gates learnt the
    slow state): the profile is returned, said to be slow, not cached, and kept in the record."""
    history = [usual.fastest(gated(0.0115 + k * 1e-4)) for k in range(5)]
    slow = gated(0.0131, 3.2e-3, 12.5e-6)["gate"]
    profile, path, said = _calibrate_with(monkeypatch, tmp_path, slow, history, quick_profile)
    judged = profile.meta["measurements"]["usual"]
    assert judged["issues"] == pytest.approx(2.5) and judged["calibrations"] == 5
    assert not path.exists()
    assert any("slower than usual" in s and "issues probe 2.50x" in s for s in said)
    assert len(usual.load(cal.cache_dir() / f"usual-{cal._host()}.json")) == 6


def test_a_calibration_in_the_usual_state_is_cached_without_a_word(monkeypatch, tmp_path,
                                                                   quick_profile):
    history = [usual.fastest(gated(0.0115 + k * 1e-4)) for k in range(5)]
    profile, path, said = _calibrate_with(monkeypatch, tmp_path, gated(0.0116)["gate"], history,
                                          quick_profile)
    assert all(r < SLOW for p, r in profile.meta["measurements"]["usual"].items()
               if p != "calibrations")
    assert path.exists() and not any("slower than usual" in s for s in said)
