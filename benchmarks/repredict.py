"""Re-predict past accuracy collections with the model as it is now, against what they measured.

    python benchmarks/repredict.py [--results FILE] [--refit] [--set KEY=VALUE ...]
                                   [PROFILE.json ...]

`accuracy.py` keeps each collection's profile (in the calibration cache's `collections/`
folder, named by its calibration time) and prints the collection's table of predicted and
measured totals into its results file. This takes each kept profile whose collection the
results file holds (or the profiles named), predicts every scenario of that table again with
the current model and prints, per scenario, the measured total, the prediction printed then
and the one made now, with their errors; then, per collection, the median and largest error
then and now. `--refit` computes the profile again from the measurements it keeps (after a
change of the fits: `realexec.calibration.calibrate.refit`); `--set` changes profile fields
as `Profile.replace` does (`dram_crowd=1`, `cpu:add.crowd=0`), to ask what a value the
calibration does not yet measure would have done.

Nothing is measured: a model change is checked against many collections in seconds, where an
accuracy run takes 20-25 minutes and meets the machine of its own hour. The measurements stay
those of their hour, so this says which way a change moves the error, not what a new run will
measure; and a model tuned on these collections is checked on fresh ones before it is believed.
Sizes: `accuracy.SIZES`, as `accuracy.py` ran them (not `--quick`). Units: milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from accuracy import SIZES, kept_profiles, predict

from asyncsim import Profile
from asyncsim.lab import scenarios
from realexec.calibration.calibrate import refit

RESULTS = Path(__file__).parent / "results" / "accuracy-amd-epyc-2core-native.txt"


def collection(lines: list[str], date: str) -> dict[str, tuple[float, float]] | None:
    """The summary table of the collection calibrated at `date`: scenario -> (predicted,
    measured) total in ms; None when the file holds no such collection."""
    starts = [k for k, line in enumerate(lines)
              if line.startswith("profile: ") and f"calibrated {date}," in line]
    if not starts:
        return None
    k = next(k for k in range(starts[0], len(lines)) if lines[k].startswith("scenario "))
    rows = {}
    for line in lines[k + 1:]:
        if not line.strip() or line.startswith("("):
            break
        name, predicted, measured = line.split()[:3]
        rows[name] = (float(predicted.removesuffix("ms")), float(measured.removesuffix("ms")))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", nargs="*", help="profile files (default: the kept ones)")
    parser.add_argument("--results", default=str(RESULTS), help="an accuracy results file")
    parser.add_argument("--refit", action="store_true", help="fit each profile again")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="profile fields to change")
    args = parser.parse_args()
    lines = Path(args.results).read_text().splitlines()
    changes = dict(kv.split("=", 1) for kv in args.set)
    paths = [Path(p) for p in args.profiles] or kept_profiles()
    summary = []
    for path in paths:
        profile = Profile.load(path)
        rows = collection(lines, profile.meta.get("date", ""))
        if rows is None:
            continue
        now = refit(profile) if args.refit else profile
        now = now.replace(**changes) if changes else now
        print(f"\n{path.name} (calibrated {profile.meta.get('date')})")
        print(f"{'scenario':<26s} {'measured':>10s} {'then':>10s} {'error':>8s} {'now':>10s} "
              f"{'error':>8s}")
        then_errors, now_errors = [], []
        for name, (then, measured) in rows.items():
            scenario = scenarios.get(name)
            params = scenario.kwargs(**SIZES.get(name, {}))
            total = predict(scenario, now, params).duration * 1e3
            then_errors.append(abs(then / measured - 1))
            now_errors.append(abs(total / measured - 1))
            print(f"{name:<26s} {measured:10.2f} {then:10.2f} {then / measured - 1:+8.1%} "
                  f"{total:10.2f} {total / measured - 1:+8.1%}")
            sys.stdout.flush()
        summary.append((path.name, then_errors, now_errors))
    if not summary:
        sys.exit(f"no kept profile has a collection in {args.results}; run accuracy.py first")
    print(f"\n{'collection':<40s} {'median then':>11s} {'max then':>9s} {'median now':>11s} "
          f"{'max now':>8s}")
    for name, then, now in summary:
        print(f"{name:<40s} {statistics.median(then):11.1%} {max(then):9.1%} "
              f"{statistics.median(now):11.1%} {max(now):8.1%}")


if __name__ == "__main__":
    main()
