"""Convolution kernels vs an im2col + numpy BLAS convolution of the same shapes, side by side.

For each shape (LeNet's two convolutions at batch 256, and a ResNet-like 3x3 layer) and each of
the three convolutions (forward, data gradient, weight gradient), times realexec's CPU kernel
and a plain numpy im2col version (sliding windows copied into a column matrix, one BLAS product,
a transposed copy back to NCHW; col2im by strided adds over the kernel offsets), alternating
the two, and prints the best time of each with the spread (median / best) and the speed ratio
baseline / kernel (above 1: the kernel is faster). BLAS runs one thread for both, as a worker
of the engine runs it on a 2-core machine.

With `--cold`, instead: each of the three kernels on ResNet-18's 3x3 layers at batch 2 (as
calibration times them) and 16 (as the CPU scenarios run them), with its operands warm (the
same call repeated) and cold (a 512 MiB buffer written between calls), in GFLOP/s: what a
kernel priced by its flops alone, warm, leaves out when its data comes from main memory.

With `--frontend`, instead: each of the three kernels on the ResNet-like layer, run on another
thread (as a worker runs it) while this one waits for it, and while this one runs Python until
it is done (as a frontend issuing ops does), for the kernel as shipped (one compiled call, the
GIL taken to start and to return) and as Python over its chunks (`conv.BLAS` None, the GIL taken
back after every chunk): the second waits for the busy thread's switch interval at every chunk.

Usage: python benchmarks/conv.py [--repeats 7] [--dtype float32] [--blas-threads 1] [--quick]
                                 [--cold | --frontend]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from realexec.cpu import conv
from realexec.cpu.kernels import KERNELS, set_blas_threads
from realexec.cpu.warm import warmup

SHAPES = {
    "lenet conv1": ((256, 1, 28, 28), (6, 1, 5, 5), (1, 1), (2, 2)),
    "lenet conv2": ((256, 6, 14, 14), (16, 6, 5, 5), (1, 1), (0, 0)),
    "resnet 3x3": ((64, 64, 28, 28), (64, 64, 3, 3), (1, 1), (1, 1)),
}


def _columns(x, kernel, stride, pad):
    """(N*Ho*Wo, C*kh*kw) windows of the padded x, and (Ho, Wo)."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    win = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    n, c, ho, wo = win.shape[:4]
    return win.transpose(0, 2, 3, 1, 4, 5).reshape(n * ho * wo, c * kh * kw), (ho, wo)


def baseline_forward(x, w, stride, pad):
    cols, (ho, wo) = _columns(x, w.shape[2:], stride, pad)
    y = cols @ w.reshape(w.shape[0], -1).T
    return np.ascontiguousarray(y.reshape(x.shape[0], ho, wo, w.shape[0]).transpose(0, 3, 1, 2))


def baseline_grad_weight(x, g, stride, pad, weight_shape):
    cols, _ = _columns(x, weight_shape[2:], stride, pad)
    g_rows = g.transpose(0, 2, 3, 1).reshape(-1, g.shape[1])
    return (g_rows.T @ cols).reshape(weight_shape)


def baseline_grad_data(g, w, stride, pad, data_shape):
    (n, c, h, wd), (f, _, kh, kw), (sh, sw), (ph, pw) = data_shape, w.shape, stride, pad
    ho, wo = g.shape[2:]
    g_rows = g.transpose(0, 2, 3, 1).reshape(-1, f)
    cols = (g_rows @ w.reshape(f, -1)).reshape(n, ho, wo, c, kh, kw)
    gxp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw), g.dtype)
    for p in range(kh):
        for q in range(kw):
            gxp[:, :, p:p + sh * ho:sh, q:q + sw * wo:sw] += cols[..., p, q].transpose(0, 3, 1, 2)
    return gxp[:, :, ph:ph + h, pw:pw + wd].copy()


