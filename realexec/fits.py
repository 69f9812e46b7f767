"""From measurements to Costs, for realexec.calibrate: non-negative least squares on relative
error, the piecewise bytes fit (a bandwidth up to a cache size, another beyond it), the
blockers' own costs, and the crowding of kernels that run at once.

Each point is (features of an op size, its median seconds); coefficients are seconds per feature
unit (1, byte, flop). The fits minimise the squared *relative* error, so a 2 us op and a 20 ms
op count alike. Units: seconds, bytes, flops; Costs as in `asyncsim.profile.Cost`.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from asyncsim.profile import Cost


def fit(features: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Non-negative coefficients c minimising sum(((features @ c) - seconds) / seconds)^2.

    Few columns, so every subset of columns is solved by least squares and the best one whose
    coefficients are all non-negative wins (an exact NNLS for 2-3 unknowns)."""
    a = features / seconds[:, None]
    b = np.ones_like(seconds)
    k = features.shape[1]
    best, best_err = np.zeros(k), math.inf
    for r in range(1, k + 1):
        for cols in itertools.combinations(range(k), r):
            coef, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
            if np.any(coef < 0):
                continue
            full = np.zeros(k)
            full[list(cols)] = coef
            err = float(np.sum((a @ full - b) ** 2))
            if err < best_err:
                best, best_err = full, err
    return best


def cost_of(coef) -> Cost:
    latency, per_byte, per_flop = (list(coef) + [0.0, 0.0])[:3]
    return Cost(latency=float(latency),
                bandwidth=float(1.0 / per_byte) if per_byte > 0 else math.inf,
                peak=float(1.0 / per_flop) if per_flop > 0 else math.inf)


def fit_bytes(nbytes: np.ndarray, seconds: np.ndarray) -> tuple[Cost, list]:
    """latency + bytes / bandwidth, or, where it fits much better (half the squared relative
    error, leaving out the worst point of each so that one noisy size cannot decide), with bytes
    beyond a `cache` size (one of the measured sizes) at `spill` bytes/s."""
    coef = fit(np.stack([np.ones_like(nbytes), nbytes], axis=1), seconds)
    best, best_err = cost_of(coef), _relative_error(cost_of(coef), nbytes, seconds)
    chosen = coef.tolist()
    for cache in nbytes[1:-1]:
        near, far = np.minimum(nbytes, cache), np.maximum(nbytes - cache, 0.0)
        coef = fit(np.stack([np.ones_like(nbytes), near, far], axis=1), seconds)
        if coef[1] <= 0 or coef[2] <= 0:
            continue
        cost = Cost(latency=float(coef[0]), bandwidth=float(1.0 / coef[1]),
                    cache=float(cache), spill=float(1.0 / coef[2]))
        err = _relative_error(cost, nbytes, seconds)
        if err < 0.5 * best_err:
            best, best_err, chosen = cost, err, [*coef.tolist(), float(cache)]
    return best, chosen


def _relative_error(cost: Cost, nbytes, seconds) -> float:
    predicted = np.array([cost.time(b, 0.0) for b in nbytes])
    squares = np.sort(((predicted - seconds) / seconds) ** 2)
    return float(np.sum(squares[:-1]))


def blocker_costs(measured: dict) -> dict[str, Cost]:
    """What asnumpy, print and item add to a wait on a ready array, fitted over sizes
    (`measured`: blocker kind -> [(nbytes, seconds of the whole call)])."""
    ready = dict(measured["wait_to_read"])
    base = min(ready.values())
    costs = {}
    for kind in ("asnumpy", "print", "item"):
        points = measured[kind]
        nbytes = np.array([b for b, _ in points], float)
        extra = np.array([max(secs - ready.get(b, base), 1e-9) for b, secs in points])
        columns = [np.ones(len(points))] + ([nbytes] if len(points) > 1 else [])
        costs[f"frontend:{kind}"] = cost_of(fit(np.stack(columns, axis=1), extra))
    return costs


MEMORY_BOUND = ("cpu:*", "cpu:create", "cpu:elementwise", "cpu:add", "cpu:sub", "cpu:mul",
                "cpu:div", "cpu:copy", "cpu:reduce")


def _crowd(case: dict, latency: float, workers: int) -> float:
    """Stretch of the bytes time per other kernel, from W kernels at once against one alone."""
    alone = max(case["alone"] - latency, 1e-12)
    slowdown = (case["together"] - latency) / alone
    return max(0.0, (slowdown - 1.0) / (workers - 1))


def set_crowding(costs: dict, measured: dict, workers: int) -> None:
    """`crowd` of the memory-bound costs from the elementwise runs (averaged over sizes); below
    5% it is noise and counts as none. Compute-bound kernels (the samplers, dot) on cores of
    their own share nothing: their runs are a check, kept in meta, not a crowd."""
    if workers < 2 or not measured:
        return
    latency = costs["cpu:elementwise"].latency
    values = [_crowd(case, latency, workers) for label, case in measured.items()
              if label.startswith("elementwise")]
    crowd = float(np.mean(values))
    for key in MEMORY_BOUND:
        if key in costs and crowd > 0.05:
            costs[key].crowd = crowd
