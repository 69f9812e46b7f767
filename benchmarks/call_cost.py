"""What a call into compiled code costs the frontend, against the ring's stores and numpy's op,
side by side in one run.

    python benchmarks/call_cost.py [--rounds 5] [--calls 200000]

A push that calls compiled code once per op pays for the call; one that writes the op's record
into a ring pays for its stores instead (`push_parts.py`'s "ring" rows, `ring_reader.py`). This
prints, in nanoseconds per call (the lowest and the median over the rounds) and as a fraction of
numpy's `b = a + 1` on a (1, 2) array in the same round (median over the rounds):
- a compiled function's entry point (`realexec.engine.table.entry`: no dispatcher, which types
  every argument at every call) with one int argument (an address), with 8 and with 13 more
  ints and a float, and with an int64 array and 13 ints and a float, as the engine's push passes
  its table;
- the same 13-int call through numba's dispatcher;
- seven memoryview stores into an int64 array, the ring's record of an op and its tail.
The loop around each call is in each figure; an empty loop's time is printed for reference.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from numba import carray, njit, types

from realexec.engine.atomics import pointer
from realexec.engine.table import entry
from realexec.frontend import machine


@njit(nogil=True, cache=True)
def by_address(addr):
    s = carray(pointer(addr), 2, np.int64)
    s[0] += 1
    return s[0]


@njit(nogil=True, cache=True)
def by_address_8(addr, a, b, c, d, e, f, g, x):
    s = carray(pointer(addr), 2, np.int64)
    s[0] += a + b + c + d + e + f + g + np.int64(x)
    return s[0]


@njit(nogil=True, cache=True)
def by_address_13(addr, a, b, c, d, e, f, g, h, i, j, k, m, x):
    s = carray(pointer(addr), 2, np.int64)
    s[0] += a + b + c + d + e + f + g + h + i + j + k + m + np.int64(x)
    return s[0]


@njit(nogil=True, cache=True)
def by_array_13(s, a, b, c, d, e, f, g, h, i, j, k, m, x):
    s[0] += a + b + c + d + e + f + g + h + i + j + k + m + np.int64(x)
    return s[0]


def loops(words: np.ndarray) -> dict:
    """name -> a loop of n calls of that kind."""
    addr, i64, f64 = words.ctypes.data, types.int64, types.float64
    one = entry(by_address, (i64,))
    eight = entry(by_address_8, (*[i64] * 8, f64))
    thirteen = entry(by_address_13, (*[i64] * 13, f64))
    array = entry(by_array_13, (types.int64[::1], *[i64] * 12, f64))
    stores = memoryview(words)
    a = np.ones((1, 2), np.float32)

    def numpy_op(n):
        for _ in range(n):
            b = a + 1  # noqa: F841 -- the yardstick

    def empty(n):
        for _ in range(n):
            pass

    def call_1(n):
        for _ in range(n):
            one(addr)

    def call_8(n):
        for i in range(n):
            eight(addr, i, 2, 3, 4, 5, 6, 7, 1.0)

    def call_13(n):
        for i in range(n):
            thirteen(addr, i, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1.0)

    def call_array(n):
        for i in range(n):
            array(words, i, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1.0)

    def dispatcher_13(n):
        for i in range(n):
            by_address_13(addr, i, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1.0)

    def ring_7(n):
        for i in range(n):
            stores[8] = i
            stores[9] = 1
            stores[10] = 2
            stores[11] = 3
            stores[12] = 4
            stores[13] = 5
            stores[0] = i

    return {"numpy's b = a + 1": numpy_op, "empty loop": empty,
            "entry point: an address": call_1, "entry point: an address, 8 more": call_8,
            "entry point: an address, 13 more": call_13,
            "entry point: an array, 13 more": call_array,
            "dispatcher: an address, 13 more": dispatcher_13,
            "seven memoryview stores": ring_7}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    words = np.zeros(16, np.int64)
    kinds = loops(words)
    for run in kinds.values():
        run(1000)  # compiled (from the cache) and warm
    times: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(args.rounds):
        for name, run in kinds.items():
            start = time.perf_counter_ns()
            run(args.calls)
            times[name].append((time.perf_counter_ns() - start) / args.calls)
    print(f"machine: {machine()}")
    print(f"ns per call over {args.rounds} rounds of {args.calls}")
    print(f"{'':36s} {'lowest':>7s} {'median':>7s} {'x numpy':>8s}")
    for name, values in times.items():
        ratio = statistics.median(v / n for v, n in
                                  zip(values, times["numpy's b = a + 1"], strict=True))
        print(f"{name:36s} {min(values):7.0f} {statistics.median(values):7.0f} {ratio:8.2f}")


if __name__ == "__main__":
    main()
