"""Short kernels on two workers against one: the compiled engine, the Python one, bare threads
and the model, side by side for kernels of 5 to 200 us.

    python benchmarks/gil_overlap.py [--ops N] [--rounds R]

For each kernel duration d, the speedup of two workers over one (median and range over R
rounds, each round after a short busy spell, in alternating order):
- compiled: realexec's default engine, whose workers run the elementwise kernels in a compiled
  loop without the GIL. Two independent chains of in-place `x *= 1.0001; x += 0.5` on float32
  arrays sized so that one op takes about d (`size_for`), N ops in all, queued behind a gate op
  so that each worker has a backlog (`small_ops.drain`: first exec start to last exec end). The
  kernel column is the median op's measured time in these runs;
- python: the Python-thread engine (`engine="python"`), N independent ops whose kernel is a
  compiled loop of d seconds that drops the GIL (`realexec.calibration.gil.burn`), the frontend
  then waiting in `wait_all`: each op still costs its worker Python with the GIL around the
  kernel, which is why the chapters' backend is not written in Python;
- bare: the machine's own ratio with no engine. For the compiled engine the same kernels in one
  compiled loop, both chains on one thread against one on each of two (`small_ops.bare_threads`);
  for the Python engine `realexec.calibration.gil.overlap`: two threads calling the burn kernel
  with ~1.5 us of Python between calls against one;
- model: `asyncsim` on this machine's calibrated profile (`realexec.calibrate`, cached), the
  compiled engine's chains with the gate priced as a long first op of each chain, and every other
  op priced by the profile's own elementwise cost: nothing is fitted to what it is compared
  with. The model kernel column is that price: 1.9-2.8x the measured op here, as the profile
  prices an op by the bytes it moves with rates measured on ops that write a fresh output, and
  an op in place on one cached array moves them faster. The ratio does not depend on it.

Two workers may beat 2x: where the two chains' arrays together outgrow the cache and one alone
does not (on the 2-core AMD EPYC VM one op's time per byte jumps between two arrays of 5.5 and of
8.6 MiB), one worker alternating them streams from memory, where two workers, each mostly on
its own chain, may not. How two threads overlap
depends on where the OS puts them; the compiled engine steers a woken worker to an idle core
(`realexec.engine.placement`). Printed side by side, never asserted: timing belongs in
benchmarks, not tests.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import numpy as np
from small_ops import bare_steps, bare_threads, drain  # benchmarks/small_ops.py, beside this script

from asyncsim import predict
from asyncsim.model.profile import Cost
from realexec.calibration.calibrate import calibrate
from realexec.calibration.gil import Burner, burn, overlap
from realexec.calibration.steady import busy
from realexec.engine.core import Engine
from realexec.frontend import machine

DURATIONS = (5e-6, 17e-6, 30e-6, 50e-6, 100e-6, 200e-6)
PYTHON = 1.5e-6  # seconds of Python between kernel calls in `overlap`'s threads


def size_for(kernel: float) -> int:
    """The side of the float32 square arrays on which one op of the chains takes about `kernel`
    seconds, called bare: both chains' steps in one compiled loop, as a worker alternates them.
    A search, not a rate: the time per element jumps where the arrays outgrow a cache."""
    def op_time(side):
        xs = np.ones((2, side * side), np.float32)
        bare_steps(xs, 1)
        times = []
        for _ in range(9):
            start = time.perf_counter()
            bare_steps(xs, 1)
            times.append((time.perf_counter() - start) / 4)  # two ops on each of two chains
        return statistics.median(times)

    low, high = 8, 64
    while op_time(high) < kernel:
        low, high = high, high * 5 // 4
    for _ in range(8):
        mid = (low + high) // 2
        low, high = (mid, high) if op_time(mid) < kernel else (low, mid)
    return high


def python_drain(burner, kernel: float, workers: int, ops: int) -> float:
    """Seconds from the first exec start to the last exec end of `ops` independent burn
    kernels of `kernel` seconds on the Python engine."""
    n = burner.iterations(kernel)
    with Engine(workers=workers) as engine:
        warm = engine.new_var("warm")
        engine.push(burn, (), (warm,), args=(n, burner.flag), name="burn")
        engine.wait_all()
        since = len(engine.log)
        for var in [engine.new_var(f"v{i}") for i in range(ops)]:
            engine.push(burn, (), (var,), args=(n, burner.flag), name="burn")
        engine.wait_all()
        spans = [e for e in engine.log[since:] if e[1] == "exec"]
    return (max(e[5] for e in spans) - min(e[4] for e in spans)) * 1e-9


def gated(nd, n: int, side: int) -> None:
    """`small_ops.chains` as the model sees it: each chain's array comes from an op priced as
    the gate, so its `n` steps are all queued before any runs."""
    xs = [nd.ones((side, side)), nd.ones((side, side))]
    for _ in range(n):
        for x in xs:
            x *= 1.0001
            x += 0.5
    nd.waitall()


def model_drain(profile, workers: int, n: int, side: int) -> tuple[float, float]:
    """(drain seconds, median op seconds) of `gated` in the model, on `profile`."""
    hold = Cost(latency=1e-3 + 4 * n * 10 * profile.t1)  # far longer than pushing every op
    costs = {**profile.costs, "cpu:ones": hold}
    trace = predict(gated, dataclasses.replace(profile, costs=costs, workers=workers), n=n,
                    side=side)
    execs = [s for s in trace.spans_of(kind="exec") if s.name != "ones"]
    span = max(s.end for s in execs) - min(s.start for s in execs)
    return span, statistics.median(s.duration for s in execs)


def measure(kernel: float, steps: int, args, burner) -> dict:
    side = size_for(kernel)
    drain("native", 2, steps, side)  # untimed: warm code and caches
    compiled, python, kernels = [], [], []
    for r in range(args.rounds):
        busy(0.05)  # idle cores of a VM run slower for a while (realexec.calibration.steady)
        order = (1, 2) if r % 2 == 0 else (2, 1)  # neither always runs first
        runs = {w: drain("native", w, steps, side) for w in order}
        compiled.append(runs[1][0] / runs[2][0])
        kernels += [runs[1][2], runs[2][2]]
        times = {w: python_drain(burner, kernel, w, args.ops) for w in order}
        python.append(times[1] / times[2])
    # enough steps that starting two threads (~0.1 ms) is no part of the ratio
    bare = [bare_threads(max(steps, round(0.02 / (4 * kernel))), side)
            for _ in range(args.rounds)]
    return {"side": side, "kernel": statistics.median(kernels), "compiled": compiled,
            "python": python, "bare": bare}


def fmt(ratios) -> str:
    return f"{statistics.median(ratios):5.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=400, help="ops per drain")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds per duration")
    args = parser.parse_args()
    profile = calibrate()
    print(f"machine: {machine()}")
    print(f"profile: {profile.name}, calibrated {profile.meta.get('date')}: t1 "
          f"{profile.t1 * 1e6:.1f} us, wake {profile.wake * 1e6:.1f} us, hand-over "
          f"{profile.handover * 1e6:.1f} us, {profile.cores} cores")
    start = time.perf_counter()
    burner = Burner()
    threads = overlap(DURATIONS, calls=args.ops // 2, rounds=args.rounds, python=PYTHON)
    print(f"\nspeedup of two workers over one, {args.ops} ops, median (range) over "
          f"{args.rounds} rounds")
    print(f"{'kernel':>6s} | {'compiled engine':>16s} {'bare':>16s} {'model':>6s} "
          f"{'array':>9s} {'kernel':>7s} {'model':>6s} | {'python engine':>16s} {'bare':>5s}")
    steps = max(1, args.ops // 4)  # each step is two ops on each of two chains
    for d in DURATIONS:
        row = measure(d, steps, args, burner)
        one, op = model_drain(profile, 1, steps, row["side"])
        two, _ = model_drain(profile, 2, steps, row["side"])
        print(f"{d * 1e6:4.0f}us | {fmt(row['compiled']):>16s} {fmt(row['bare']):>16s} "
              f"{one / two:6.2f} {row['side']:4d}^2 f32 {row['kernel'] * 1e6:5.1f}us "
              f"{op * 1e6:4.1f}us | {fmt(row['python']):>16s} {threads[d]:5.2f}")
    print(f"\nwall time {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
