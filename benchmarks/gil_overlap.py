"""Short nogil kernels on two threads: how much they overlap, measured and predicted.

    python benchmarks/gil_overlap.py [--ops N] [--rounds R]

For kernels of d seconds (a compiled loop that drops the GIL, `realexec.calibration.gil.burn`):
- engine: 2N independent ops pushed to the real engine, its frontend then waiting in `wait_all`,
  drained by one worker and by two (first exec start to last exec end); the speedup, median
  and range over R rounds;
- threads: `realexec.calibration.gil.overlap`, two bare threads calling the kernel against one
  (no engine, no waiting frontend);
- model: the same 2N ops drained by one and two CPU workers in `asyncsim`, with this machine's
  calibrated profile (`realexec.calibrate`, cached: hand-over, wake-ups, worker overhead, the
  frontend's spin, cores) and each op priced as the kernel (latency: the calibrated elementwise
  call; bytes time: d). Nothing is fitted to what it is compared with. The model's rule: a thread
  asleep on the GIL takes it only once it has stayed free a whole hand-over (`asyncsim.model.gil`).

How much two threads overlap depends on where the OS puts them: bare threads sometimes overlap
17 us kernels and sometimes do not, run to run; the engine's workers, with the frontend spinning
beside them, did not overlap kernels under 50 us in any run here. Printed side by side, never
asserted: timing belongs in benchmarks, not tests.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from asyncsim import predict
from asyncsim.model.profile import Cost
from realexec.calibration.calibrate import calibrate
from realexec.calibration.gil import Burner, burn, overlap
from realexec.calibration.steady import busy
from realexec.engine.core import Engine
from realexec.frontend import machine

DURATIONS = (5e-6, 17e-6, 30e-6, 50e-6, 100e-6, 200e-6)
PYTHON = 1.5e-6  # seconds of Python between kernel calls in `overlap`'s threads
ELEMENTS = 1024  # the model's ops: elementwise on this many float32s, their bytes time d


def engine_drain(burner, kernel: float, workers: int, ops: int) -> float:
    """Seconds from the first exec start to the last exec end of `ops` independent kernels."""
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


def pushed(nd, n=10):
    x = nd.ones((ELEMENTS,))
    x.wait_to_read()
    ys = [x + 1 for _ in range(n)]
    nd.waitall()
    return ys


def model_drain(profile, kernel: float, workers: int, ops: int) -> float:
    """`engine_drain` in the model: `ops` elementwise ops priced as the kernel, on `profile`."""
    nbytes = 2 * 4 * ELEMENTS
    latency = profile.costs["cpu:elementwise"].latency
    costs = {"cpu:*": Cost(latency=latency, bandwidth=nbytes / kernel)}
    trace = predict(pushed, dataclasses.replace(profile, costs=costs, workers=workers, meta={}),
                    n=ops)
    spans = [s for s in trace.spans_of(kind="exec") if s.name == "add_scalar"]
    return max(s.end for s in spans) - min(s.start for s in spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=200, help="ops per drain (calls per pair)")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds per duration")
    args = parser.parse_args()
    profile = calibrate()
    print(f"machine: {machine()}")
    print(f"profile: {profile.name}, calibrated {profile.meta.get('date')}: hand-over "
          f"{profile.handover * 1e6:.1f} us, dispatch {profile.dispatch * 1e6:.1f} us, wake "
          f"{profile.wake * 1e6:.1f} us, gil {profile.gil * 1e6:.1f} us, {profile.cores} cores")
    start = time.perf_counter()
    burner = Burner()
    threads = overlap(DURATIONS, calls=args.ops // 2, rounds=args.rounds, python=PYTHON)
    print(f"\nspeedup of two workers (threads) over one, {args.ops} kernels")
    print(f"{'kernel':>8s} {'engine (median, range)':>24s} {'threads':>8s} {'model':>7s}")
    for d in DURATIONS:
        ratios = []
        for _ in range(args.rounds):
            busy(0.05)  # idle cores of a VM run slower for a while (realexec.calibration.steady)
            ratios.append(engine_drain(burner, d, 1, args.ops)
                          / engine_drain(burner, d, 2, args.ops))
        model = (model_drain(profile, d, 1, args.ops) / model_drain(profile, d, 2, args.ops))
        print(f"{d * 1e6:6.0f}us {statistics.median(ratios):9.2f} ({min(ratios):.2f}-"
              f"{max(ratios):.2f})    {threads[d]:8.2f} {model:7.2f}")
    print(f"\nwall time {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
