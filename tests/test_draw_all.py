"""The main job draws its figures after the runs (`asyncsim.lab.figures.draw_all`): on every core
in forked processes, or one by one on one core; either way every figure is written, the work
given to do meanwhile returns its value, and a figure that cannot be drawn stops the job."""

from __future__ import annotations

import os

import pytest

from asyncsim.lab import scenarios
from asyncsim.lab.figures import draw_all
from asyncsim.model.profile import Profile
from asyncsim.model.simulate import simulate


def _jobs(tmp_path, n=3):
    sc = scenarios.get("dependency")
    profile = Profile.preset("book")
    pred = simulate(sc.record(quick=True), profile)
    # measured and predicted-only figures both: a None measurement draws the prediction alone
    return [(sc, profile, pred, pred if i % 2 else None, tmp_path / f"run{i}", ("png",))
            for i in range(n)]


@pytest.mark.parametrize("cores", [2, 1], ids=["forked", "serial"])
def test_every_figure_is_written_and_the_side_work_returns(tmp_path, monkeypatch, cores):
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert draw_all(_jobs(tmp_path), then=lambda: "book table") == "book table"
    for i in range(3):
        png = tmp_path / f"run{i}" / "dependency.png"
        assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("cores", [2, 1], ids=["forked", "serial"])
def test_a_figure_that_cannot_be_drawn_stops_the_job(tmp_path, monkeypatch, cores):
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    jobs = _jobs(tmp_path, 2)
    sc, profile, pred, meas, out, _ = jobs[1]
    jobs[1] = (sc, profile, pred, meas, out, ("gif",))
    with pytest.raises(ValueError, match="unknown format"):
        draw_all(jobs)