def _time(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _cases(data_shape, weight_shape, stride, pad, dtype, rng):
    x = rng.standard_normal(data_shape).astype(dtype)
    w = rng.standard_normal(weight_shape).astype(dtype)
    geo = {"kernel": weight_shape[2:], "stride": stride, "pad": pad}
    y = baseline_forward(x, w, stride, pad)
    g = rng.standard_normal(y.shape).astype(dtype)
    return [
        ("forward", "conv2d", (x, w), y, geo, lambda: baseline_forward(x, w, stride, pad)),
        ("grad data", "conv2d_grad_data", (g, w), x, {**geo, "data_shape": data_shape},
         lambda: baseline_grad_data(g, w, stride, pad, data_shape)),
        ("grad weight", "conv2d_grad_weight", (x, g), w, {**geo, "weight_shape": weight_shape},
         lambda: baseline_grad_weight(x, g, stride, pad, weight_shape)),
    ]


COLD_LAYERS = ((64, 28, 64, 1), (64, 28, 128, 2), (128, 14, 128, 1), (256, 7, 256, 1))  # C, H, F, s


def cold_caches(repeats: int, dtype: str) -> None:
    """Print warm and cold GFLOP/s of the three kernels on `COLD_LAYERS` at batch 2 and 16."""
    flush = np.ones(1 << 27, np.float32)  # 512 MiB: more than the last-level cache here
    rng = np.random.default_rng(0)
    print(f"{'layer (C, H, F, stride)':<24} {'op':<12} {'batch':>5} {'warm GF/s':>10} "
          f"{'cold GF/s':>10} {'cold/warm time':>15}")
    for c, h, f, stride in COLD_LAYERS:
        for batch in (2, 16):
            for op, name, inputs, like, attrs, _ in _cases(
                    (batch, c, h, h), (f, c, 3, 3), (stride, stride), (1, 1), dtype, rng):
                out = np.empty_like(like)
                kernel = KERNELS[name]
                side = (h + 2 - 3) // stride + 1  # the output's, padding 1
                flops = 2 * batch * f * c * 9 * side * side  # each of the three kernels
                kernel(inputs, out, attrs)
                times = {False: [], True: []}
                for _ in range(repeats):  # alternate, so a load change hits both alike
                    for cold in (False, True):
                        if cold:
                            np.add(flush, 1.0, out=flush)
                        times[cold] += _time(lambda: kernel(inputs, out, attrs), 1)  # noqa: B023
                warm, cold = (statistics.median(times[k]) for k in (False, True))
                print(f"{str((c, h, f, stride)):<24} {op:<12} {batch:5d} "
                      f"{flops / warm / 1e9:10.1f} {flops / cold / 1e9:10.1f} "
                      f"{cold / warm:15.2f}")


def _on_a_thread(kernel, inputs, out, attrs, busy: bool) -> float:
    """Seconds until `kernel` run on a new thread has returned, this thread waiting in join()
    or (`busy`) running Python meanwhile."""
    worker = threading.Thread(target=kernel, args=(inputs, out, attrs))
    start = time.perf_counter()
    worker.start()
    if busy:
        while worker.is_alive():
            pass  # Python, holding the GIL but for the switch interval
    worker.join()
    return time.perf_counter() - start


def busy_frontend(repeats: int, dtype: str) -> None:
    """Print each kernel's time beside a waiting and a busy frontend, compiled and chunked."""
    rng = np.random.default_rng(0)
    shipped = conv.BLAS
    print(f"ResNet-like layer {SHAPES['resnet 3x3'][0]}, median of {repeats}, "
          f"switch interval {1e3 * sys.getswitchinterval():.0f} ms")
    print(f"{'op':<12} {'kernel':<14} {'waiting ms':>11} {'busy ms':>9} {'busy/waiting':>13}")
    for op, name, inputs, like, attrs, _ in _cases(*SHAPES["resnet 3x3"], dtype, rng):
        out = np.empty_like(like)
        kernel = KERNELS[name]
        for label, blas in (("compiled", shipped), ("python chunks", None)):
            if label == "compiled" and blas is None:
                continue  # numpy's BLAS cannot be called by address here
            conv.BLAS = blas
            try:
                kernel(inputs, out, attrs)
                times = {False: [], True: []}
                for _ in range(repeats):  # alternate, so a load change hits both alike
                    for busy in (False, True):
                        times[busy].append(_on_a_thread(kernel, inputs, out, attrs, busy))
            finally:
                conv.BLAS = shipped
            waiting, busy = (statistics.median(times[k]) for k in (False, True))
            print(f"{op:<12} {label:<14} {waiting * 1e3:11.2f} {busy * 1e3:9.2f} "
                  f"{busy / waiting:13.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--blas-threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="LeNet shapes only, 3 repeats")
    parser.add_argument("--cold", action="store_true",
                        help="warm against cold caches on ResNet-18's 3x3 layers instead")
    parser.add_argument("--frontend", action="store_true",
                        help="a waiting against a busy frontend thread instead")
    args = parser.parse_args()
    repeats = 3 if args.quick else args.repeats
    set_blas_threads(args.blas_threads)
    warmup((args.dtype,))
    if args.cold:
        cold_caches(repeats, args.dtype)
        return
    if args.frontend:
        busy_frontend(repeats, args.dtype)
        return
    rng = np.random.default_rng(0)
    print(f"dtype {args.dtype}, BLAS threads {args.blas_threads}, best of {repeats} "
          f"(spread: median/best)")
    print(f"{'shape':<12} {'op':<12} {'kernel ms':>10} {'spread':>7} {'im2col ms':>10} "
          f"{'spread':>7} {'ratio':>6}")
    ratios = []
    for label, shapes in SHAPES.items():
        if args.quick and not label.startswith("lenet"):
            continue
        for op, name, inputs, like, attrs, baseline in _cases(*shapes, args.dtype, rng):
            out = np.empty_like(like)
            kernel = KERNELS[name]
            expected = baseline()
            kernel(inputs, out, attrs)
            scale = np.abs(expected).max()
            assert np.allclose(out, expected, rtol=1e-3, atol=1e-4 * scale), (label, op)
            ours, theirs = [], []
            for _ in range(repeats):  # alternate, so a load change hits both alike
                ours += _time(lambda: kernel(inputs, out, attrs), 1)  # noqa: B023
                theirs += _time(baseline, 1)
            best, base = min(ours), min(theirs)
            ratios.append(base / best)
            print(f"{label:<12} {op:<12} {best * 1e3:10.2f} "
                  f"{statistics.median(ours) / best:7.2f} {base * 1e3:10.2f} "
                  f"{statistics.median(theirs) / base:7.2f} {base / best:6.2f}")
    print(f"worst ratio {min(ratios):.2f} (at least 0.8 required), "
          f"geometric mean {statistics.geometric_mean(ratios):.2f}")


if __name__ == "__main__":
    main()
