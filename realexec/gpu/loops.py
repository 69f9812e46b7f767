"""numba.cuda kernels under the elementwise, fill, random and reduction ops of the GPU op table
`realexec.gpu.kernels` (which launches them; `dot` is `realexec.gpu.matmul`'s).

Kernels use grid-stride loops over flattened, C-contiguous arrays (1-d device views: the table
passes `launch.flat` views), so a launch's grid is capped (THREADS per block, at most MAX_BLOCKS
blocks) whatever the size. Dtypes: float32 and float64 (kernels compile once per dtype, on first
use). Units: elements; op codes and modes are ints, seeds uint64. Choices to know:
- elementwise: one kernel per arity (`_fill_kernel`, `_scalar_kernel`, `_binary_kernel`,
  `_broadcast_kernel`), the op picked by a code (a uniform branch, free next to the memory
  traffic); `_broadcast_kernel` indexes 4 dims, each input through its own element strides (0
  where it is broadcast).
- sum/mean/norm accumulate in float64 for both dtypes: per-block shared-memory tree sums
  (`_reduce_partial_kernel`), then a second one-block pass into a 0-d output
  (`_reduce_final_kernel`; deterministic; no atomics).
- uniform/normal: numba.cuda.random's xoroshiro128+; each thread seeds its own state from
  (seed, thread index) with splitmix64 inside the kernel, so a launch costs no host work and no
  copy. Values are in float64 then rounded (normal uses numba's Box-Muller); reproducible for a
  seed, shape and device kind, and not numpy's stream. Distinct seeds give unrelated streams,
  not provably disjoint ones.
Assumptions: blocks have exactly THREADS threads (a power of two: the tree sums, `launch.lane_sum`,
halve it) and `_reduce_final_kernel` runs as one block; the states buffer of `_random_kernel`
holds a state per thread of its grid; kernels are launched with the stream's device current.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from realexec.gpu.launch import THREADS, jit, lane_sum
from realexec.gpu.runtime import cuda

if cuda is not None:
    from numba.cuda import float64, uint64

    with warnings.catch_warnings():  # under the simulator numba's own RNG module warns
        warnings.filterwarnings("ignore", "The keyword argument 'nopython=False'")
        from numba.cuda.random import (  # noqa: F401 -- dtype: the table allocates the states
            xoroshiro128p_dtype,
            xoroshiro128p_normal_float64,
            xoroshiro128p_uniform_float64,
        )


ADD, SUB, MUL, DIV, RSUB, RDIV, MAX, RIGHT, EQUAL = range(9)
SUM, MEAN, NORM = range(3)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@jit(device=True, cache=True)
def _apply(code, x, y):
    if code == ADD:
        return x + y
    if code == SUB:
        return x - y
    if code == MUL:
        return x * y
    if code == DIV:
        return x / y
    if code == RSUB:
        return y - x
    if code == RDIV:
        return y / x
    if code == MAX:
        return y if x < y else x  # NaN stays NaN, as np.maximum
    if code == EQUAL:
        return x == y  # a bool unifies with x's type: 1.0 or 0.0 in the dtype
    return y


@jit(cache=True)
def _fill_kernel(out, value):
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[i] = value


@jit(cache=True)
def _scalar_kernel(out, a, s, code):
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[i] = _apply(code, a[i], s)


@jit(cache=True)
def _binary_kernel(out, a, b, code):
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[i] = _apply(code, a[i], b[i])


@jit(cache=True)
def _broadcast_kernel(out, a, b, code, shape, a_strides, b_strides):
    n1, n2, n3 = shape[1], shape[2], shape[3]
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        i3 = i % n3
        rest = i // n3
        i2 = i1 = 0
        if n2 != 1:  # int64 division is slow on GPUs: skip it for the padding dims
            i2 = rest % n2
            rest = rest // n2
        if n1 != 1:
            i1 = rest % n1
            rest = rest // n1
        i0 = rest
        ia = i0 * a_strides[0] + i1 * a_strides[1] + i2 * a_strides[2] + i3 * a_strides[3]
        ib = i0 * b_strides[0] + i1 * b_strides[1] + i2 * b_strides[2] + i3 * b_strides[3]
        out[i] = _apply(code, a[ia], b[ib])


@jit(device=True, cache=True)
def _splitmix64(z):
    z = (z ^ (z >> uint64(30))) * uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> uint64(27))) * uint64(0x94D049BB133111EB)
    return z ^ (z >> uint64(31))


@jit(cache=True)
def _random_kernel(out, states, seed, offset, scale, normal):
    t = cuda.grid(1)
    # Thread t takes positions 2t+1 and 2t+2 of seed's splitmix64 sequence: distinct threads
    # never share a position, and splitmix64 is a bijection, so no two states are equal.
    z = seed + uint64(2 * t + 1) * _GOLDEN
    states[t]["s0"] = _splitmix64(z)
    states[t]["s1"] = _splitmix64(z + _GOLDEN)
    for i in range(t, out.shape[0], cuda.gridsize(1)):
        if normal:
            v = xoroshiro128p_normal_float64(states, t)
        else:
            v = xoroshiro128p_uniform_float64(states, t)
        out[i] = offset + scale * v


@jit(cache=True)
def _reduce_partial_kernel(a, partials, square):
    buf = cuda.shared.array(THREADS, float64)
    tid = cuda.threadIdx.x
    acc = 0.0
    for i in range(cuda.grid(1), a.shape[0], cuda.gridsize(1)):
        v = float64(a[i])
        acc += v * v if square else v
    total = lane_sum(buf, tid, acc, False)
    if tid == 0:
        partials[cuda.blockIdx.x] = total


@jit(cache=True)
def _reduce_final_kernel(partials, nparts, out, mode, count):
    buf = cuda.shared.array(THREADS, float64)
    tid = cuda.threadIdx.x
    acc = 0.0
    for i in range(tid, nparts, THREADS):
        acc += partials[i]
    total = lane_sum(buf, tid, acc, False)
    if tid == 0:
        if mode == MEAN:
            total = total / count
        elif mode == NORM:
            total = math.sqrt(total)
        out[0] = total

