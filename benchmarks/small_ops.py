"""Small independent ops on two workers against one: the compiled engine, pinned or not, and the
Python one.

    python benchmarks/small_ops.py [--ops N] [--rounds R]

Exercise 3 of 8.3: "when ops are small enough, parallel execution on one device can help". Two
independent chains of `x *= 1.0001; x += 0.5` on float32 arrays of a few sizes (kernels of ~0.1
to ~40 us). Each round queues both chains behind a gate op (a Python op that writes both inputs
and returns once the frontend has pushed everything), so each worker has a backlog, then
measures the drain: first exec start to last exec end (after an untimed run, in alternating
order). In place, so each chain keeps one array: `x = x * 1.0001 + 0.5` queued behind a gate
allocates a fresh buffer for every op (none can be given back before the ops run), and two
workers then race for memory bandwidth, not for the engine (the machine's own ratio over 400
fresh buffers was 1.0-1.3 where it is 1.8 over two). A timed hold was too short: the frontend
was still pushing, with the GIL, when it ended.

For each engine ("native": compiled workers that take no GIL per op; "pinned": the same with
each worker pinned to a core, `engine="native-pinned"`; "python": Python worker threads) the
speedup of two workers over one, median and range over the rounds, next to the median kernel
time; "loop" times the whole loop as a user sees it (push and drain, no gate). "bare threads"
is the machine's own ratio: the same kernels in one compiled loop, both chains on one plain
thread against one chain on each of two, no engine at all. Then the loop's time per op with one
and two workers: a ratio may fall because the one-worker loop got faster, not the other slower.

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

SIDES = (32, 100, 200, 400, 700)  # float32 square arrays: elementwise kernels of ~0.1-40 us
ENGINES = {"native": "native", "pinned": "native-pinned", "python": "python"}


def chains(nd, n: int, side: int, hold: bool) -> None:
    xs = [nd.ones((side, side)), nd.ones((side, side))]
    nd.waitall()
    gate = threading.Event()
    if hold:
        backend = nd._backend
        held = tuple(backend.vars[x.var] for x in xs)
        backend.engine.push(gate.wait, (), held, "cpu", "hold", (60.0,))
    with nd.benchmark("loop"):
        for _ in range(n):
            for x in xs:
                x *= 1.0001
                x += 0.5
        gate.set()
        nd.waitall()


def drain(engine: str, workers: int, n: int, side: int) -> tuple[float, float, float]:
    """(drain seconds, loop seconds without a hold, median kernel seconds)."""
    trace = realexec.run(chains, workers=workers, engine=engine, n=n, side=side, hold=True)
    execs = [s for s in trace.spans_of(kind="exec") if s.name != "hold" and s.name != "ones"]
    span = max(s.end for s in execs) - min(s.start for s in execs)
    plain = realexec.run(chains, workers=workers, engine=engine, n=n, side=side, hold=False)
    return span, plain.regions["loop"], statistics.median(s.duration for s in execs)


@njit(nogil=True, cache=True)
def bare_steps(xs, reps):
    """`reps` steps of every chain in `xs` (rows), taken in turn, in place."""
    for _ in range(reps):
        for c in range(xs.shape[0]):
            scalar_flat(MUL, xs[c], 1.0001, xs[c])
            scalar_flat(ADD, xs[c], 0.5, xs[c])


def bare_threads(n: int, side: int) -> float:
    """The machine's own speedup: the same kernels in a compiled loop, both chains on one plain
    thread against a chain on each of two (no engine, no Python between kernels)."""
    xs = np.ones((2, side * side), np.float32)
    bare_steps(xs, 1)
    start = time.perf_counter()
    bare_steps(xs, n)
    one = time.perf_counter() - start
    threads = [threading.Thread(target=bare_steps, args=(xs[i:i + 1], n)) for i in range(2)]
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
        for engine in ENGINES:
            drains, loops, kernels, per_op = [], [], [], {1: [], 2: []}
            drain(ENGINES[engine], 2, args.ops, side)  # untimed: warm code and caches
            for r in range(args.rounds):
                busy(0.05)  # idle cores of a VM run slower for a while
                order = (1, 2) if r % 2 == 0 else (2, 1)  # neither always runs first
                runs = {w: drain(ENGINES[engine], w, args.ops, side) for w in order}
                (one, loop1, k1), (two, loop2, k2) = runs[1], runs[2]
                drains.append(one / two)
                loops.append(loop1 / loop2)
                kernels += [k1, k2]
                per_op[1].append(loop1 / (4 * args.ops))
                per_op[2].append(loop2 / (4 * args.ops))
            row[engine] = (drains, loops, statistics.median(kernels))
            row[engine + " per op"] = [statistics.median(per_op[w]) for w in (1, 2)]
        row["bare"] = [bare_threads(args.ops, side) for _ in range(args.rounds)]
        rows.append(row)
        print_row(row)
    print("\nloop time per op, us, median with 1 / 2 workers:")
    for row in rows:
        cells = "   ".join(f"{e} {row[e + ' per op'][0] * 1e6:5.1f} / "
                           f"{row[e + ' per op'][1] * 1e6:5.1f}" for e in ENGINES)
        print(f"{row['side']:4d}^2 f32   {cells}")
    print(f"\nwall time {time.perf_counter() - start:.1f} s")


def fmt(ratios) -> str:
    return f"{statistics.median(ratios):5.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def print_row(row) -> None:
    if row["side"] == SIDES[0]:
        heads = "".join(f"{e + ' drain':>18s} {e + ' loop':>18s} | " for e in ENGINES)
        print(f"{'array':>9s} {'kernel':>8s} | {heads}{'bare threads':>18s}")
    cells = "".join(f"{fmt(row[e][0]):>18s} {fmt(row[e][1]):>18s} | " for e in ENGINES)
    kernel = row["native"][2] * 1e6
    print(f"{row['side']:4d}^2 f32 {kernel:6.1f}us | {cells}{fmt(row['bare']):>18s}")


if __name__ == "__main__":
    main()
