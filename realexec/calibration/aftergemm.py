"""Streaming ops right after a product: how much slower they run, for realexec.calibrate
(`Profile.after_gemm`).

Calibration times each kernel after others of its kind. In a training loop the bias adds, relus
and normalisations follow products and convolutions, and on some machines they run slower there:
on a 2-core Intel Xeon VM an 8 MiB relu took 1.28-1.34x and `x + 1` 1.14-1.24x their time right
after a 1024x512x2048 product, against after a `* 1.0` of the product's result (the same
buffers), and still 1.13-1.27x 2-10 ms later, 1.05-1.07x 50 ms later (`python
benchmarks/after_gemm.py`, two runs).

`after_gemm(bench, repeats, rounds)` times the chain `h = dot(x, w.T)` (or `h = h0 * 1.0`), then
relu, `+ 1.0`, relu, `+ 1.0` on h's (1024, 2048) float32, waited for at its end, `repeats` times
without the product and then `repeats` times with it (`followers`; in turn, a chain without one
would follow the product of the chain before); the factor is the four ops' median times summed
after the product over the same after the elementwise op; with `rounds`, the median round's (single
rounds gave 1.09-1.24 over ten in one process on the 2-core Intel Xeon VM; the median of three
narrowed six calibrations' spread from 0.12 and 0.16 to 0.10 and 0.06 in two blocks a minute apart,
whose levels differed; `notes/ACCURACY.md`, "`after_gemm`: the median of three rounds"). 1.0 where
the machine shows no such effect (`Profile.after_gemm` then changes nothing). Units: seconds.
"""

from __future__ import annotations

import statistics
from time import perf_counter

from realexec.calibration.steady import busy

ROWS, INNER, COLS = 1024, 512, 2048  # the product of 12.2.4's and 8.2.4's first layer
PAUSE_S = 0.1  # seconds between the warm-up's products and the chains without one
FOLLOWERS = ("relu", "add_scalar", "relu", "add_scalar")


def arrays(nd) -> tuple:
    """(x, w, h0): the product's operands and a result of it (the chains without a product
    start from h0)."""
    x = nd.random.normal(shape=(ROWS, INNER))
    w = nd.random.normal(shape=(COLS, INNER))
    return x, w, nd.dot(x, w, transpose_b=True)


def followers(bench, operands, product: bool, repeats: int, gap: float = 0.0,
              names=FOLLOWERS) -> list[list[float]]:
    """Per chain, the exec seconds of its followers (`names`, in order): `repeats` chains behind
    the product, or behind `h0 * 1.0` after a pause (`PAUSE_S`) that puts every product before
    out of reach; `gap` seconds of the frontend's own work between the head and the followers
    (0: none, and no wait). One chain more runs first, untimed: the pool then holds its buffers."""
    nd = bench.nd
    x, w, h0 = operands
    if not product:
        busy(PAUSE_S)
    rows = []
    for _ in range(repeats + 1):
        since = bench.mark()
        h = nd.dot(x, w, transpose_b=True) if product else h0 * 1.0
        if gap:
            h.wait_to_read()
            end = perf_counter() + gap
            while perf_counter() < end:
                pass
        for name in names:
            h = nd.relu(h) if name == "relu" else h + 1.0
        h.wait_to_read()
        rows.append([b - a for _, nm, a, b in bench.spans(since, "exec") if nm in names])
    return rows[1:]


def after_gemm(bench, repeats: int, rounds: int = 1) -> dict:
    """{"after_gemm": factor, "after": seconds, "alone": seconds, "rounds": factors}: the
    followers' summed median exec times behind a product and behind an elementwise op, in each
    of `rounds` rounds; the round whose factor is the median gives the three values (the effect
    itself moves: 1.09-1.24 over ten single rounds in one process)."""
    operands = arrays(bench.nd)
    found = []
    for _ in range(rounds):
        # without the product first: in turn, a chain behind another's product is slowed too
        times = {product: followers(bench, operands, product, repeats)
                 for product in (False, True)}
        sums = {product: sum(statistics.median(column) for column in zip(*rows, strict=True))
                for product, rows in times.items()}
        found.append((sums[True] / sums[False], sums[True], sums[False]))
    bench.nd.waitall()
    factor, after, alone = sorted(found)[(len(found) - 1) // 2]
    return {"after_gemm": max(1.0, factor), "after": after, "alone": alone,
            "rounds": [f for f, _, _ in found]}


__all__ = ["FOLLOWERS", "after_gemm", "arrays", "followers"]
