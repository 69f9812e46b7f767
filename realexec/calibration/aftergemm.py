"""Streaming ops right after a product: how much slower they run, for realexec.calibrate
(`Profile.after_gemm`).

Calibration times each kernel after others of its kind. In a training loop the bias adds, relus
and normalisations follow products and convolutions, and on some machines they run slower there:
on a 2-core Intel Xeon VM an 8 MiB relu took 1.28-1.34x and `x + 1` 1.14-1.24x their time right
after a 1024x512x2048 product, against after a `* 1.0` of the product's result (the same
buffers), and still 1.13-1.27x 2-10 ms later, 1.05-1.07x 50 ms later (`python
benchmarks/after_gemm.py`, two runs).

`after_gemm(bench, repeats)` times the chain `h = dot(x, w.T)` (or `h = h0 * 1.0`), then relu,
`+ 1.0`, relu, `+ 1.0` on h's (1024, 2048) float32, waited for at its end, `repeats` times without
the product and then `repeats` times with it (in turn, a chain without one would follow the
product of the chain before); the factor is the four ops' median times summed after the product
over the same after the elementwise op. 1.0 where the machine shows no such effect
(`Profile.after_gemm` then changes nothing). Units: seconds.
"""

from __future__ import annotations

import statistics

from realexec.calibration.steady import busy

ROWS, INNER, COLS = 1024, 512, 2048  # the product of 12.2.4's and 8.2.4's first layer
PAUSE_S = 0.1  # seconds between the warm-up's products and the chains without one
FOLLOWERS = ("relu", "add_scalar", "relu", "add_scalar")


def _chain(nd, x, w, h0, product: bool):
    h = nd.dot(x, w, transpose_b=True) if product else h0 * 1.0
    for name in FOLLOWERS:
        h = nd.relu(h) if name == "relu" else h + 1.0
    h.wait_to_read()


def after_gemm(bench, repeats: int) -> dict:
    """{"after_gemm": factor, "after": seconds, "alone": seconds}: the followers' summed
    median exec times behind a product and behind an elementwise op."""
    nd = bench.nd
    x = nd.random.normal(shape=(ROWS, INNER))
    w = nd.random.normal(shape=(COLS, INNER))
    h0 = nd.dot(x, w, transpose_b=True)
    for product in (True, False):  # buffers of every size in the pool, code compiled
        _chain(nd, x, w, h0, product)
    busy(PAUSE_S)  # so the chains without a product follow none
    times: dict[bool, list[list[float]]] = {True: [], False: []}
    for product in (False, True):  # not in turn: a chain behind another's product is slowed too
        for _ in range(repeats):
            since = bench.mark()
            _chain(nd, x, w, h0, product)
            spans = [s for s in bench.spans(since, "exec") if s[1] in FOLLOWERS]
            times[product].append([end - start for _, _, start, end in spans])
    sums = {product: sum(statistics.median(column) for column in zip(*rows, strict=True))
            for product, rows in times.items()}
    nd.waitall()
    return {"after_gemm": max(1.0, sums[True] / sums[False]), "after": sums[True],
            "alone": sums[False]}


__all__ = ["after_gemm"]
