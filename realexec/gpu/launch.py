"""What every module of GPU kernels shares: the launch shape, the simulator's lock, flat views,
reductions along rows (a block per row, or a thread per short row) and per-stream scratch
buffers (`StreamScratch`).

Kernels use grid-stride loops, so a launch's grid is capped whatever the size: THREADS per block
and at most MAX_BLOCKS blocks for elementwise kernels, PART_BLOCKS for kernels that give each
block a row, a channel or a partial sum. Under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) a
block is 32 Python threads and grids have 2 blocks, and the simulator runs one kernel at a
time (numba's limitation), so every launch goes through `launch`, which takes a lock there.

Importing this module loads numba.cuda (or finds it missing) but compiles nothing: kernels
compile for each dtype on their first launch. Units: threads, blocks, elements.
"""

from __future__ import annotations

import threading
from math import prod

import numpy as np

from realexec.gpu.runtime import cuda, device_error, on_simulator

if cuda is not None:
    from numba.cuda import float64

    jit = cuda.jit
else:  # kernels stay plain functions; `launch` reports why no GPU can run them
    float64 = None

    def jit(**_):
        return lambda fn: fn

SIM = on_simulator()
THREADS = 32 if SIM else 256  # threads per block (a power of two: the tree reductions halve it)
MAX_BLOCKS = 2 if SIM else 4096  # grid cap of elementwise kernels (enough to fill an H100)
PART_BLOCKS = 2 if SIM else 1024  # grid cap of random, reduction and per-row kernels

_SIM_LOCK = threading.Lock()


def launch(kernel, grid, block, stream, *args) -> None:
    """Enqueue kernel[grid, block] on stream (0 or None: the default stream)."""
    if cuda is None:
        raise RuntimeError(device_error(0))
    if SIM:
        with _SIM_LOCK:
            kernel[grid, block, stream or 0](*args)
    else:
        kernel[grid, block, stream or 0](*args)


def blocks(n: int, cap: int) -> int:
    """Blocks of THREADS threads for n elements (one each), at least 1 and at most cap."""
    return max(1, min(-(-n // THREADS), cap))


def row_blocks(rows: int) -> int:
    """Blocks for a kernel that gives each block one row (channel, output) at a time."""
    return max(1, min(rows, PART_BLOCKS))


def flat(arr):
    """arr as one dimension, made once per array object (pooled arrays are reused)."""
    view = arr.__dict__.get("_flat")
    if view is None:
        view = arr.__dict__["_flat"] = arr.reshape(arr.size)
    return view


# Reductions along rows (channels, outputs): a kernel either gives each row to a block, whose
# THREADS lanes stride along it and combine partial values through a shared float64 buffer of
# THREADS entries, or, when rows are shorter than a block (`alone`), gives each row to one
# thread. `lanes_of(alone)` says which rows and positions a thread takes; `lane_sum` / `lane_max`
# are called by every thread of the block with its partial value and return the row's total
# (they end on a barrier, so the buffer can be reused at once). `alone` is the same for a whole
# launch, so no barrier is ever reached by part of a block.
def split_rows(rows: int, length: int) -> tuple[int, bool]:
    """(blocks, alone) for `rows` rows of `length` positions each."""
    alone = length < THREADS
    return (blocks(rows, MAX_BLOCKS) if alone else row_blocks(rows)), alone


# A reduction of few rows of many values (a batch norm's channels, a bias gradient's outputs)
# would leave most of the GPU idle with a block per row: each row is cut in parts, a block each,
# aiming at TARGET_BLOCKS blocks in all, each part at least PART_ELEMENTS long.
TARGET_BLOCKS = PART_BLOCKS
PART_ELEMENTS = 4096


def parts_of(rows: int, length: int) -> int:
    """Parts to cut each of `rows` rows of `length` values into (1: a block per row)."""
    return max(1, min(TARGET_BLOCKS // max(rows, 1), length // PART_ELEMENTS))


@jit(device=True, cache=True)
def lanes_of(alone):
    """(first row, row step, first position, position step) of this thread."""
    if alone:
        return cuda.grid(1), cuda.gridsize(1), 0, 1
    return cuda.blockIdx.x, cuda.gridDim.x, cuda.threadIdx.x, THREADS


@jit(device=True, cache=True)
def lane_sum(buf, lane, value, alone):
    if alone:
        return value
    buf[lane] = value
    cuda.syncthreads()
    step = THREADS // 2
    while step > 0:
        if lane < step:
            buf[lane] += buf[lane + step]
        cuda.syncthreads()
        step //= 2
    total = buf[0]
    cuda.syncthreads()
    return total


@jit(device=True, cache=True)
def lane_max(buf, lane, value, alone):
    if alone:
        return value
    buf[lane] = value
    cuda.syncthreads()
    step = THREADS // 2
    while step > 0:
        if lane < step and buf[lane] < buf[lane + step]:
            buf[lane] = buf[lane + step]
        cuda.syncthreads()
        step //= 2
    top = buf[0]
    cuda.syncthreads()
    return top


class StreamScratch:
    """Per stream, `slots` growable device buffers for an op's intermediate arrays.

    Ops on one stream run in order, so every op may use the same buffers; different slots never
    alias, so one op can hold several at once. A buffer grows to the largest request and is
    kept; a replaced buffer is freed by numba, whose cudaFree waits for the work using it.
    Typed views are cached per buffer (a new device array object costs numba ~10 us to type)."""

    def __init__(self, slots: int):
        self._slots = slots
        self._lock = threading.Lock()
        self._streams: dict[int, tuple] = {}  # id(stream) -> (stream, [buffer or None, ...])

    def view(self, stream, slot: int, shape: tuple, dtype):
        """A C-contiguous (shape, dtype) array over buffer `slot` of `stream`."""
        with self._lock:
            entry = self._streams.get(id(stream))
            if entry is None or entry[0] is not stream:  # holding the stream keeps its id
                entry = self._streams[id(stream)] = (stream, [None] * self._slots)
        buffers = entry[1]
        nbytes = max(1, prod(shape) * dtype.itemsize)
        held = buffers[slot]
        if held is None or held.size < nbytes:
            held = buffers[slot] = cuda.device_array(nbytes, np.uint8)
        views = held.__dict__.setdefault("_views", {})
        key = (shape, dtype.str)
        arr = views.get(key)
        if arr is None:
            if len(views) >= 8:
                views.clear()
            arr = views[key] = held[:prod(shape) * dtype.itemsize].view(dtype).reshape(shape)
        return arr


# The scratch of the GPU ops, by slot (an op's use ends before the next op's on its stream):
# dot's transposed copies of a (0) and b (1); the convolutions' im2col columns or col2im input
# (2), their products or gathered gradients (3), the weight's transpose (0) and a later chunk's
# weight gradient (1); the float64 partial sums of batch norm and sum_axis (0).
SCRATCH = StreamScratch(slots=4)
F64 = np.dtype(np.float64)  # partial sums
