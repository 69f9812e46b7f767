"""Model against measurement on a GPU machine: the chapters' GPU scenarios, predicted from this
machine's calibrated profile (CPU and GPU microbenchmarks) and run on the real engine.

    python benchmarks/gpu_accuracy.py [--quick] [--workers W] [--force] [--only NAME ...]
        [--ops N] [--profile-out FILE]
    NUMBA_ENABLE_CUDASIM=1 python benchmarks/gpu_accuracy.py --quick   # checks the script only

1. `realexec.calibrate(workers, gpu=True)`: the CPU's microbenchmarks and gpu(0)'s
   (`realexec.calibration.gpu`: kernel backlogs, copies both ways, the host's side), never a
   scenario; cached (`--force` measures again);
2. every scenario that needs no more GPUs than this machine has: recorded and simulated on that
   profile, run on the engine as benchmarks/accuracy.py does (a warm-up run, then the median of
   `--repeat` runs with the garbage collector paused), and the two tabled side by side, then
   (`--ops`) the seconds per span kind and op name (or lane) of each, the largest first;
3. a summary (`asyncsim compare --all`'s): each scenario's total and peak-memory error, the
   median and maximum of the total's.
The device's name, the GPU part of the profile (launch latency, bandwidths, the products' rate,
the copies, a blocker's wake-up) and every table are printed. Under the simulator the numbers
only show that the script runs.
"""

from __future__ import annotations

import argparse
import sys
import time

from accuracy import measure, predict  # benchmarks/accuracy.py, beside this script
from breakdown import per_name  # benchmarks/breakdown.py

from asyncsim.lab import scenarios
from asyncsim.lab.compare import compare, table
from asyncsim.lab.jobs import summary_table
from realexec.calibration.calibrate import calibrate
from realexec.frontend import machine
from realexec.gpu import kernels as gpu
from realexec.gpu.device import SIM_GPUS


def gpu_count() -> int:
    return SIM_GPUS if gpu.on_simulator() else len(gpu.cuda.gpus)


def describe(profile) -> str:
    """The GPU part of the profile in one paragraph."""
    elem, dot = profile.costs["gpu:elementwise"], profile.costs["gpu:dot"]
    up, down = profile.links["cpu->gpu"], profile.links["gpu->cpu"]
    host = profile.meta["gpu"]["host"]
    lines = [f"gpu: {profile.meta['gpu']['device']}",
             f"  elementwise: {elem.latency * 1e6:.1f} us per op (the launch-bound period) + "
             f"bytes at {elem.bandwidth / 1e9:.0f} GB/s; dot {dot.peak / 1e12:.2f} TFLOP/s",
             f"  cpu->gpu {up.bandwidth / 1e9:.1f} GB/s (+{up.latency * 1e6:.0f} us), "
             f"gpu->cpu {down.bandwidth / 1e9:.1f} GB/s (+{down.latency * 1e6:.0f} us)",
             f"  blocker wake-up after a GPU op {host['t3_gpu'] * 1e6:.1f} us (CPU t3 "
             f"{profile.t3 * 1e6:.1f} us); frontend per GPU op {host['issue_gpu_op'] * 1e6:.1f} "
             f"us (t1 {profile.t1 * 1e6:.1f} us); asnumpy readback "
             f"{host['readback']['bandwidth'] / 1e9:.1f} GB/s",
             f"  gpu_issue {profile.gpu_issue * 1e6:.1f} us, gpu_wait {profile.gpu_wait * 1e6:.1f} "
             f"us, gpu_settle {profile.gpu_settle * 1e6:.1f} us (a GPU round trip "
             f"{host['roundtrip'] * 1e6:.1f} us with wait_to_read, "
             f"{host['roundtrip_waitall'] * 1e6:.1f} us with waitall)"]
    for name in ("conv2d", "conv2d_grad_data", "conv2d_grad_weight"):
        rates = [c.peak for key, c in profile.costs.items()
                 if key.startswith(f"gpu:{name}@") and c.peak]
        if rates:
            lines.append(f"  {name}: {min(rates) / 1e12:.2f}-{max(rates) / 1e12:.2f} TFLOP/s "
                         f"over {len(rates)} layer geometries")
    return "\n".join(lines)


def op_table(pred, meas, top: int) -> str:
    """Seconds per span kind and op name (exec) or lane (the frontend's issue and wait, copies),
    predicted and measured, the `top` by measured time."""
    p, m = per_name(pred), per_name(meas)
    keys = sorted(set(p) | set(m), key=lambda k: -m.get(k, (0, 0.0))[1])[:top]
    lines = [f"{'span':32s} {'n':>6s} {'pred ms':>10s} {'meas ms':>10s}"]
    for key in keys:
        (_, sp), (n, sm) = p.get(key, (0, 0.0)), m.get(key, (0, 0.0))
        lines.append(f"{key[0] + ' ' + str(key[1]):32s} {n:6d} {sp * 1e3:10.1f} "
                     f"{sm * 1e3:10.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (for the simulator)")
    parser.add_argument("--workers", type=int, default=None, help="CPU workers (default: cores)")
    parser.add_argument("--force", action="store_true", help="calibrate the CPU again")
    parser.add_argument("--only", nargs="*", default=None, help="scenario names")
    parser.add_argument("--repeat", type=int, default=3, help="measured runs per scenario")
    parser.add_argument("--ops", type=int, default=8, help="after each scenario, its seconds "
                        "per span kind and op name, predicted and measured, for this many")
    parser.add_argument("--profile-out", default=None, help="save the profile as JSON here "
                        "(benchmarks/results/profile-*.json: an H100 machine's)")
    args = parser.parse_args()
    if not gpu.available():
        raise SystemExit(gpu.device_error(0))

    start = time.perf_counter()
    profile = calibrate(workers=args.workers, quick=args.quick, force=args.force,
                        progress=sys.stderr.isatty(), gpu=True)
    if args.profile_out:
        profile.save(args.profile_out)
    print(f"machine: {machine()}; {profile.workers} CPU workers; calibrated in "
          f"{time.perf_counter() - start:.1f} s")
    print(describe(profile))
    have = gpu_count()
    names = args.only or [n for n in scenarios.names() if 0 < scenarios.get(n).num_gpus <= have]
    summary = []
    for name in names:
        sc = scenarios.get(name)
        params = sc.kwargs(args.quick, measure=True)
        began = time.perf_counter()
        pred = predict(sc, profile, params)
        meas, _, _ = measure(sc, profile.workers, params, args.repeat)
        rows = [r for r in compare(pred, meas) if r.name not in sc.measured_only]
        print()
        print(table(rows, title=f"{name} ({sc.section}) [{time.perf_counter() - began:.1f} s]"))
        if args.ops:
            print(op_table(pred, meas, args.ops))
        summary.append((name, rows))
        sys.stdout.flush()
    if summary:
        print("\n" + summary_table(summary))
    print(f"wall time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
