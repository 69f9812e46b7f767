"""Microbenchmarks of CPython's GIL: how long a thread asleep on the GIL takes to run once it is
let go (for `realexec.calibrate`), and how much two threads calling short nogil kernels overlap
(for benchmarks/gil_overlap.py). No engine: plain threads and compiled kernels, so the numbers
are the interpreter's and the operating system's.

- `handover`: a thread W calls a kernel that returns while another thread holds the GIL in
  Python, so W falls asleep in CPython's take_gil; the holder then lets the GIL go by calling a
  kernel long enough that the GIL stays free, stamping the clock just before; W stamps it when
  it runs Python again. The difference is what a GIL hand-over to a sleeping thread takes: ~40
  us on a 2-vCPU VM, where an idle engine worker wakes in ~18 us (`dispatch`).
- `overlap`: two threads each calling a kernel of `d` seconds in a loop, with ~1.5 us of Python
  between calls (an engine worker's bookkeeping), against one thread making all the calls: the
  speedup. It depends on where the OS puts the two threads, run to run: here 17 us kernels
  sped up 0.9 times in one harness and 1.8 in another (benchmarks/gil_overlap.py prints it
  beside the real engine's workers and the model).

Units: seconds. Kernel durations come from the kernel's own rate, measured once per call of a
microbenchmark (`Burner`).
"""

from __future__ import annotations

import threading
import time
from time import perf_counter_ns

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def burn(n, entered):
    """n dependent multiply-adds without the GIL; entered[0] = 1 first (the caller's signal
    that the call is under way)."""
    entered[0] = 1
    x = 0.0
    for _ in range(n):
        x = x * 0.999999 + 1.0
    return x


class Burner:
    """`burn` sized in seconds: its per-iteration time measured once, here and now."""

    def __init__(self):
        self.flag = np.zeros(1, np.int64)
        burn(10, self.flag)  # compiled (or loaded from numba's cache) before timing
        start = perf_counter_ns()
        burn(2_000_000, self.flag)
        self.per = max(1e-3, (perf_counter_ns() - start) / 2_000_000)  # ns per iteration

    def iterations(self, seconds: float) -> int:
        return max(1, int(seconds * 1e9 / self.per))


def handover(trials: int, hold: float = 300e-6, kernel: float = 100e-6,
             free: float = 1e-3) -> dict:
    """Seconds from the GIL let go to a thread asleep on it running: {"handover": median,
    "p10": s, "p90": s} over `trials` (see the module docstring). The waiter's kernel lasts
    `kernel`, the holder keeps the GIL `hold` after the waiter's kernel began (so the waiter
    is asleep on it well before it is let go), then leaves it free for `free`."""
    burner = Burner()
    entered = np.zeros(1, np.int64)
    stamps: dict = {}
    n_wait, n_free = burner.iterations(kernel), burner.iterations(free)

    def waiter():
        burn(n_wait, entered)
        stamps["ran"] = perf_counter_ns()

    samples = []
    for _ in range(trials):
        entered[0] = 0
        thread = threading.Thread(target=waiter, daemon=True, name="calibrate-handover")
        thread.start()
        while entered[0] == 0:  # the waiter is in its kernel; the GIL is ours from here
            pass
        deadline = perf_counter_ns() + int(hold * 1e9)
        while perf_counter_ns() < deadline:
            pass
        let_go = perf_counter_ns()
        burn(n_free, burner.flag)
        thread.join()
        samples.append((stamps["ran"] - let_go) * 1e-9)
        time.sleep(5e-4)
    # a few trials see the waiter run before the GIL was let go (a drop request of the
    # interpreter's switch interval while the thread started): not a hand-over
    kept = np.array([s for s in samples if s > 0.0] or [0.0])
    return {"handover": float(np.median(kept)), "p10": float(np.percentile(kept, 10)),
            "p90": float(np.percentile(kept, 90)), "trials": len(kept)}


def overlap(durations, calls: int = 100, rounds: int = 3, python: float = 1.5e-6) -> dict:
    """{duration: speedup}: one thread making 2 * `calls` calls of a kernel of each duration
    (`python` seconds of Python between calls) against two threads making `calls` each,
    median of `rounds` of each."""
    burner = Burner()

    def loop(n, count, out, k, start):
        start.wait()
        first = perf_counter_ns()
        for _ in range(count):
            burn(n, burner.flag)
            until = perf_counter_ns() + int(python * 1e9)
            while perf_counter_ns() < until:  # an engine worker's bookkeeping, with the GIL
                pass
        out[k] = (first, perf_counter_ns())

    def timed(n, threads):
        out: dict = {}
        start = threading.Event()
        pool = [threading.Thread(target=loop, args=(n, 2 * calls // threads, out, k, start),
                                 daemon=True) for k in range(threads)]
        for t in pool:
            t.start()
        time.sleep(2e-3)
        start.set()
        for t in pool:
            t.join()
        return (max(b for _, b in out.values()) - min(a for a, _ in out.values())) * 1e-9

    result = {}
    for d in durations:
        n = burner.iterations(d)
        one = np.median([timed(n, 1) for _ in range(rounds)])
        two = np.median([timed(n, 2) for _ in range(rounds)])
        result[float(d)] = float(one / two)
    return result
