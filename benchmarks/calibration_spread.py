"""How far a profile's numbers move between calibrations of one machine minutes apart: each
field's largest over its smallest value, with the values, the fields that moved most first.

    python benchmarks/calibration_spread.py [--calibrations 3] [--top 30] [PROFILE.json ...]

With profile files (a calibration's cache, `~/.cache/asyncsim/profile-*.json`, copied aside
between calibrations), it compares those; without, it calibrates `--calibrations` times in turn
(`realexec.calibrate(force=True)`, a few minutes each) and compares the results. Printed: the
machine, then per kind of field (the last part of its name: latency, bandwidth, peak, crowd,
cache, ...) how many fields there are and the median and largest spread, then the `--top`
fields that moved most. A prediction moves with the fields its ops are priced by, so a scenario
whose error changes between accuracy runs while its measurements stay put (`accuracy.py`'s
"moved" column) is priced by fields near the top here. The `meta` record (raw measurements) is
left out: the fitted numbers are what the model reads. Not a target: a measurement of where the
model's error between runs comes from.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from realexec.frontend import machine


def numbers(tree, prefix: str = "") -> dict[str, float]:
    """The profile's numeric fields by path ("costs/cpu:add/latency"), `meta` left out."""
    found = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            if not prefix and key == "meta":
                continue
            found.update(numbers(value, f"{prefix}/{key}" if prefix else key))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            found.update(numbers(value, f"{prefix}[{i}]"))
    elif isinstance(tree, int | float) and not isinstance(tree, bool):
        found[prefix] = float(tree)
    return found


def calibrated(count: int, folder: Path) -> list[Path]:
    """`count` fresh calibrations, each profile copied into `folder`."""
    import realexec
    from realexec.calibration.calibrate import cache_path
    from realexec.engine.lanes import default_workers

    copies = []
    for k in range(count):
        realexec.calibrate(force=True, progress=False, gpu=False)
        copies.append(folder / f"profile-{k}.json")
        shutil.copy(cache_path(default_workers(), False, False), copies[-1])
    return copies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profiles", nargs="*", type=Path)
    parser.add_argument("--calibrations", type=int, default=3)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        paths = args.profiles or calibrated(args.calibrations, Path(scratch))
        if len(paths) < 2:
            raise SystemExit("give two profiles or more (or none, to calibrate)")
        tables = [numbers(json.loads(p.read_text())) for p in paths]
    common = set.intersection(*(set(t) for t in tables))
    spread = {}
    for field in common:
        values = [t[field] for t in tables]
        if min(values) > 0:  # a ratio says nothing of zeros and signs
            spread[field] = (max(values) / min(values), values)
    kinds = defaultdict(list)
    for field, (ratio, _) in spread.items():
        kinds[field.rsplit("/", 1)[-1].split("[")[0]].append(ratio)
    print(f"machine: {machine()}; {len(paths)} profiles, {len(spread)} positive fields in all")
    print(f"{'kind':<22s} {'fields':>6s} {'median':>7s} {'largest':>9s}  (largest / smallest)")
    for kind, ratios in sorted(kinds.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"{kind:<22s} {len(ratios):6d} {statistics.median(ratios):7.2f} {max(ratios):9.2f}")
    print(f"\nthe {args.top} fields that moved most")
    for field, (ratio, values) in sorted(spread.items(), key=lambda kv: -kv[1][0])[:args.top]:
        shown = " ".join(f"{v:.3g}" for v in values)
        print(f"{ratio:8.2f}  {field[:70]:<70s} {shown}")


if __name__ == "__main__":
    main()
