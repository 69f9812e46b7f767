"""Small independent ops on two workers against one: the compiled engine and the Python one.

    python benchmarks/small_ops.py [--ops N] [--rounds R]

Exercise 3 of 8.3: "when ops are small enough, parallel execution on one device can help". Two
independent chains of `x = x * 1.0001 + 0.5` on float32 arrays of a few sizes (kernels of ~1 us
to ~200 us). Each round queues both chains behind a held op (a sleep that writes both inputs),
so each worker has a backlog, then measures the drain: first exec start to last exec end (after
an untimed run, so the pool's buffers are warm, and in alternating order). For
each engine ("native": compiled workers that take no GIL per op; "python": Python worker threads)
the speedup of two workers over one, median and range over the rounds, next to the median
kernel time; "loop" times the whole loop as a user sees it (push and drain, no hold). "bare
threads" is the machine's own ratio: the same kernels in one compiled loop on two plain
threads against one, no engine at all: no engine can beat it.

Ratios are measured side by side in one run, never asserted: this machine's speed moves.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import numpy as np
from numba import njit

import realexec
from realexec.calibration.steady import busy
from realexec.cpu.loops import ADD, MUL, scalar_flat
from realexec.frontend import machine

SIDES = (32, 100, 200, 400, 700)  # float32 square arrays: elementwise kernels of ~1-200 us


def chains(nd, n: int, side: int, hold_s: float) -> None:
    xs = [nd.ones((side, side)), nd.ones((side, side))]
    nd.waitall()
    if hold_s:
        backend = nd._backend
        held = tuple(backend.vars[x.var] for x in xs)
        backend.engine.push(time.sleep, (), held, "cpu", "hold", (hold_s,))
    with nd.benchmark("loop"):
        for _ in range(n):
            xs = [x * 1.0001 + 0.5 for x in xs]
        nd.waitall()


def drain(engine: str, workers: int, n: int, side: int) -> tuple[float, float, float]:
    """(drain seconds, loop seconds without a hold, median kernel seconds)."""
    trace = realexec.run(chains, workers=workers, engine=engine, n=n, side=side,
                         hold_s=0.002 + 15e-6 * n)
    execs = [s for s in trace.spans_of(kind="exec") if s.name != "hold" and s.name != "ones"]
    span = max(s.end for s in execs) - min(s.start for s in execs)
    plain = realexec.run(chains, workers=workers, engine=engine, n=n, side=side, hold_s=0.0)
    return span, plain.regions["loop"], statistics.median(s.duration for s in execs)


@njit(nogil=True, cache=True)
def _bare(a, b, reps):
    for _ in range(reps):
        scalar_flat(MUL, a, 1.0001, b)
        scalar_flat(ADD, b, 0.5, a)


def bare_threads(n: int, side: int) -> float:
    """The machine's own speedup: the same kernels in a compiled loop on two plain threads
    against one (no engine, no Python between kernels)."""
    arrays = [(np.ones(side * side, np.float32), np.ones(side * side, np.float32))
              for _ in range(2)]
    _bare(*arrays[0], 1)
    start = time.perf_counter()
    _bare(*arrays[0], 2 * n)
    one = time.perf_counter() - start
    threads = [threading.Thread(target=_bare, args=(*arrays[i], n)) for i in range(2)]
    start = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return one / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=200, help="ops per chain")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(f"two chains of {args.ops} x 2 elementwise ops, {args.rounds} rounds; speedup of 2 "
          f"workers over 1, median (range)\n")
    start = time.perf_counter()
    rows = []
    for side in SIDES:
        row = {"side": side}
        for engine in ("native", "python"):
            drains, loops, kernels = [], [], []
            drain(engine, 2, args.ops, side)  # untimed: the pool caches its buffers (no faults)
            for r in range(args.rounds):
                busy(0.05)  # idle cores of a VM run slower for a while
                order = (1, 2) if r % 2 == 0 else (2, 1)  # neither always runs first
                runs = {w: drain(engine, w, args.ops, side) for w in order}
                (one, loop1, k1), (two, loop2, k2) = runs[1], runs[2]
                drains.append(one / two)
                loops.append(loop1 / loop2)
                kernels += [k1, k2]
            row[engine] = (drains, loops, statistics.median(kernels))
        row["bare"] = [bare_threads(args.ops, side) for _ in range(args.rounds)]
        rows.append(row)
        print_row(row)
    print(f"\nwall time {time.perf_counter() - start:.1f} s")


def fmt(ratios) -> str:
    return f"{statistics.median(ratios):5.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def print_row(row) -> None:
    if row["side"] == SIDES[0]:
        print(f"{'array':>9s} {'kernel':>8s} | {'native drain':>18s} {'native loop':>18s} | "
              f"{'python drain':>18s} {'python loop':>18s} | {'bare threads':>18s}")
    nat, py = row["native"], row["python"]
    print(f"{row['side']:4d}^2 f32 {nat[2] * 1e6:6.1f}us | {fmt(nat[0]):>18s} "
          f"{fmt(nat[1]):>18s} | {fmt(py[0]):>18s} {fmt(py[1]):>18s} | "
          f"{fmt(row['bare']):>18s}")


if __name__ == "__main__":
    main()
