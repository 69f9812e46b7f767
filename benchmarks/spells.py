"""How this machine's speed moves: the speed probe taken every half second, with the slow spells
that `realexec.calibration.steady.Gate` keeps calibration and accuracy runs out of (the same
probe, the same threshold).

    python benchmarks/spells.py [--seconds 150] [--pause 0.5]

Prints one character per look: '.' within `steady.SLOW` of the fastest look, 'S' beyond it; then
the probe's seconds (fastest, median, slowest), the share of slow looks and the length of each
slow spell. The cores are kept busy between looks (`steady.busy`): an idle core of a virtual
machine runs slower for a while, which is another effect. Nothing is asserted: a machine without
spells prints dots only.
"""

from __future__ import annotations

import argparse
import statistics
import time

from realexec.calibration.steady import SLOW, busy, speed_probe
from realexec.frontend import machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=150.0, help="how long to look")
    parser.add_argument("--pause", type=float, default=0.5, help="busy seconds between looks")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    looks: list[tuple[float, float]] = []  # (when, probe seconds)
    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        looks.append((time.perf_counter() - start, speed_probe()))
        busy(args.pause)
    fastest = min(s for _, s in looks)
    slow = [s / fastest > SLOW for _, s in looks]
    print("".join("S" if x else "." for x in slow))
    seconds = [s * 1e3 for _, s in looks]
    print(f"{len(looks)} looks over {looks[-1][0]:.0f} s; probe {min(seconds):.2f} ms fastest, "
          f"{statistics.median(seconds):.2f} median, {max(seconds):.2f} slowest; "
          f"{sum(slow)} looks ({sum(slow) / len(slow):.0%}) over {SLOW}x the fastest")
    spells, begun = [], None
    for (when, _), is_slow in zip(looks, slow, strict=True):
        if is_slow and begun is None:
            begun = when
        elif not is_slow and begun is not None:
            spells.append(when - begun)
            begun = None
    if begun is not None:
        spells.append(looks[-1][0] - begun)
    print("slow spells (s): " + (", ".join(f"{s:.1f}" for s in spells) or "none"))


if __name__ == "__main__":
    main()
