"""Measuring on a machine whose speed moves: pauses that keep the cores at work (`busy`), the
summary of rounds spread over seconds (`central`), and a probe of the machine's speed of the
moment (`speed_probe`), for `realexec.calibration.microbench`, `realexec.calibration.host` and
benchmarks/accuracy.py.

A virtual machine's cores run slower for seconds after they idle. Measured on the 2-core VM
here: the same Python loop took 250-300 us instead of 140 us in about half of the samples taken
1.5 s of sleep apart, and in 2 of 25 taken between busy pauses; an idle round trip took
180-2000 us instead of 25-30 us right after a 0.1 s sleep. So a pause between measurements is
`busy`: every core kept at work, as during a run. And rounds spread over seconds, and their mean,
give what a run meets on average, where one burst reports whichever speed it caught (before
this, t1 came out 3.2 us in one calibration and 6.0 us in the next; since, 6.5, 6.6 and 6.5 us).
Units: seconds.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np


def busy(seconds: float, threads: int | None = None) -> None:
    """Keep `threads` cores (default: all) at work for `seconds`: realexec's own sampler (a
    numba loop that drops the GIL, tens of microseconds a call) on that many threads. Not BLAS
    products: BLAS's pool threads spin on for a while after the last call, into what is
    measured next. A pause that sleeps instead lets this kind of machine slow its idle cores
    down (see the module docstring)."""
    if seconds <= 0:
        return
    from realexec.cpu.kernels import KERNELS

    count = threads or os.cpu_count() or 1
    sample, attrs = KERNELS["uniform"], {"low": 0.0, "high": 1.0, "seed": 0}
    deadline = time.perf_counter() + seconds

    def work():
        out = np.empty(4096, dtype=np.float32)
        while time.perf_counter() < deadline:
            sample((), out, attrs)

    others = [threading.Thread(target=work, daemon=True) for _ in range(count - 1)]
    for t in others:
        t.start()
    work()
    for t in others:
        t.join()


def central(samples) -> float:
    """The mean of the middle 60% of `samples` (all of them when fewer than five): a mean, as
    the machine's two speeds mix, without the rare stall that a mean alone would take in."""
    values = np.sort(np.asarray(samples, dtype=float))
    cut = int(len(values) * 0.2) if len(values) >= 5 else 0
    return float(values[cut:len(values) - cut].mean())


def speed_probe(rounds: int = 7) -> float:
    """Seconds of a fixed piece of backend work on this thread, the median of `rounds`: the
    engine's compiled sampler on 1M floats (the cores' speed) and its add on two 8 MiB arrays
    (the caches' and memory's). The same probe taken when a profile was calibrated and when a
    workload is measured says how much faster or slower the machine runs meanwhile; it prices
    nothing. It does not catch every drift: on the 2-core Intel VM it stayed within 0.94-1.03
    of calibration's over three collections in which backend-bound scenarios moved by 13%."""
    from realexec.cpu.kernels import KERNELS

    sample, add = KERNELS["uniform"], KERNELS["add"]
    attrs = {"low": 0.0, "high": 1.0, "seed": 0}
    noise = np.empty(1 << 20, dtype=np.float32)
    x, out = np.ones(1 << 21, dtype=np.float32), np.empty(1 << 21, dtype=np.float32)
    sample((), noise, attrs)
    add((x, x), out, {})
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        sample((), noise, attrs)
        add((x, x), out, {})
        times.append(time.perf_counter() - start)
    return float(np.median(times))
