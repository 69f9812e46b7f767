"""From measurements to Costs, for realexec.calibrate: non-negative least squares on relative
error, the piecewise bytes fit (a bandwidth up to a cache size, another beyond it, a third beyond
a second size), the kernels that calibration times (`FITTED`: what each prices, its bytes and
flops per size) and their costs, the training ops' costs from points that carry their own bytes
and flops (`op_costs`), the blockers' own costs, and the crowding of kernels that run at once.

Each point is (features of an op size, its median seconds); coefficients are seconds per feature
unit (1, byte, flop). The fits minimise the squared *relative* error, so a 2 us op and a 20 ms
op count alike. Units: seconds, bytes, flops; Costs as in `asyncsim.model.profile.Cost`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from asyncsim.model.profile import Cost


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


def fit_bytes(nbytes: np.ndarray, seconds: np.ndarray, levels: int = 2) -> tuple[Cost, list]:
    """latency + bytes / bandwidth, or, where it fits much better (half the squared relative
    error, leaving out the worst point of each so that one noisy size cannot decide), with bytes
    beyond a `cache` size (one of the measured sizes) at `spill` bytes/s; and in turn, where that
    fits much better again, with bytes beyond a second, larger size `cache2` at `spill2` (a
    machine with a large last-level cache shows three bandwidths: the core's own caches, the
    shared cache, main memory). At most `levels` cache sizes."""
    coef = fit(np.stack([np.ones_like(nbytes), nbytes], axis=1), seconds)
    best, best_err = cost_of(coef), _relative_error(cost_of(coef), nbytes, seconds)
    chosen = coef.tolist()
    inner = np.unique(nbytes)[1:-1]  # points of several variants may share a size
    for level in range(1, levels + 1):
        if best_err < 1e-12:  # nothing left for another bandwidth to explain
            break
        found = None
        for breaks in itertools.combinations(inner, level):
            cost, coef = _piecewise(nbytes, seconds, breaks)
            if cost is None:
                continue
            err = _relative_error(cost, nbytes, seconds)
            if err < 0.5 * best_err and (found is None or err < found[1]):
                found = (cost, err, [*coef.tolist(), *map(float, breaks)])
        if found is not None:
            best, best_err, chosen = found
    return best, chosen


def _piecewise(nbytes: np.ndarray, seconds: np.ndarray, breaks) -> tuple[Cost | None, list]:
    """The fit with a bandwidth per stretch of bytes between `breaks` (None if one of them
    comes out non-positive)."""
    edges = [0.0, *breaks, math.inf]
    columns = [np.ones_like(nbytes)]
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        columns.append(np.clip(nbytes - lo, 0.0, hi - lo))
    coef = fit(np.stack(columns, axis=1), seconds)
    if np.any(coef[1:] <= 0):
        return None, coef
    cost = Cost(latency=float(coef[0]), bandwidth=float(1.0 / coef[1]), cache=float(breaks[0]),
                spill=float(1.0 / coef[2]))
    if len(breaks) > 1:
        cost.cache2, cost.spill2 = float(breaks[1]), float(1.0 / coef[3])
    return cost, coef


def _relative_error(cost: Cost, nbytes, seconds) -> float:
    predicted = np.array([cost.time(b, 0.0) for b in nbytes])
    squares = np.sort(((predicted - seconds) / seconds) ** 2)
    return float(np.sum(squares[:-1]))


def blocker_costs(measured: dict, pace: dict | None = None) -> dict[str, Cost]:
    """What asnumpy, print and item add to a wait on a ready array, fitted over sizes
    (`measured`: blocker kind -> [(nbytes, seconds of the whole call)]); a kind in `pace`
    (kind -> bytes/s) keeps that bandwidth and fits only its latency (the median remainder)."""
    ready = dict(measured["wait_to_read"])
    base = min(ready.values())
    costs = {}
    for kind in ("asnumpy", "print", "item"):
        points = measured[kind]
        nbytes = np.array([b for b, _ in points], float)
        extra = np.array([max(secs - ready.get(b, base), 1e-9) for b, secs in points])
        if pace and kind in pace:
            rest = float(np.median(extra - nbytes / pace[kind]))
            costs[f"frontend:{kind}"] = Cost(latency=max(0.0, rest), bandwidth=pace[kind])
            continue
        columns = [np.ones(len(points))] + ([nbytes] if len(points) > 1 else [])
        costs[f"frontend:{kind}"] = cost_of(fit(np.stack(columns, axis=1), extra))
    return costs


F32 = 4
ROW = 256  # the row that the broadcast kernel adds to each row of its matrix


def _dot_bytes(n):  # a negative side is a (1, |n|) x (|n|, |n|) product
    m = abs(n)
    return F32 * ((1 if n < 0 else m) * m * 2 + m * m)


def _dot_flops(n):
    m = abs(n)
    return 2.0 * (1 if n < 0 else m) * m * m


# the kernels that realexec.calibrate times: name -> (the profile keys it prices, bytes(size),
# flops(size) or None for a bytes-only fit)
FITTED = {
    "ones": (("cpu:create",), lambda n: F32 * n, None),
    "normal": (("cpu:normal",), lambda n: F32 * n, None),
    "uniform": (("cpu:uniform",), lambda n: F32 * n, None),
    "add_scalar": (("cpu:*", "cpu:elementwise"), lambda n: 2 * F32 * n, None),
    "add": (("cpu:add", "cpu:sub", "cpu:mul", "cpu:div"), lambda n: 3 * F32 * n, None),
    "broadcast": (("cpu:broadcast",), lambda n: F32 * (2 * n + ROW), None),
    "copy": (("cpu:copy",), lambda n: 2 * F32 * n, None),
    "sum": (("cpu:reduce",), lambda n: F32 * (n + 1), None),
    "dot": (("cpu:dot",), _dot_bytes, _dot_flops),
}


def kernel_costs(measured: dict, device: str = "cpu") -> dict[str, Cost]:
    """The "cpu:" (or `device`:) costs fitted to the kernels' times (`measured`: name in
    FITTED -> sizes, seconds); the coefficients are added to `measured`."""
    costs: dict[str, Cost] = {}
    for name, fitted in measured.items():
        keys, nbytes, flops = FITTED[name]
        keys = [f"{device}:{key.partition(':')[2]}" for key in keys]
        sizes, times = fitted["sizes"], np.array(fitted["seconds"])
        moved = np.array([nbytes(n) for n in sizes], float)
        if flops is None:
            cost, coef = fit_bytes(moved, times)
        else:
            columns = [np.ones(len(sizes)), moved, np.array([flops(n) for n in sizes], float)]
            coef = fit(np.stack(columns, axis=1), times).tolist()
            cost = cost_of(coef)
        fitted["coefficients"] = coef
        for key in keys:
            costs[key] = dataclasses.replace(cost)
    return costs


# the training ops whose time is the bytes they move (no exp or log per element, no BLAS):
# crowded by kernels beside them as the elementwise ones are
MEMORY_BOUND_OPS = ("relu_grad", "equal", "sgd_update", "broadcast_to", "sum_axis", "argmax",
                    "batch_norm", "batch_norm_grad", "batch_norm_grad_gamma", "batch_norm_infer",
                    "bn_update", "pool2d", "pool2d_grad")
MEMORY_BOUND = ("cpu:*", "cpu:create", "cpu:elementwise", "cpu:add", "cpu:sub", "cpu:mul",
                "cpu:div", "cpu:broadcast", "cpu:copy", "cpu:reduce",
                *(f"cpu:{name}" for name in MEMORY_BOUND_OPS))
COMPUTE_BOUND_OPS = ("conv2d", "conv2d_grad_data", "conv2d_grad_weight", "dot")


def dot_geometries(fitted: dict) -> dict[str, list]:
    """The square and matrix-vector products of the `dot` sweep (FITTED's "dot": sizes, seconds)
    by geometry ("NxNxN", "1xNxN"): [bytes, flops, seconds] each. Fitted together with the
    layer products of `realexec.calibration.training`, and each a geometry of its own, which
    prices the products near it in shape (`asyncsim.model.products`)."""
    out = {}
    for n, secs in zip(fitted["sizes"], fitted["seconds"], strict=True):
        m = abs(n)
        out[f"{1 if n < 0 else m}x{m}x{m}"] = [float(_dot_bytes(n)), float(_dot_flops(n)),
                                              float(secs)]
    return out


def op_costs(measured: dict, device: str = "cpu", extra: dict | None = None) -> dict[str, Cost]:
    """"cpu:<op>" (or `device`:) costs of the training ops from their points (`measured`: op
    name -> {"points": [[bytes, flops, seconds], ...]}, as
    `realexec.calibration.training.kernel_times` gives them): latency + bytes / bandwidth +
    flops / peak for the convolutions and the products (with `extra`, the square ones of the
    `dot` sweep: `dot_geometries`), `fit_bytes` (with its cache levels) for the others; and
    "cpu:<op>@<geometry>" for each convolution geometry and product shape timed
    (`geometry_cost`). The coefficients are added to `measured`. `extra`: op name -> more
    geometries of that op, measured elsewhere ({geometry: [bytes, flops, seconds]}), fitted
    along and priced as its own."""
    costs: dict[str, Cost] = {}
    extra = extra or {}
    for name, fitted in measured.items():
        more = extra.get(name, {})
        points = np.array(sorted(fitted["points"] + list(more.values())), float)
        moved, flops, times = points[:, 0], points[:, 1], points[:, 2]
        if name in COMPUTE_BOUND_OPS:
            coef = fit(np.stack([np.ones(len(times)), moved, flops], axis=1), times).tolist()
            cost = cost_of(coef)
        else:
            # a cache size only where at least two more sizes than unknowns pin it down: an op
            # measured at a few sizes (a slow one) is a straight line
            sizes = len(np.unique(moved))
            cost, coef = fit_bytes(moved, times, levels=max(0, min(2, sizes - 4)))
        fitted["coefficients"] = coef
        costs[f"{device}:{name}"] = cost
        for geometry, (_, flops, seconds) in {**more, **fitted.get("geometries", {})}.items():
            costs[f"{device}:{name}@{geometry}"] = geometry_cost(cost.latency, flops, seconds)
    return costs


def geometry_cost(latency: float, flops: float, seconds: float) -> Cost:
    """The cost of one convolution geometry (or product shape) from its one timed call: the
    op's fitted latency, then the call's flop rate, so a batch of that geometry costs in
    proportion to its images (the kernel convolves images in chunks, each chunk's product as
    fast at any batch; a product's geometry is its whole shape). The one formula over every
    geometry misses single shapes by up to a third: BLAS runs a product of few filters or few
    channels far below its peak, and one with its weight transposed a fifth slower."""
    latency = min(latency, seconds / 2)
    return Cost(latency=latency, peak=flops / (seconds - latency))


def _crowd(case: dict, latency: float, workers: int) -> float:
    """Stretch of the bytes time per other kernel, from W kernels at once against one alone."""
    alone = max(case["alone"] - latency, 1e-12)
    slowdown = (case["together"] - latency) / alone
    # at most 1: W kernels sharing the memory bandwidth take as long as running one after
    # another; a measured slowdown beyond W is a noisy moment, and would make the model predict
    # that independent ops run faster with a blocker after each
    return min(1.0, max(0.0, (slowdown - 1.0) / (workers - 1)))


def set_crowding(costs: dict, measured: dict, workers: int) -> None:
    """`crowd` of the memory-bound costs from the elementwise runs (averaged over sizes), and of
    each convolution geometry's three costs from that geometry's runs (im2col's copies share
    the memory system; the model stretches their flops time, which is all they have); below 5%
    it is noise and counts as none. The samplers and dot on cores of their own share nothing:
    their runs are a check, kept in meta, not a crowd."""
    if workers < 2 or not measured:
        return
    latency = costs["cpu:elementwise"].latency
    values = [_crowd(case, latency, workers) for label, case in measured.items()
              if label.startswith("elementwise")]
    crowd = float(np.mean(values))
    for key in MEMORY_BOUND:
        if key in costs and crowd > 0.05:
            costs[key].crowd = crowd
    # convolutions two at once (`training.crowding`: each geometry's forward twice and its two
    # gradients together): one crowd for them all, the median over every pair, as one pair's
    # rounds scatter far more than the geometries differ (over 18 calibrations, one geometry's
    # crowd had an interquartile range of 0.1-0.4 while the geometries' medians lay within
    # 0.05-0.28; LeNet's second layer alone gave 0.63 and 0.06 within the hour, 2-core AMD VM)
    pairs = [(label.partition("@")[2], _crowd(case, 0.0, workers))
             for label, case in measured.items() if label.startswith("conv2d") and "@" in label]
    if not pairs:
        return
    crowd = float(np.median([value for _, value in pairs]))
    for geometry, _ in pairs:
        for op in ("conv2d", "conv2d_grad_data", "conv2d_grad_weight"):
            key = f"cpu:{op}@{geometry}"
            if key in costs and crowd > 0.05:
                costs[key].crowd = crowd
