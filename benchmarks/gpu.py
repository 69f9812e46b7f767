"""GPU efficiency: realexec's numba.cuda kernels against the device's own yardsticks, side by side.

Run on a GPU machine: `python benchmarks/gpu.py`. Under the CUDA simulator, only to check that
the script works: `NUMBA_ENABLE_CUDASIM=1 python benchmarks/gpu.py --quick` (tiny sizes; the
numbers mean nothing there). Prints the device and, per case, the best time of each side and
their ratio; writes everything as JSON to benchmarks/results/gpu-<device>[-quick].json.

Cases (each pair timed alternately on the same device, in this one run):
- add_scalar vs a device-to-device copy of the same bytes (read n floats, write n floats):
  copy_time / kernel_time is the fraction of copy bandwidth the kernel reaches (target >= 0.8);
  likewise a broadcast add (n/64, 64) + (64,), whose kernel maps indices with int64 div/mod;
- dot: the tiled shared-memory product vs CuPy's (cuBLAS, float32 without TF32) on the same
  device: cupy_time / kernel_time; skipped when cupy does not import;
- launch: a bare numba.cuda kernel launch (issue only, and launch + synchronize), against one
  GPU_KERNELS['add_scalar'] call on one element: the per-op overhead the engine pays;
- engine: `y = x + 1` on a one-element GPU array through realexec (push, then the GPU lane's
  launch): the frontend's seconds per op while the lane launches, and the period per op of a
  drained backlog, each against the bare launch of the same run;
- copies: host->device and device->host bandwidth from pinned vs pageable host memory.
Times are seconds per call (host clock around launches ended by a stream synchronize),
bandwidths bytes/second.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import numpy as np

from realexec.gpu import kernels as gpu


def best_times(calls, sync, repeat, inner=1):
    """Least wall time (s) per call of each function over `repeat` rounds of `inner` calls
    followed by `sync()`, sides alternating so both see the same noise; one warm round first."""
    for fn in calls:
        fn()
    sync()
    best = [float("inf")] * len(calls)
    for _ in range(repeat):
        for side, fn in enumerate(calls):
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            sync()
            best[side] = min(best[side], (time.perf_counter() - start) / inner)
    return best


def device_name() -> str:
    if gpu.on_simulator():
        return "simulator"
    name = gpu.cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def elementwise(pool, stream, n, repeat, inner):
    """add_scalar, and a broadcast add of a (n/k, k) matrix and a (k,) row, vs copying."""
    k = 64
    x = pool.alloc((n // k, k), np.float32)
    y = pool.alloc((n // k, k), np.float32)
    row = pool.alloc((k,), np.float32)
    gpu.GPU_KERNELS["ones"]((), x, {"shape": x.shape}, stream)
    gpu.GPU_KERNELS["ones"]((), row, {"shape": row.shape}, stream)
    add_scalar, add = gpu.GPU_KERNELS["add_scalar"], gpu.GPU_KERNELS["add"]
    kernel, broadcast, copy = best_times(
        [lambda: add_scalar((x,), y, {"scalar": 1.0}, stream),
         lambda: add((x, row), y, {}, stream),
         lambda: y.copy_to_device(x, stream=stream)],
        stream.synchronize, repeat, inner)
    moved = 2 * x.size * 4
    return {"n": x.size, "bytes_moved": moved, "kernel_s": kernel, "broadcast_s": broadcast,
            "copy_s": copy, "kernel_bandwidth": moved / kernel,
            "broadcast_bandwidth": moved / broadcast, "copy_bandwidth": moved / copy,
            "ratio_copy_over_kernel": copy / kernel,
            "ratio_copy_over_broadcast": copy / broadcast}


def matmul(pool, stream, n, repeat):
    row = {"n": n, "flops": 2.0 * n**3}
    a, b, c = (pool.alloc((n, n), np.float32) for _ in range(3))
    for seed, arr in enumerate((a, b)):
        gpu.GPU_KERNELS["uniform"]((), arr, {"shape": (n, n), "seed": seed}, stream)
    ours = gpu.GPU_KERNELS["dot"]
    (kernel,) = best_times([lambda: ours((a, b), c, {}, stream)], stream.synchronize, repeat)
    row.update(kernel_s=kernel, kernel_flop_rate=row["flops"] / kernel)
    try:
        import cupy
    except Exception as exc:  # no CuPy: report the kernel alone
        row["cupy"] = f"skipped ({type(exc).__name__}: {exc})"
        return row
    stream.synchronize()
    ca, cb, cc = (cupy.asarray(arr) for arr in (a, b, c))  # zero-copy views of our buffers
    ours_s, cupy_s = best_times(
        [lambda: ours((a, b), c, {}, stream), lambda: cupy.matmul(ca, cb, out=cc)],
        lambda: (stream.synchronize(), cupy.cuda.Device().synchronize()), repeat)
    row.update(kernel_s=ours_s, kernel_flop_rate=row["flops"] / ours_s, cupy_s=cupy_s,
               cupy_flop_rate=row["flops"] / cupy_s, ratio_cupy_over_kernel=cupy_s / ours_s)
    return row


def _empty():
    pass


def launches(pool, stream, calls, repeat):
    x = pool.alloc((1,), np.float32)
    y = pool.alloc((1,), np.float32)
    add = gpu.GPU_KERNELS["add_scalar"]
    empty = gpu.cuda.jit(_empty)

    def bare():
        empty[1, 1, stream]()

    def op():
        add((x,), y, {"scalar": 1.0}, stream)

    def bare_sync():
        bare()
        stream.synchronize()

    noop = lambda: None  # noqa: E731 -- each call already synchronised
    bare_s, op_s = best_times([bare, op], stream.synchronize, repeat, calls)
    (round_trip,) = best_times([bare_sync], noop, repeat, max(1, calls // 10))
    return {"bare_launch_s": bare_s, "op_launch_s": op_s, "launch_sync_s": round_trip,
            "ratio_op_over_bare": op_s / bare_s}


def engine(ops, repeat, bare_s):
    """Through the engine: seconds per op on the frontend, and per op with the lane drained."""
    import realexec

    issue, drained = float("inf"), float("inf")
    with realexec.session(workers=2) as nd:
        x = nd.ones((1,), ctx=nd.gpu(0))
        for _ in range(repeat + 1):
            nd.waitall()
            start = time.perf_counter()
            for _ in range(ops):
                y = x + 1
            issued = time.perf_counter()
            nd.waitall()
            end = time.perf_counter()
            issue = min(issue, (issued - start) / ops)
            drained = min(drained, (end - start) / ops)
        del y
    return {"issue_s": issue, "drained_period_s": drained, "ratio_issue_over_bare": issue / bare_s,
            "ratio_period_over_bare": drained / bare_s}


def copies(pool, pinned_pool, stream, nbytes, repeat, inner):
    n = nbytes // 4
    dev = pool.alloc((n,), np.float32)
    pinned = pinned_pool.alloc((n,), np.float32)
    pageable = np.ones(n, np.float32)
    pinned[:] = 1.0
    row = {"bytes": n * 4}
    for name, copy in [("h2d", lambda h: gpu.to_device(h, dev, stream)),
                       ("d2h", lambda h: gpu.to_host(dev, h, stream))]:
        fast, slow = best_times([lambda c=copy: c(pinned), lambda c=copy: c(pageable)],
                                stream.synchronize, repeat, inner)
        row.update({f"{name}_pinned_bandwidth": n * 4 / fast,
                    f"{name}_pageable_bandwidth": n * 4 / slow,
                    f"{name}_ratio_pinned_over_pageable": slow / fast})
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (for the simulator)")
    parser.add_argument("--out", type=Path, help="JSON path (default benchmarks/results/...)")
    args = parser.parse_args()
    if not gpu.available():
        raise SystemExit(gpu.device_error(0))
    q = args.quick
    pool, pinned, stream = gpu.DevicePool(0), gpu.PinnedPool(), gpu.cuda.stream()
    name = device_name()
    print(f"device: {name}" + ("  (CUDA simulator: numbers are meaningless)"
                               if gpu.on_simulator() else ""))
    results = {
        "device": name, "simulator": gpu.on_simulator(), "quick": q,
        "elementwise": elementwise(pool, stream, 256 if q else 1 << 26, 1 if q else 10,
                                   1 if q else 10),
        "dot": matmul(pool, stream, 16 if q else 4096, 1 if q else 5),
        "launch": launches(pool, stream, 3 if q else 2000, 1 if q else 5),
        "copies": copies(pool, pinned, stream, 4096 if q else 1 << 28, 1 if q else 5,
                         1 if q else 3),
    }
    results["engine"] = engine(3 if q else 2000, 1 if q else 3,
                               results["launch"]["bare_launch_s"])
    for case, row in results.items():
        if isinstance(row, dict):
            print(f"{case}:")
            for key, value in row.items():
                shown = f"{value:.4g}" if isinstance(value, float) else value
                print(f"  {key:32s} {shown}")
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    out = args.out or Path(__file__).parent / "results" / f"gpu-{slug}{'-quick' if q else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
