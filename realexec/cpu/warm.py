"""Compile before anything is timed: every CPU kernel and the worker loop, once per process.

`warm_all(dtypes)` runs each compiled loop once on tiny arrays, so that numba compiles it (or
loads it from its on-disk cache) here and not inside the first real op. Loading takes a fraction
of a second; compiling takes about a minute on a 2-core VM (63 s of wall time and 115 s of CPU
on the Intel VM, the compiled worker loop 31-41 s of it), which a fresh clone pays once. When
the first loop it runs was not in the cache (`_cold`), the training kernels (convolutions,
pooling, softmaxes, batch norm: over half the compile time) are compiled by a second Python
process at the same time (`python -c`, not multiprocessing, so no user script is re-imported),
which fills the same cache; this process then loads them. If that process fails, this one
compiles them itself: the worst case is the serial time. `warmup(dtypes, part)` is the serial
core, for one part or all.
Units: seconds where said.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from realexec.cpu import loops
from realexec.cpu.kernels import KERNELS

PARTS = ("elementwise", "training")


def warmup(dtypes=("float32",), part: str = "all") -> None:
    """Run every kernel of `part` ("elementwise", "training" or "all") once on tiny arrays of
    each dtype (one call per compiled loop: the other ops reuse these loops)."""
    if part not in (*PARTS, "all"):
        raise ValueError(f"part must be one of {PARTS + ('all',)}, got {part!r}")
    for dtype in dtypes:
        if part in ("elementwise", "all"):
            for name, inputs, out, attrs in _elementwise_calls(dtype):
                KERNELS[name](inputs, out, attrs)
        if part in ("training", "all"):
            for name, inputs, out, attrs in _training_calls(dtype):
                KERNELS[name](inputs, out, attrs)


def warm_all(dtypes=("float32", "float64")) -> None:
    """Every kernel of `dtypes` and the worker loop compiled or loaded; the training kernels in
    a second process when numba's cache is cold (see the module docstring)."""
    from realexec.cpu.worker import warm_native

    helper = _compile_elsewhere(dtypes) if _cold(dtypes[0]) else None
    try:
        warmup(dtypes, "elementwise")
        warm_native()
        if helper is not None:
            helper.wait()
    finally:
        if helper is not None and helper.poll() is None:  # interrupted: it must not outlive us
            helper.kill()
    warmup(dtypes, "training")  # loaded from the cache the helper filled (or compiled here)


def _cold(dtype: str) -> bool:
    """Whether numba compiled (not loaded) the first elementwise loop: the cache is cold."""
    x = np.ones(2, dtype)
    KERNELS["add"]((x, x), x, {})
    stats = getattr(loops.binary_flat, "stats", None)  # None: numba's JIT is disabled
    return stats is not None and sum(stats.cache_misses.values()) > 0


def _compile_elsewhere(dtypes) -> subprocess.Popen | None:
    root = str(Path(__file__).resolve().parents[2])  # where this realexec is imported from
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p))
    code = f"from realexec.cpu.warm import warmup; warmup({tuple(dtypes)!r}, 'training')"
    try:
        return subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:  # no process to spare: compile here
        return None


def _elementwise_calls(dtype):
    """(name, inputs, out, attrs) of one call per compiled loop of creation, arithmetic,
    reductions and rows."""
    matrix = np.ones((2, 3), dtype)
    row = np.ones(3, dtype)
    scalar = np.empty((), dtype)
    return [
        ("add", (matrix, matrix), matrix, {}),
        ("add", (matrix, row), matrix, {}),
        ("add_scalar", (matrix,), matrix, {"scalar": 1.0}),
        ("uniform", (), matrix, {"low": 0.0, "high": 1.0, "seed": 0}),
        ("normal", (), matrix, {"loc": 0.0, "scale": 1.0, "seed": 0}),
        ("sum", (matrix,), scalar, {}),
        ("norm", (matrix,), scalar, {}),
        ("dot", (row, row), scalar, {}),
        ("setitem", (matrix, row[:1]), matrix, {"start": 0, "stop": 1}),
    ]


def _training_calls(dtype):
    """(name, inputs, out, attrs) of one call per compiled loop of the training ops."""
    images = np.ones((2, 1, 3, 3), dtype)  # two images: the convolutions' batched path
    weight = np.ones((1, 1, 2, 2), dtype)
    maps = np.ones((2, 1, 2, 2), dtype)
    channel = np.ones(1, dtype)
    logits = np.ones((2, 3), dtype)
    label = np.zeros(2, dtype)
    per_example = np.ones(2, dtype)
    geometry = {"kernel": (2, 2), "stride": (1, 1), "pad": (0, 0)}
    pool = {**geometry, "pool_type": "max"}
    axis1 = {"axis": 1}
    bn = {"eps": 1e-5}
    return [
        ("conv2d", (images, weight), maps.copy(), geometry),
        ("conv2d_grad_data", (maps, weight), images.copy(),
         {**geometry, "data_shape": images.shape}),
        ("conv2d_grad_weight", (images, maps), weight.copy(),
         {**geometry, "weight_shape": weight.shape}),
        ("pool2d", (images,), maps.copy(), pool),
        ("pool2d_grad", (images, maps), images.copy(), pool),
        ("softmax", (logits,), logits.copy(), axis1),
        ("softmax_grad", (logits, logits), logits.copy(), axis1),
        ("softmax_ce", (logits, label), per_example.copy(), {}),
        ("softmax_ce_grad", (logits, label, per_example), logits.copy(), {}),
        ("batch_norm", (images, channel, channel), images.copy(), bn),
        ("batch_norm_grad", (images, channel, images), images.copy(), bn),
        ("batch_norm_grad_gamma", (images, images), channel.copy(), bn),
        ("batch_norm_infer", (images, channel, channel, channel, channel), images.copy(), bn),
        ("bn_update", (channel.copy(), images), channel.copy(), {"momentum": 0.9, "stat": "var"}),
        ("sigmoid", (logits,), logits.copy(), {}),
        ("relu_grad", (logits, logits), logits.copy(), {}),
        ("sum_axis", (logits,), per_example.copy(), {"axis": (1,), "keepdims": False}),
        ("argmax", (logits,), per_example.copy(), {"axis": (1,), "keepdims": False}),
        ("sgd_update", (logits.copy(), logits), logits.copy(), {"lr": 0.1, "rescale": 1.0,
                                                                "wd": 0.0}),
    ]
