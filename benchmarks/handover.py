"""What handing a ready op to a live worker costs the push: the compiled push of `y = x + 1` into
a table that a worker drains on the other core, against the same push into a table that no other
thread touches, side by side in one run.

    python benchmarks/handover.py [--rounds 7] [--ops 512]

The pushes are made from compiled code (`push_burst`), so no Python is in the figures: each is the
time of one `realexec.engine.table.push_unary` call (the op recorded, its predecessor linked, queued
under the table's lock, a worker woken or steered where one must be, the push's end stamped), read
by the clock around it, in nanoseconds. Between two pushes the loop waits `pace` ns, as a frontend
does while its Python builds the next op (about 2000 ns in a `y = x + 1` loop); the ops have no
predecessor, write one small buffer, and the worker runs each in well under that.
- "alone": a table of the engine's layout with no thread but this one; after each burst the same
  thread takes and completes the ops it pushed (untimed), as a worker would;
- "live": a `NativeEngine` with one worker, which takes each op as it comes, runs it and completes
  it while the next ones are pushed: the lock word, the lane's queue, the op's slot and the
  counters move between the two cores.
The difference is the hand-over's price on this machine, which a push pays however its Python is
written (`push_parts.py`'s "one call, into the engine" pays it inside its one call). Printed: the
median ns per push of each round's bursts, the lowest and median over the rounds, and "live" over
"alone" round by round, with the machine. Not a target: a measurement for the design of the push.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from numba import njit

from realexec.cpu.loops import ADD
from realexec.cpu.native_ops import SCALAR
from realexec.engine import layout, ready
from realexec.engine import table as t
from realexec.engine.atomics import now_ns
from realexec.engine.native import NativeEngine
from realexec.frontend import machine

PACES = (0, 1000, 2000)  # ns between two pushes


@njit(nogil=True, cache=True)
def push_burst(s, first, k, pace, a, out, times):
    """Push ops `first` .. `first + k - 1` (`y = x + 1` on two float32 at `a`, into `out`), `pace`
    ns apart; each push's ns into `times`."""
    cap = s[layout.H_CAP]
    last = now_ns()
    for i in range(k):
        while now_ns() - last < pace:
            pass
        token = first + i
        start = now_ns()
        t.push_unary(s, token & (cap - 1), token, SCALAR, ADD, 0, 2, a, out, 1.0, -1, token, 0,
                     start)
        last = now_ns()
        times[i] = last - start


@njit(nogil=True, cache=True)
def drain(s, k):
    """Take and complete `k` queued ops on this thread (a table no worker serves)."""
    for _ in range(k):
        slot = ready.pop(s, 0)
        ready.complete(s, slot, 0)


def per_push(kind: str, engine, state, pace: int, ops: int, x, y) -> float:
    """Median ns per push over bursts of `ops` pushes (the table's capacity at most)."""
    a, out = x.ctypes.data, y.ctypes.data
    times = np.empty(ops, np.int64)
    medians = []
    for _ in range(4):
        if kind == "live":
            first = engine._next
            push_burst(state, first, ops, pace, a, out, times)
            engine._next = first + ops  # so that its wait_all waits for them
            engine.wait_all()
        else:
            first = state[layout.H_NEXT]
            push_burst(state, first, ops, pace, a, out, times)
            drain(state, ops)
        medians.append(float(np.median(times)))
    return statistics.median(medians)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ops", type=int, default=512)
    args = parser.parse_args()
    x, y = np.ones(2, np.float32), np.empty(2, np.float32)
    engine = NativeEngine(workers=1, trace=False)
    if args.ops > engine.cap // 2:
        raise SystemExit(f"--ops at most {engine.cap // 2} (the engine's table holds {engine.cap})")
    _, alone = layout.new_state(engine.cap, 0)
    rows = {(kind, pace): [] for pace in PACES for kind in ("alone", "live")}
    try:
        for pace in PACES:  # compile and warm both
            for kind in ("alone", "live"):
                per_push(kind, engine, engine.state if kind == "live" else alone, pace, 64, x, y)
        for _ in range(args.rounds):
            for pace in PACES:
                for kind in ("alone", "live"):
                    state = engine.state if kind == "live" else alone
                    rows[kind, pace].append(per_push(kind, engine, state, pace, args.ops, x, y))
    finally:
        engine.close()
    print(f"machine: {machine()}")
    print(f"one push of y = x + 1 into the compiled table, ns (median of each round's bursts of "
          f"{args.ops}), over {args.rounds} rounds")
    print(f"{'pace ns':>8s} {'alone low':>10s} {'median':>7s} {'live low':>9s} {'median':>7s} "
          f"{'live/alone':>11s}")
    for pace in PACES:
        alone_ns, live_ns = rows["alone", pace], rows["live", pace]
        ratio = statistics.median(b / a for a, b in zip(alone_ns, live_ns, strict=True))
        print(f"{pace:8d} {min(alone_ns):10.0f} {statistics.median(alone_ns):7.0f} "
              f"{min(live_ns):9.0f} {statistics.median(live_ns):7.0f} {ratio:11.2f}")


if __name__ == "__main__":
    main()
