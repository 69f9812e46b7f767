"""Calibration of what an op pays for data that another core wrote last: `profile.foreign` and
`profile.foreign_gemm` (`asyncsim.model.caches.LastLevelCache.foreign` and `asyncsim.model.host`
say how the model uses them).

A core that writes a buffer keeps its lines in its own caches, modified; an op on another core
that then reads or overwrites the buffer has them fetched from there. Calibration times every
kernel on buffers its own core wrote (the op before it, on the same worker), so that fetch is in
no cost. On the 2-core Intel Xeon VM (numpy on threads pinned to a core each; the snippets are in
`notes/ACCURACY.md`, "Data another core wrote"):

- `y = x + 1` on 8 MiB took 587-597 us with x and y last written on its own core and 753-766 us
  with both written on the other: 9.7-11.1 us more per MiB, in three runs of `other_core`;
- a (128, 512) x (512, 2048) product, the kind a dense layer runs, took 145-224 us more with its
  three operands (5.25 MiB) written on the other core: 27.7-42.7 us per MiB; square products of
  512 and 1024 a side showed no consistent change (their operands are reused from the core's
  own caches many times over);
- a 2048x128x512 weight gradient (first operand transposed) ran 11-12% slower with its 4 MiB
  output written on the other core, and 5-7% slower with that output evicted from the other
  core's caches first: from another core's caches costs more than from main memory here.

`other_core(elements, product, rounds)` times `y = x + 1` on `elements` float32 and the
`product` (m, k, n), each on a thread pinned to this process's first core, `rounds` times after
its buffers were written on that core and `rounds` times after they were written on the second
(in turn, so a drift of the machine's speed falls on both). Each price is the difference of the
two medians over the op's bytes, and 0 where it comes out below (no such cost to see). numpy's
add and BLAS on one thread (`threadpoolctl`) run the ops, with no engine in between, as
`realexec.calibration.caches` does: the engine's compiled add moves bytes as fast, and its
products are the same BLAS. With fewer than two cores both prices are 0.

Units: seconds per byte; elements (float32).
"""

from __future__ import annotations

import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

F32 = 4


def _pin(core: int) -> None:
    os.sched_setaffinity(0, {core})


def _price(here: ThreadPoolExecutor, there: ThreadPoolExecutor, write, run, nbytes: int,
           rounds: int) -> tuple[float, dict]:
    """(seconds per byte, the medians) of `run` after `write` on its own core and on the other."""
    times: dict[str, list[float]] = {"same": [], "other": []}

    def timed() -> float:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    here.submit(run).result()  # the first call touches fresh pages and loads code: not timed
    for r in range(rounds):
        for place in (("same", "other") if r % 2 else ("other", "same")):
            (here if place == "same" else there).submit(write).result()
            times[place].append(here.submit(timed).result())
    medians = {place: statistics.median(seconds) for place, seconds in times.items()}
    return max(0.0, (medians["other"] - medians["same"]) / nbytes), medians


def other_core(elements: int, product: tuple[int, int, int], rounds: int) -> dict:
    """{"foreign": s/byte, "foreign_gemm": s/byte, "streaming": medians, "product": medians}:
    what data written last on another core adds to a streaming op and to a product."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return {"foreign": 0.0, "foreign_gemm": 0.0, "cores": len(cores)}
    import threadpoolctl

    x = np.ones(elements, np.float32)
    y = np.empty_like(x)
    m, k, n = product
    rng = np.random.default_rng(0)
    a, b = rng.random((m, k), np.float32), rng.random((k, n), np.float32)
    c = np.empty((m, n), np.float32)

    def write_streaming():
        np.multiply(x, 1.0, out=x)
        y.fill(0.0)

    def write_product():
        np.multiply(a, 1.0, out=a)
        np.multiply(b, 1.0, out=b)
        c.fill(0.0)

    with (threadpoolctl.threadpool_limits(limits=1, user_api="blas"),
          ThreadPoolExecutor(1, initializer=_pin, initargs=(cores[0],)) as here,
          ThreadPoolExecutor(1, initializer=_pin, initargs=(cores[1],)) as there):
        foreign, streaming = _price(here, there, write_streaming,
                                    lambda: np.add(x, 1.0, out=y), x.nbytes + y.nbytes, rounds)
        foreign_gemm, products = _price(here, there, write_product,
                                        lambda: np.dot(a, b, out=c),
                                        a.nbytes + b.nbytes + c.nbytes, rounds)
    return {"foreign": foreign, "foreign_gemm": foreign_gemm, "streaming": streaming,
            "product": products, "elements": elements, "shape": list(product)}


__all__ = ["other_core"]
