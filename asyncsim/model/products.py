"""Pricing a matrix product that calibration did not time: at the rate of the timed product
nearest to it in shape.

A profile prices a 2-d product by its geometry, "MxKxN" with "-ta"/"-tb" for a transposed
operand (`asyncsim.nd.ops.tensor.dot_geometry`), where it timed that geometry, and otherwise by
one formula fitted over every product timed (latency + bytes / bandwidth + flops / peak). BLAS
gains speed with a product's size and loses some with a thin or transposed shape, which one
linear formula cannot follow: fitted over small, mid-size and large products, its peak is pulled
down by the mid-size ones, and it prices the largest square timed (1024 a side) 10% slow (the
median over 30 calibrations of a 2-core Xeon VM; 3-17%).

So a product of at least `NEAR_FLOPS` flops whose sides are each within a factor 2 of a timed
product's is priced by that product's cost (its own flop rate), the nearest such one counted in
doublings of each side, plus one per transpose that differs. Below `NEAR_FLOPS`, products are
latency- and call-bound and their rates change fast with size (a 32-cube ran at a third of a
64-cube's rate), so the formula prices them.

Judged on calibration's own points, each timed product priced without its own timing, over 30
calibrations of a 2-core Xeon VM (`python benchmarks/products.py`): the median error 8.6% -> 4.4%;
on products of 1e8 flops or more 6.2% -> 2.7% (median bias +2.1% -> +0.1%); the 90th percentile
about the same (31% -> 32%: matrix-vector products, which neither prices well).
Units: flops.
"""

from __future__ import annotations

import math
import re

NEAR_FLOPS = 1e6  # products below this are priced by the formula
_GEOMETRY = re.compile(r"(\d+)x(\d+)x(\d+)((?:-ta)?(?:-tb)?)$")

Shape = tuple[tuple[float, float, float], str]  # log2 of M, K, N; the transposes ("-ta-tb")


def parse(geometry: str) -> Shape | None:
    """A product geometry's sides (log2) and transposes, or None for another kind of geometry
    (a convolution's) or an empty product."""
    match = _GEOMETRY.match(geometry)
    if match is None or "0" in (match[1], match[2], match[3]):
        return None
    sides = tuple(math.log2(int(match[i])) for i in (1, 2, 3))
    return sides, match[4]


def timed(costs, prefix: str) -> list[tuple[Shape, str]]:
    """The product geometries a profile's `costs` time under `prefix` ("cpu:dot@"), parsed."""
    out = []
    for key in costs:
        if key.startswith(prefix):
            shape = parse(key[len(prefix):])
            if shape is not None:
                out.append((shape, key))
    return out


def nearest(geometry: str, flops: float, candidates: list[tuple[Shape, str]]) -> str | None:
    """The key of the timed product that prices `geometry`, or None (the formula prices it)."""
    if flops < NEAR_FLOPS or not candidates:
        return None
    shape = parse(geometry)
    if shape is None:
        return None
    sides, flags = shape
    best, best_distance = None, math.inf
    for (other, other_flags), key in candidates:
        if max(abs(a - b) for a, b in zip(sides, other, strict=True)) > 1.0:
            continue
        differ = ("-ta" in flags) != ("-ta" in other_flags)
        differ += ("-tb" in flags) != ("-tb" in other_flags)
        distance = math.dist(sides, other) + differ
        if distance < best_distance:
            best, best_distance = key, distance
    return best


__all__ = ["NEAR_FLOPS", "nearest", "parse", "timed"]
