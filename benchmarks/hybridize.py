"""8.1.2's hybridize speedup, measured here on each engine and predicted from this machine's
calibration, side by side.

    python benchmarks/hybridize.py [--n N] [--rounds R]

The scenario `hybridize_mlp` (the book's 512-256-128-2 MLP, N forwards on one example, before
and after `net.hybridize()`), run R times on each engine ("native", "native-pinned",
"python") after an untimed run; for each round the ratio of the two regions, "before
hybridizing" / "after hybridizing". The prediction uses the profile `realexec.calibrate()`
measured (cached) on this machine, never these runs. The book measured 0.4943 s / 0.2053 s =
2.4x on its machine. Ratios are printed with their median and range over the rounds: this
machine's speed moves, so compare within one run.
Units: milliseconds for the regions; ratios are plain numbers.
"""

from __future__ import annotations

import argparse
import gc
import statistics

import asyncsim
import realexec
from asyncsim.lab import scenarios
from realexec.frontend import machine

BEFORE, AFTER = "before hybridizing", "after hybridizing"


def measure(engine: str, n: int, rounds: int) -> list[tuple[float, float]]:
    """(before, after) seconds of `rounds` runs on `engine`, after an untimed one."""
    sc = scenarios.get("hybridize_mlp")
    realexec.run(sc.workload, engine=engine, n=n)
    out = []
    for _ in range(rounds):
        gc.collect()
        gc.disable()
        try:
            regions = realexec.run(sc.workload, engine=engine, n=n).regions
        finally:
            gc.enable()
        out.append((regions[BEFORE], regions[AFTER]))
    return out


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    return (f"{fmt.format(statistics.median(values))} "
            f"[{fmt.format(min(values))}, {fmt.format(max(values))}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="forwards per region (book: 1000)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sc = scenarios.get("hybridize_mlp")
    profile = realexec.calibrate()
    predicted = asyncsim.predict(sc.workload, profile, n=args.n).regions
    ratio = predicted[BEFORE] / predicted[AFTER]
    print(f"{machine()}; {args.n} forwards per region, {args.rounds} rounds per engine")
    print(f"predicted ({profile.name}): before {predicted[BEFORE] * 1e3:.1f} ms, after "
          f"{predicted[AFTER] * 1e3:.1f} ms, ratio {ratio:.2f}")
    print(f"{'engine':13s} {'before ms':>22s} {'after ms':>22s} {'ratio':>20s} "
          f"{'predicted/measured':>20s}")
    for engine in ("native", "native-pinned", "python"):
        runs = measure(engine, args.n, args.rounds)
        ratios = [b / a for b, a in runs]
        print(f"{engine:13s} {spread([b * 1e3 for b, _ in runs], '{:.1f}'):>22s} "
              f"{spread([a * 1e3 for _, a in runs], '{:.1f}'):>22s} {spread(ratios):>20s} "
              f"{spread([ratio / r for r in ratios]):>20s}")


if __name__ == "__main__":
    main()
