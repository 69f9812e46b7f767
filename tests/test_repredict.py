"""benchmarks/repredict.py and the profiles accuracy.py keeps for it: a kept collection's
scenarios are predicted again with the current model, against what the results file says they
measured."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import accuracy  # noqa: E402
import repredict  # noqa: E402

DATE = "2026-12-02T07:50:49+00:00"


def _results(date: str, rows: list[tuple[str, float, float]]) -> str:
    """A results file as accuracy.py prints one collection: the profile line, a table, the
    summary whose rows repredict reads, the legend after it."""
    table = "\n".join(f"{name:<26s} {p:9.2f}ms {m:9.2f}ms      +0.0%    1.0%     +0.0%    0.00"
                      "   1.00  1.00       0" for name, p, m in rows)
    return (f"machine: test\nprofile: vm, calibrated {date}, 2 workers (1.0 s)\n\n"
            "dependency (book parameters)\nregion  predicted  measured  error\n\n"
            "scenario                     predicted    measured  total err  spread\n"
            f"{table}\n(spread: ...)\n\ntotal time: median |error| 1.0%\n")


def test_collection_reads_the_summary_table_of_its_calibration_only():
    lines = _results(DATE, [("dependency", 0.41, 0.45), ("blockers", 96.32, 101.99)])
    lines = lines.splitlines()
    assert repredict.collection(lines, DATE) == {"dependency": (0.41, 0.45),
                                                 "blockers": (96.32, 101.99)}
    assert repredict.collection(lines, "2026-12-02T07:50:50+00:00") is None


def test_a_kept_profile_is_predicted_again_against_its_measurements(
        quick_profile, tmp_path, monkeypatch, capsys):
    """accuracy.keep files the profile by its calibration time; repredict finds its collection
    in the results file and prints the prediction printed then and the one made now. `--set`
    changes the profile: a fresh engine's first push 10 ms dearer predicts the run 10 ms slower."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    profile = quick_profile.replace()  # a copy, its own meta
    profile.meta["date"] = DATE
    accuracy.keep(profile)
    (kept,) = accuracy.kept_profiles()
    assert kept.parent == tmp_path / "asyncsim" / "collections" and "075049" in kept.name
    results = tmp_path / "results.txt"
    results.write_text(_results(DATE, [("dependency", 0.41, 0.45)]))

    def now(*settings) -> float:
        monkeypatch.setattr(sys, "argv", ["repredict.py", "--results", str(results), *settings])
        repredict.main()
        row = next(line for line in capsys.readouterr().out.splitlines()
                   if line.startswith("dependency"))
        measured, then, _, predicted, _ = row.split()[1:]
        assert (float(measured), float(then)) == (0.45, 0.41)
        return float(predicted)

    plain = now()
    assert plain > 0
    assert now("--set", f"startup={profile.startup + 0.01}") == pytest.approx(plain + 10, abs=0.02)
    monkeypatch.setattr(sys, "argv", ["repredict.py", "--results", str(tmp_path / "none.txt")])
    (tmp_path / "none.txt").write_text("")
    with pytest.raises(SystemExit, match="no kept profile"):
        repredict.main()
