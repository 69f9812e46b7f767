"""Kernel efficiency: realexec's CPU kernels against numpy doing the same work, side by side.

Run: `python benchmarks/kernels.py [--n 2000] [--repeat 30]`. Prints the machine, BLAS info and,
per case, the best time of each side and the ratio numpy_time / kernel_time (1.0 = as fast as
numpy; above 1 = faster). `add_scalar` is also compared with `np.copyto` of the same bytes (read n*n
floats, write n*n floats): that ratio is the fraction of copy bandwidth the kernel reaches
(target >= 0.8). `dot` targets >= 0.9 of np.dot. Times are seconds, single-threaded kernels on
the calling thread; BLAS uses whatever thread count it found (printed) unless --blas-threads.
A `dispatch` case times a 1-element op, i.e. the per-call overhead the engine pays. The "in
place" cases write into their input (`x += 1`), whose loops vectorise only since they get a
path of their own (`realexec.cpu.loops`).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import threadpoolctl

from realexec.cpu import kernels as cpu
from realexec.cpu.warm import warmup


def best_times(kernel, reference, repeat):
    """Least wall time (s) of each of two calls over `repeat` rounds, calls alternating so that
    both sides see the same machine noise; one untimed warm call each first."""
    kernel()
    reference()
    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for side, fn in enumerate((kernel, reference)):
            start = time.perf_counter()
            fn()
            best[side] = min(best[side], time.perf_counter() - start)
    return best


def per_call_times(kernel, reference, calls=20000, rounds=5):
    """Least over `rounds` of the mean time (s) of one call in `calls` back-to-back calls."""
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for side, fn in enumerate((kernel, reference)):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            best[side] = min(best[side], (time.perf_counter() - start) / calls)
    return best


def cases(n, dtype):
    """(label, kernel call, numpy call) triples; each pair writes the same output."""
    rng = np.random.default_rng(0)
    x = rng.random((n, n)).astype(dtype)
    y = rng.random((n, n)).astype(dtype)
    bias = rng.random(n).astype(dtype)
    out = np.empty_like(x)
    scalar_out = np.empty((), dtype)
    k = cpu.KERNELS
    add_scalar = ("add_scalar", lambda: k["add_scalar"]((x,), out, {"scalar": 1.0}))
    tiny = np.ones(1, dtype)
    tiny_out = np.empty_like(tiny)
    return [
        (*add_scalar, lambda: np.add(x, 1, out=out)),
        ("add_scalar vs copyto", add_scalar[1], lambda: np.copyto(out, x)),
        # in place (x += 1, x += y: out is the first input), written into a copy of x
        ("add_scalar in place", lambda: k["add_scalar"]((out,), out, {"scalar": 1.0}),
         lambda: np.add(out, 1, out=out)),
        ("add (same shape)", lambda: k["add"]((x, y), out, {}), lambda: np.add(x, y, out=out)),
        ("add in place", lambda: k["add"]((out, y), out, {}), lambda: np.add(out, y, out=out)),
        ("add (n,n)+(n,)", lambda: k["add"]((x, bias), out, {}),
         lambda: np.add(x, bias, out=out)),
        ("relu", lambda: k["relu"]((x,), out, {}), lambda: np.maximum(x, 0, out=out)),
        ("copy", lambda: k["copy"]((x,), out, {}), lambda: np.copyto(out, x)),
        ("sum", lambda: k["sum"]((x,), scalar_out, {}), lambda: np.sum(x)),
        ("norm", lambda: k["norm"]((x,), scalar_out, {}), lambda: np.linalg.norm(x)),
        ("dot", lambda: k["dot"]((x, y), out, {}), lambda: np.dot(x, y, out=out)),
        ("dispatch add_scalar (1 elem)",
         lambda: k["add_scalar"]((tiny,), tiny_out, {"scalar": 1.0}),
         lambda: np.add(tiny, 1, out=tiny_out)),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="square matrix side")
    parser.add_argument("--repeat", type=int, default=30, help="timed calls per case")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--blas-threads", type=int, default=None)
    args = parser.parse_args()

    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"cpu_count={os.cpu_count()}, python {platform.python_version()}, numpy {np.__version__}")
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    if args.blas_threads:
        cpu.set_blas_threads(args.blas_threads)
    for info in threadpoolctl.threadpool_info():
        print(f"threadpool: {info.get('internal_api')} {info.get('version')} "
              f"threads={info.get('num_threads')} arch={info.get('architecture')} "
              f"{os.path.basename(info.get('filepath', ''))}")
    warmup((args.dtype,))
    print(f"\n{args.n}x{args.n} {args.dtype}, best of {args.repeat}")
    print(f"{'case':32s} {'kernel s':>11s} {'numpy s':>11s} {'numpy/kernel':>12s}")
    for label, kernel, reference in cases(args.n, args.dtype):
        if label.startswith("dispatch"):
            kernel_s, numpy_s = per_call_times(kernel, reference)
        else:
            kernel_s, numpy_s = best_times(kernel, reference, args.repeat)
        print(f"{label:32s} {kernel_s:11.3e} {numpy_s:11.3e} {numpy_s / kernel_s:12.2f}")


if __name__ == "__main__":
    main()
