"""Simulator throughput: asyncsim.simulate against raw SimPy in the same run, and the max-plus
solver on ten million ops.

    python benchmarks/simulator.py [--ops 1000000] [--solver-ops 10000000]

1. raw SimPy: one process yielding `env.timeout` N times -- SimPy's own ceiling, events per second;
2. asyncsim.simulate on the chapter's loop (`y = x + 1` N times, then waitall) with constant costs
   (Profile.ideal): simulated ops per second, and the ratio to raw SimPy events per second (how
   many bare SimPy events one simulated op costs). Recording the program is timed separately;
3. asyncsim.model.analytic.pipeline on M ops with random costs and blockers: ops per second.
Times are wall-clock seconds of the best of `--repeat` runs; the machine is printed first.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import simpy

import asyncsim
from asyncsim.model import analytic


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"SimPy {simpy.__version__}, numpy {np.__version__}, {platform.system()}")


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def raw_simpy(n: int) -> None:
    env = simpy.Environment()

    def ticker():
        timeout = env.timeout
        for _ in range(n):
            yield timeout(1e-6)

    env.process(ticker())
    env.run()


def loop(nd, n=1000):
    x = nd.ones((1, 2))
    x.wait_to_read()
    with nd.benchmark("loop"):
        for _ in range(n):
            y = x + 1  # noqa: F841 -- rebinding y frees the previous result, as in the chapter
        nd.waitall()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--solver-ops", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print(f"machine: {machine()}")

    raw = best(lambda: raw_simpy(args.ops), args.repeat)
    raw_rate = args.ops / raw
    print(f"raw SimPy: {args.ops:,} timeouts in {raw:.2f} s = {raw_rate:,.0f} events/s")

    start = time.perf_counter()
    program = asyncsim.record(loop, n=args.ops)
    recorded = time.perf_counter() - start
    ops = len(program.ops)
    print(f"record: {ops:,} ops ({len(program.instrs):,} instructions) in {recorded:.2f} s")

    profile = asyncsim.Profile.ideal(t1=10e-6, t2=1e-3, t3=20e-6)
    traces = []
    sim = best(lambda: traces.append(asyncsim.simulate(program, profile)), args.repeat)
    sim_rate = ops / sim
    predicted = traces[-1].regions["loop"]
    expected = float(analytic.async_time(args.ops, 10e-6, 1e-3, 20e-6))
    print(f"asyncsim.simulate: {ops:,} ops in {sim:.2f} s = {sim_rate:,.0f} ops/s "
          f"(loop {predicted:.6f} s simulated, closed form {expected:.6f} s)")
    print(f"ratio: simulate runs {sim_rate / raw_rate:.3f} ops per raw SimPy event, i.e. one "
          f"simulated op costs {raw_rate / sim_rate:.1f} bare SimPy events")

    rng = np.random.default_rng(0)
    n = args.solver_ops
    t1 = rng.uniform(1e-6, 1e-4, n)
    t2 = rng.uniform(1e-6, 1e-4, n)
    sync = rng.random(n) < 0.01
    solve = best(lambda: analytic.pipeline(t1, t2, 20e-6, sync=sync), args.repeat)
    print(f"analytic.pipeline: {n:,} ops in {solve:.2f} s = {n / solve:,.0f} ops/s "
          f"({n / solve / sim_rate:,.0f}x simulate's rate)")


if __name__ == "__main__":
    main()
