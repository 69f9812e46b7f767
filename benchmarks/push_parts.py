"""What a push's parts cost: the `y = x + 1` loop with a part replaced by a stand-in that costs
next to nothing, side by side in one run, with the machine.

    python benchmarks/push_parts.py [--rounds 16] [--ops 5000]

The loop is `benchmarks/overhead.py`'s "nd per op, async + drain" (a (1, 2) array, one worker of
the compiled engine draining while the frontend pushes), and the same loop in sync mode (each op
run inside its push, which needs no dependency analysis: only the deletions ask it). Each round
runs every variant once, in turn, each in a fresh session after an untimed warm-up; the figures
are microseconds per op, the median and the lowest over the rounds (this machine's speed moves
from second to second). What each variant replaces:

- "pool accounting": the CPU pool's acquire and release by a list of free arrays per shape (no
  lock, no live bytes, no samples), its buffers' addresses registered as the pool's are;
- "dependency analysis": the engine's `Deps` by one that finds no predecessor and no user (right
  for this loop's ops, whose input was written long before; its deletions give buffers back at
  once, which is wrong in general and harmless here);
- both, and both with a var object of four slots instead of eleven.

"numpy" is numpy's own `b = a + 1` on the same array, and "nd alone" the frontend over a backend
that does nothing (`overhead.NullBackend`). The gap between "both + small var" and "nd alone" is
what stays in Python per op even with the pool and the dependency analysis compiled: the push's
and the deletion's own code, the compiled call, the frontend's records. Not a target: a map of
where the time goes.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from overhead import NullBackend, nd_per_op

import realexec
import realexec.frontend as frontend
from asyncsim.nd.frontend import ND
from realexec.engine.deps import Var
from realexec.engine.memory import ADDRESSES


class FreeLists:
    """Arrays by shape, reused as they come back: a pool with no accounting."""

    def __init__(self):
        self.free: dict = {}
        self.raws: list = []

    def acquire(self, shape, dtype):
        spare = self.free.get(shape)
        if spare:
            return spare.pop()
        raw = np.empty(512, np.uint8)
        ADDRESSES[id(raw)] = raw.ctypes.data
        self.raws.append(raw)
        return np.ndarray(shape, dtype, raw)

    def release(self, array):
        spare = self.free.get(array.shape)
        if spare is None:
            spare = self.free[array.shape] = []
        spare.append(array)

    def close(self):
        for raw in self.raws:
            ADDRESSES.pop(id(raw), None)


class NoDeps:
    """No predecessors, no users."""

    finished = None

    def add(self, token, reads, writes):
        return []

    def drop(self, var):
        return []

    def last_write(self, var):
        return None


class SmallVar:
    """The fields of a var that the compiled engine's fast path reads."""

    __slots__ = ("name", "data", "ptr", "failure")

    def __init__(self, name, data=None):
        self.name, self.data, self.ptr, self.failure = name, data, 0, None


VARIANTS = {"as shipped": "as shipped", "pool accounting": "without pool accounting",
            "dependency analysis": "without dependency analysis",
            "both": "without both", "both + small var": "without both, a small var"}


def per_op(variant: str, n: int, mode: str = "async") -> float:
    """Seconds per op of the loop with `variant`'s stand-ins, in `mode`."""
    lists = FreeLists()
    frontend.Var = SmallVar if variant == "both + small var" else Var
    try:
        with realexec.session(workers=1, mode=mode) as nd:
            backend = nd._backend
            if variant in ("pool accounting", "both", "both + small var"):
                backend._acquire_cpu, backend._release_cpu = lists.acquire, lists.release
            if variant in ("dependency analysis", "both", "both + small var"):
                backend.engine._deps = NoDeps()
            nd_per_op(nd, n // 5, drain=True)
            return nd_per_op(nd, n, drain=True)
    finally:
        frontend.Var = Var
        lists.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--ops", type=int, default=5000)
    args = parser.parse_args()
    print(f"machine: {frontend.machine()}")
    names = ("numpy", "nd alone", *VARIANTS, *[f"{v} (sync)" for v in VARIANTS])
    times: dict[str, list[float]] = {name: [] for name in names}
    a = np.ones((1, 2), np.float32)
    for _ in range(args.rounds):
        start = time.perf_counter()
        for _ in range(args.ops):
            b = a + 1  # noqa: F841 -- numpy's own op, the yardstick
        times["numpy"].append((time.perf_counter() - start) / args.ops)
        times["nd alone"].append(nd_per_op(ND(NullBackend()), args.ops))
        for variant in VARIANTS:
            times[variant].append(per_op(variant, args.ops))
            times[f"{variant} (sync)"].append(per_op(variant, args.ops, "sync"))
    print(f"y = x + 1 on a (1, 2) array, us per op over {args.rounds} rounds of {args.ops} ops")
    print(f"{'':38s} {'median':>7s} {'lowest':>7s}")
    for name, values in times.items():
        variant, sync = name.removesuffix(" (sync)"), name.endswith(" (sync)")
        label = VARIANTS.get(variant, variant) + (", sync mode" if sync else "")
        print(f"{label:38s} {statistics.median(values) * 1e6:7.2f} {min(values) * 1e6:7.2f}")


if __name__ == "__main__":
    main()
