"""Where an op's data sits, and what that costs: one kernel timed with its buffers in seven places.

    python benchmarks/cache_places.py [--rounds 3] [--rows 128 1024]

Calibration times each kernel op after op on the same buffers, so a profile's costs are those of
data in the caches nearest the core. In a run, an op's input was often written on the other
core, or long ago, and its output buffer comes back from the pool cold. This script times, with
no engine in between, on a thread pinned to one core (Linux, two cores or more):

- `relu`, the compiled kernel the engine's workers run, on a (rows, 2048) float32 array,
- the product (rows, 512) x (512, 2048), numpy's BLAS on one thread, as a worker runs it, and
- the compiled `normal` sampler filling a (rows, 512) array (it reads nothing),

with their data in each of these places:

- warm: the buffers of the op before (calibration's case);
- last level: input and output evicted from the core's own caches by 16 MiB of other traffic,
  but still in the last-level cache;
- output cold: each op writes the next of as many buffers as make 256 MiB, the rest as warm:
  the buffer a pool gives back after a long loop without a blocker;
- all cold: 1 GiB of other traffic before the op: its inputs, its output and the kernel's own
  state (BLAS's packing buffers, the page tables' entries) all out of the caches;
- input from the other core: the input written by a thread on the other core just before;
- after a product (relu only): the input written by the product just before, on this core;
  the two input places do not apply to the sampler;
- after a sleep: warm buffers, but the thread slept 10 ms before the op.

Each place prints its median over the repeats of each round (the median of the rounds, and
their range), its ratio to warm in the same round, and what the model adds for that place with
this machine's cached profile (`realexec.calibrate`): `asyncsim.model.caches` charges only bytes
beyond the last-level cache (`Profile.llc`) more, at `Profile.dram` (`caches.cold_price`: a
product pays them on top of its compute, a sampler nothing, its compute hiding the memory), and
the bytes of a sleep longer than `Profile.forget`, and `asyncsim.model.places` an input
that another core wrote at `Profile.foreign` per byte (`foreign_gemm` for a product); the
model's warm time is the profile's cost of the op. The range column is over the rounds: where
it is wide, the place is not one state (the other core's writes, read back, took 80 us in one
round and 228 us in another).
Then the last-level cache's edge as calibration measures it (`realexec.calibration.caches`:
`x + 1` on 8 MiB, the output cycling through k buffers, x warm), for k up to 65 (1 GiB gone
through between two touches of a buffer, where calibration stops at 33): each k's median op in
each of three sweeps, the fastest of them (calibration's statistic) and their median, and the
`llc` and `dram` that `caches.fit` derives from calibration's k and from every k.

Ratios are measured side by side in one run, with the machine; nothing is asserted. Units:
microseconds. Memory: about 1.1 GiB.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import os
import statistics
import threading
import time

import numpy as np

import asyncsim
from asyncsim.model.caches import cold_price
from asyncsim.model.places import foreign_price, part_of
from realexec.calibration import caches
from realexec.calibration.calibrate import calibrate
from realexec.cpu.kernels import KERNELS
from realexec.frontend import machine

COLS, INNER = 2048, 512
REPEATS = 15
LLC_TRAFFIC = 16 << 20  # bytes: beyond a core's own caches, within the last level
DRAM_TRAFFIC = 1 << 30  # bytes: beyond the last level (this VM's host reports 480 MiB)
SLEEP_S = 0.01
COLD_OUTPUTS = 256 << 20  # bytes of output buffers an op cycles through for "output cold"
PLACES = ("warm", "last level", "output cold", "all cold", "input from the other core",
          "after a product", "after a sleep")


def _touch(junk: np.ndarray, nbytes: int) -> None:
    """Write `nbytes` of `junk`: other traffic that evicts what was touched before it."""
    junk[: nbytes // junk.itemsize] += 1.0


def _on_other_core(fn, core: int) -> None:
    """Run `fn()` on a thread pinned to `core`, and wait for it."""
    def run():
        os.sched_setaffinity(0, {core})
        fn()
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def timed(op, place: str, a, out, usual, product, junk, other: int) -> float:
    """Seconds of one `op(a, out)` with its data put in `place` first. `usual`: the op's own
    output buffer, which `out` is but for "output cold" (the next of the cycled buffers)."""
    op(a, usual)  # its buffers touched: warm
    if place == "last level":
        _touch(junk, LLC_TRAFFIC)
    elif place == "all cold":
        _touch(junk, DRAM_TRAFFIC)
    elif place == "input from the other core":
        _on_other_core(lambda: a.fill(0.5), other)
    elif place == "after a product":
        product()
    elif place == "after a sleep":
        time.sleep(SLEEP_S)
    start = time.perf_counter_ns()
    op(a, out)
    return (time.perf_counter_ns() - start) * 1e-9


def model_extra(profile, op, cold: float) -> tuple[float, float]:
    """(the model's seconds for `op` warm, what `cold` bytes add: `asyncsim.model.caches`)."""
    cost = profile.rule(op)[1]
    warm = cost.time(op.nbytes, op.flops)
    return warm, cold * cold_price(op, cost, profile.dram) if profile.dram else 0.0


def program_ops(rows: int) -> dict:
    """The relu, the product and the sampler as the model sees them (nbytes and flops)."""
    def workload(nd):
        x = nd.random.normal(shape=(rows, INNER))
        w = nd.ones((INNER, COLS))
        h = nd.dot(x, w)
        nd.relu(h)
    with contextlib.redirect_stdout(io.StringIO()):
        program = asyncsim.record(workload)
    return {op.name: op for op in program.ops}


EDGE_ELEMENTS = 2**21  # calibration's sweep: 8 MiB float32 arrays
EDGE_BUFFERS = (1, 2, 3, 5, 9, 17, 33, 65)
CALIBRATION_MAX = 33  # the largest k calibration sweeps


def print_edge(rounds: int) -> None:
    found = caches.sweep(EDGE_ELEMENTS, EDGE_BUFFERS, rounds, sweeps=3)
    seconds = dict(zip(EDGE_BUFFERS, found["sweeps"], strict=True))
    op_bytes = 2 * EDGE_ELEMENTS * 4
    print("\nthe last-level cache's edge: x + 1 on 8 MiB, the output cycling through k buffers")
    print(f"{'k':>4s} {'gone through':>13s} {'fastest us':>11s} {'median us':>10s}")
    for k, values in seconds.items():
        print(f"{k:4d} {(k - 1) * op_bytes / 2**20:9.0f} MiB {min(values) * 1e6:11.1f} "
              f"{statistics.median(values) * 1e6:10.1f}")
    for label, ks, pick in (("calibration's (k <= 33, fastest)",
                             [k for k in EDGE_BUFFERS if k <= CALIBRATION_MAX], min),
                            ("every k, median", list(EDGE_BUFFERS), statistics.median)):
        found = caches.fit({"elements": EDGE_ELEMENTS, "buffers": ks,
                            "seconds": [pick(seconds[k]) for k in ks]})
        print(f"caches.fit on {label}: llc {found['llc'] / 2**20:.0f} MiB, "
              f"dram {found['dram'] / 1e9:.1f} GB/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, nargs="+", default=[128, 1024])
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) < 2:
        raise SystemExit("cache_places.py needs Linux and two cores or more")
    profile = calibrate()
    print(f"machine: {machine()}")
    print(f"profile: llc {profile.llc / 2**20:.0f} MiB, dram {profile.dram / 1e9:.1f} GB/s "
          f"(calibrated {profile.meta.get('date')})")
    os.sched_setaffinity(0, {cores[0]})
    from threadpoolctl import threadpool_limits
    threadpool_limits(1)
    junk = np.ones(DRAM_TRAFFIC // 4, np.float32)  # every page touched: no faults timed
    relu, normal = KERNELS["relu"], KERNELS["normal"]
    sampling = {"loc": 0.0, "scale": 1.0, "seed": 1}
    for rows in args.rows:
        x = np.random.default_rng(0).standard_normal((rows, INNER), dtype=np.float32)
        w = np.random.default_rng(1).standard_normal((INNER, COLS), dtype=np.float32)
        h = np.empty((rows, COLS), np.float32)
        out = np.empty((rows, COLS), np.float32)
        np.dot(x, w, out=h)

        def product(x=x, w=w, h=h):
            np.dot(x, w, out=h)

        def cycled(shape):
            """Views of COLD_OUTPUTS bytes of `junk`, one per output of `shape`, in turn: past
            the part that "last level" writes, and written early in an "all cold" pass."""
            n, first = int(np.prod(shape)), LLC_TRAFFIC // 4
            for start in itertools.cycle(range(first, first + COLD_OUTPUTS // 4 - n + 1, n)):
                yield junk[start:start + n].reshape(shape)

        sample = np.empty((rows, INNER), np.float32)
        kernels = {"relu": (lambda a, o: relu((a,), o, {}), h, out),
                   "dot": (lambda a, o, w=w: np.dot(a, w, out=o), x, h),
                   "normal": (lambda a, o: normal((), o, sampling), None, sample)}
        model_ops = program_ops(rows)
        for name, (op, a, o) in kernels.items():
            outputs = cycled(o.shape)
            model_op = model_ops[name]
            mib = model_op.nbytes / 2**20
            shape = (rows, INNER if name == "normal" else COLS)
            print(f"\n{name} on {shape} float32 ({mib:.2f} MiB read and written per op)")
            print(f"{'place':28s} {'us':>8s} {'range':>15s} {'x warm':>7s} {'model us':>9s} "
                  f"{'x warm':>7s}")
            rounds: dict[str, list[float]] = {p: [] for p in PLACES}
            for _ in range(args.rounds):
                for place in PLACES:
                    if (place == "after a product" and name != "relu"
                            or place == "input from the other core" and name == "normal"):
                        continue
                    times = [timed(op, place, a, next(outputs) if place == "output cold" else o,
                                   o, product, junk, cores[1]) for _ in range(REPEATS)]
                    rounds[place].append(statistics.median(times))
            warm_model, _ = model_extra(profile, model_op, 0.0)
            for place in PLACES:
                if not rounds[place]:
                    continue
                cold = {"output cold": o.nbytes, "all cold": model_op.nbytes}.get(place, 0.0)
                if place == "after a sleep" and 0 < profile.forget < SLEEP_S:  # forgotten
                    cold = model_op.nbytes
                _, extra = model_extra(profile, model_op, cold)
                if place == "input from the other core" and profile.dram:  # as Places prices it
                    extra += a.nbytes * foreign_price(profile, part_of(model_op))
                ratios = [t / w_ for t, w_ in zip(rounds[place], rounds["warm"], strict=True)]
                med = statistics.median(rounds[place])
                span = f"{min(rounds[place]) * 1e6:.1f}-{max(rounds[place]) * 1e6:.1f}"
                print(f"{place:28s} {med * 1e6:8.1f} {span:>15s} {statistics.median(ratios):7.2f} "
                      f"{(warm_model + extra) * 1e6:9.1f} {(warm_model + extra) / warm_model:7.2f}")
    junk = None  # its GiB freed: the sweep makes buffers of its own
    print_edge(args.rounds)


if __name__ == "__main__":
    main()
