"""Calibration of the host's last-level cache: `profile.llc`, `profile.dram` and
`profile.dram_crowd` (`asyncsim.model.caches` and `asyncsim.model.host` say how the model uses
them).

`sweep(elements, buffers, rounds, sweeps)`: `y = x + 1` on float32 arrays of `elements`, its
output cycling through k buffers for each k of `buffers` (x is read by every op, so it stays
warm): with k buffers an output buffer was last touched k - 1 ops before, so k - 1 ops' bytes
(2 arrays each) went through the caches in between. Each k's seconds per op are the median over
`rounds` cycles after one untimed cycle, the fastest of `sweeps` sweeps (each sweep's are kept too,
as "sweeps"). numpy's add runs it: a
streaming loop like the engine's compiled elementwise kernels, with no engine in between to blur
a millisecond.

`fit(points)`: warm is the faster of k = 1 and 2 (both in the caches), cold the largest k, the
furthest reuse distance swept. The op still slows between the two largest on the 2-core Intel
Xeon VM (736-808 us at 256 MiB gone through, 987-1009 at 512 MiB; 1007-1035 at 1 GiB in a longer
sweep: the host's last level is 480 MiB, shared), so the median of the two, which this took
before, read a half-warm op as cold: `dram` 13.8 and 14.6 GB/s on two calibrations' points, 11.9
and 12.0 from the largest k. Where cold is not at least `MIN_GAP` slower, the caches make no
difference at these sizes and both values are 0 (off). Otherwise `llc` is the reuse distance
(bytes gone through in between) of the largest k still closer to warm than to cold (one
threshold on a curve that rises gradually: 128 or 256 MiB there, from one calibration to the
next), and `dram` what makes the model's step match the cold op: its output's bytes (x stays
warm) move at `dram` where the warm op moved at its own pace, so 1 / dram = (cold - warm) /
out_bytes + warm / op_bytes.

`crowding(elements, outputs, rounds)`, `fit_crowding(points, dram)`: `profile.dram_crowd`, how much
a second core streaming from main memory slows the first. The same op on cold outputs, one
thread alone and two at once: on the 2-core AMD EPYC VM, 16 MiB arrays took 1.9-2.2x as long
each with two threads (the bus shared evenly: `dram_crowd` 1), 1 MiB arrays in the caches
1.0x. The engine's `y = x + 1` on 2000x2000 with its outputs cold ran 34.5 ms for 50 ops on one
worker and 31-33 ms on two, where the model without it predicted 34.4 and 24.6 ms.

`forgetting(elements, idles, rounds)`, `fit_forget(points)`: `profile.forget`, how long the
caches keep a buffer no op touches. The same op on two buffers, after the core spun for each
of `idles` seconds without touching memory: the host's other tenants evict our lines meanwhile
(on the 2-core Intel Xeon VM, 8 MiB in and out: 580 us back to back, 620-640 after 15 ms,
990-1000 after 40 ms). `forget` is the idle at which the op is halfway from its time back to
back to its time after the longest idle, interpolated between the two idles around it; 0 where
the longest idle is not `MIN_GAP` slower (nothing forgotten in that time).

Units: elements (float32), bytes, seconds, bytes per second. Memory: (max(buffers) + 1) arrays.
"""

from __future__ import annotations

import statistics
import threading
import time

import numpy as np

F32 = 4
MIN_GAP = 1.1  # cold / warm below this: no cache effect worth a model term


def sweep(elements: int, buffers: tuple[int, ...], rounds: int, sweeps: int = 3) -> dict:
    """Seconds per op of `y = x + 1` with its output cycling through k buffers, per k: the
    median op of `rounds` cycles, the fastest of `sweeps` sweeps over every k (a sweep takes
    a fraction of a second; this machine's speed moves more than that from one to the next)."""
    x = np.ones(elements, np.float32)
    outs = [np.empty(elements, np.float32) for _ in range(max(buffers))]
    for out in outs:  # fresh pages touched once, out of the timing
        np.add(x, 1.0, out=out)
    each: list[list[float]] = [[] for _ in buffers]
    for _ in range(sweeps):
        for i, k in enumerate(buffers):
            times = []
            for r in range(rounds + 1):
                for out in outs[:k]:
                    start = time.perf_counter()
                    np.add(x, 1.0, out=out)
                    if r:  # the first cycle brings the k buffers in: not timed
                        times.append(time.perf_counter() - start)
            each[i].append(statistics.median(times))
    return {"elements": elements, "buffers": list(buffers), "seconds": [min(e) for e in each],
            "sweeps": each}


