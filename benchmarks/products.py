"""How well a profile prices matrix products that calibration did not time, judged on
calibration's own points: each timed product (the `dot` sweep's squares and matrix-vector
products, and the layer products of the training ops) is priced without its own timing, by the
one formula fitted over the others and by the rule the model uses (`asyncsim.model.products`:
the nearest timed product within a factor 2 on every side, from 1 MFLOP up).

    python benchmarks/products.py [PROFILE.json ...]

Without arguments it reads every profile in the calibration cache (each a calibration of this
machine, possibly by older code: their measurements are what counts), or calibrates once where
there is none. Prints what the formula fitted over every product makes of the largest one timed,
then, over all of them, the median and 90th percentile of |error|, and for the products of 1e8
flops or more the median error (its bias) and median |error|.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from asyncsim.model import products
from realexec.calibration.calibrate import cache_dir
from realexec.calibration.fits import cost_of, dot_geometries, fit, geometry_cost

BIG = 1e8  # flops: "large" products


def timed_products(profile: dict) -> dict[str, tuple[float, float, float]] | None:
    """geometry -> (bytes, flops, seconds) of every product a profile's calibration timed."""
    try:
        measured = profile["meta"]["measurements"]
        sweep, layers = measured["kernels"]["dot"], measured["ops"]["dot"]
    except (KeyError, TypeError):
        return None
    return {**dot_geometries(sweep), **{g: tuple(v) for g, v in layers["geometries"].items()}}


def formula(timed: dict):
    """The one formula (latency + bytes / bandwidth + flops / peak) fitted over `timed`."""
    points = np.array(list(timed.values()))
    return cost_of(fit(np.stack([np.ones(len(points)), points[:, 0], points[:, 1]], 1),
                       points[:, 2]))


def fitted_on_all(timed: dict, geometry: str) -> float:
    """The error of the formula fitted over every timed product, `geometry`'s included, on it."""
    nbytes, flops, seconds = timed[geometry]
    return formula(timed).time(nbytes, flops) / seconds - 1


def errors(timed: dict) -> list[tuple[float, float, float]]:
    """(flops, formula's error, rule's error) of each product priced without its own timing."""
    out = []
    for geometry, (nbytes, flops, seconds) in timed.items():
        rest = {g: v for g, v in timed.items() if g != geometry}
        fitted = formula(rest)
        candidates = [(products.parse(g), g) for g in rest]
        near = products.nearest(geometry, flops, [c for c in candidates if c[0] is not None])
        rule = fitted if near is None else geometry_cost(fitted.latency, *rest[near][1:])
        out.append((flops, fitted.time(nbytes, flops) / seconds - 1,
                    rule.time(nbytes, flops) / seconds - 1))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", nargs="*", type=Path)
    args = parser.parse_args()
    paths = args.profiles or sorted(cache_dir().glob("profile-*.json"))
    docs = [json.loads(p.read_text()) for p in paths]
    if not docs:
        from realexec.calibration.calibrate import calibrate
        docs = [calibrate().to_dict()]
    rows, largest = [], []
    for doc in docs:
        timed = timed_products(doc)
        if timed:
            rows += errors(timed)
            squares = [g for g in timed if len(set(g.split("x"))) == 1]
            largest.append(fitted_on_all(timed, max(squares, key=lambda g: timed[g][1])))
    used = len(largest)
    print(f"{used} calibrations, {len(rows)} products priced without their own timing")
    print(f"the formula over all prices the largest square timed (fitted with it) "
          f"{statistics.median(largest):+.1%} at the median ({min(largest):+.1%} to "
          f"{max(largest):+.1%})")
    for label, column in (("one formula over all", 1), ("nearest timed product", 2)):
        every = [abs(r[column]) for r in rows]
        big = [r[column] for r in rows if r[0] >= BIG]
        print(f"{label:<22s} |error| median {statistics.median(every):6.1%}, "
              f"90th percentile {np.quantile(every, 0.9):6.1%};  from {BIG:.0e} flops: "
              f"bias {statistics.median(big):+6.1%}, |error| median "
              f"{statistics.median(map(abs, big)):6.1%}")


if __name__ == "__main__":
    main()