def fit(points: dict) -> dict:
    """{"llc": bytes, "dram": bytes/s} from a `sweep` (both 0 where the caches make no
    difference), with the warm and cold seconds it read."""
    buffers, seconds = points["buffers"], points["seconds"]
    out_bytes = points["elements"] * F32
    op_bytes = 2 * out_bytes
    # warm: the faster of one and two buffers, which hold two and three arrays, in the caches
    # both; one alone read a slow moment as warm once, and the caches as off (run M's third
    # calibration: 338 us at one buffer, 279 at two, 316 at 33)
    warm = min(t for k, t in zip(buffers, seconds, strict=True) if k <= 2) \
        if 1 in buffers else min(seconds)
    cold = seconds[buffers.index(max(buffers))]
    found = {"warm": warm, "cold": cold, "llc": 0.0, "dram": 0.0}
    if len(buffers) < 3 or cold < MIN_GAP * warm:
        return found
    middle = 0.5 * (warm + cold)
    reuse = max((k - 1) * op_bytes for k, s in zip(buffers, seconds, strict=True) if s <= middle)
    found["llc"] = float(reuse)
    found["dram"] = 1.0 / ((cold - warm) / out_bytes + warm / op_bytes)
    return found


def crowding(elements: int, outputs: int, rounds: int) -> dict:
    """Seconds per op of `y = x + 1` on `elements` float32, its output cycling through
    `outputs` buffers (cold: they outgrow the caches), on one thread alone and on two at once,
    each with its own x and buffers (numpy lets the GIL go in the loop, so both stream at once).
    Each round times both, in turn first, each the median op of two cycles after an untimed
    one; the rounds are kept, their ratio is `fit_crowding`'s."""
    xs = [np.ones(elements, np.float32) for _ in range(2)]
    outs = [[np.empty(elements, np.float32) for _ in range(outputs)] for _ in range(2)]
    for mine in outs:  # fresh pages touched once, out of the timing
        for out in mine:
            np.add(xs[0], 1.0, out=out)

    def stream(i: int, times: list) -> None:
        x, mine = xs[i], outs[i]
        for c in range(3):
            for out in mine:
                start = time.perf_counter()
                np.add(x, 1.0, out=out)
                if c:
                    times.append(time.perf_counter() - start)

    alone, together = [], []
    for r in range(rounds):
        for both in ((False, True) if r % 2 else (True, False)):
            times: list[float] = []
            threads = [threading.Thread(target=stream, args=(i, times))
                       for i in range(2 if both else 1)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            (together if both else alone).append(statistics.median(times))
    return {"elements": elements, "outputs": outputs, "alone": alone, "together": together}


def fit_crowding(points: dict, dram: float) -> float:
    """`profile.dram_crowd` from a `crowding` run, where main memory moves `dram` bytes/s (`fit`):
    how much a second stream of cold bytes stretches the time an op's own cold bytes take. The
    model splits the op alone as `fit` priced it: its output's bytes at `dram` (the cold part),
    the rest warm (x, read by every op, stays in the caches), and stretches only the cold part.
    So with s the median over rounds of together / alone and c the cold part's share of the op
    alone, dram_crowd = (s - 1) / c, within [0, 1] (1: the bus shared evenly; more is a noisy
    moment). 8 MiB arrays here: s 1.6-1.8 at c 0.7, so 0.9-1."""
    if dram <= 0:  # the caches off: no cold part to stretch
        return 0.0
    cold = min(1.0, points["elements"] * F32 / dram / statistics.median(points["alone"]))
    stretch = statistics.median(b / a for a, b in zip(points["alone"], points["together"],
                                                      strict=True))
    return min(1.0, max(0.0, (stretch - 1.0) / cold))


def forgetting(elements: int, idles: tuple[float, ...], rounds: int) -> dict:
    """Seconds of `y = x + 1` on `elements` float32 after the core spun for each of `idles`
    seconds: the median of `rounds`, the idles taken in turn within each round."""
    x = np.ones(elements, np.float32)
    out = np.empty(elements, np.float32)
    np.add(x, 1.0, out=out)
    each: list[list[float]] = [[] for _ in idles]
    for _ in range(rounds):
        for i, idle in enumerate(idles):
            np.add(x, 1.0, out=out)  # both buffers touched: the idle alone sets their age
            until = time.perf_counter() + idle
            while time.perf_counter() < until:  # busy elsewhere: no memory of ours touched
                pass
            start = time.perf_counter()
            np.add(x, 1.0, out=out)
            each[i].append(time.perf_counter() - start)
    return {"elements": elements, "idles": list(idles),
            "seconds": [statistics.median(e) for e in each]}


def fit_forget(points: dict) -> float:
    """`profile.forget` (seconds; 0: off) from a `forgetting` run."""
    idles, seconds = points["idles"], points["seconds"]
    warm, cold = seconds[0], seconds[-1]
    if len(idles) < 3 or cold < MIN_GAP * warm:
        return 0.0
    middle = 0.5 * (warm + cold)
    for k in range(1, len(idles)):
        (i0, s0), (i1, s1) = (idles[k - 1], seconds[k - 1]), (idles[k], seconds[k])
        if s1 >= middle:
            return float(i0 + (i1 - i0) * (middle - s0) / (s1 - s0) if s1 > s0 else i1)
    return float(idles[-1])


__all__ = ["crowding", "fit", "fit_crowding", "fit_forget", "forgetting", "sweep"]
