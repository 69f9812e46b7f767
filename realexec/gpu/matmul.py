"""The GPU matrix product: numba.cuda kernels for `dot` and the choice between them.

`matmul_launch(n, m)` gives (kernel, grid, block) for an n x m product of 2-d arrays; the
kernel is called as kernel(a, b, out, zero) with `zero` of the arrays' dtype (float32 or
float64; each accumulates in that dtype). Two kernels:
- `_matmul_kernel`: register-blocked, a BM x BN tile of the output per block of MM_THREADS
  threads, each a TM x TN micro-tile in registers, k staged BK at a time in double-buffered
  shared memory; a 1-d grid of any number of tiles;
- `_small_matmul_kernel`: one output per thread in TILE x TILE blocks, for products of fewer
  than MIN_TILES output tiles, where the tiled kernel would leave most SMs idle.
`transposed(a, stream, slot)` gives a's transpose for `dot`'s transpose_a/transpose_b: a large
operand is copied by a tiled transpose kernel into a per-stream scratch buffer, so the product
reads C-contiguous operands as usual; a small one (where the extra launch would cost more than
it saves) is a strided view: the kernels index any strides (numba compiles a separate
specialisation for non-contiguous operands, so C-contiguous products keep their code) but load
it with uncoalesced strides.
Under the CUDA simulator (a Python thread per CUDA thread) the tiles are small and MIN_TILES is
2, so tiny test products go through both kernels. Units: elements; times in the comments are
an H100's (benchmarks/gpu.py).
"""

from __future__ import annotations

from realexec.gpu.launch import PART_BLOCKS, SCRATCH, jit, launch
from realexec.gpu.runtime import cuda, on_simulator

if cuda is not None:
    from numba.cuda import uint64


_SIM = on_simulator()
# dot (see _matmul_kernel): a block computes a BM x BN output tile with MM_THREADS threads,
# each a TM x TN micro-tile, reading k BK at a time. The simulator gets small tiles (it runs a
# Python thread per CUDA thread) whose shape still makes two VEC-runs per micro-tile side, and
# a MIN_TILES that sends its tiny test products through both kernels.
if _SIM:
    BM = BN = 32
    BK = 4
    MIN_TILES = 2
    TILE = 8
    COPY_MIN = 64
else:
    BM = BN = 128
    BK = 8
    MIN_TILES = 64  # fewer BM x BN tiles than this: _small_matmul_kernel (see matmul_launch)
    TILE = 16  # _small_matmul_kernel: TILE x TILE threads per block, one output each
    COPY_MIN = 1 << 16  # transposed operands this large are copied (see `transposed`)
TRANSPOSE_ROWS = TILE // 4  # _transpose_kernel: each thread moves 4 values of a tile
TILE_PAD = TILE + 1  # row length of its shared tile (a constant: numba needs one for shapes)
TM = TN = 8
VEC = 4  # a thread's rows (cols) come in runs of VEC adjacent ones: one vector shared load each
A_ROW = BM + 4  # row length of the transposed A tile: the padding spreads its stores over banks
GROUP = 8  # tile rows walked together, so blocks running at once share panels of A and B in L2
ROW_STEP = BM * VEC // TM  # a thread's runs of rows lie ROW_STEP apart (cols: COL_STEP)
COL_STEP = BN * VEC // TN
MM_THREADS = (BM // TM) * (BN // TN)
A_TILE = BK * A_ROW  # elements of one shared buffer of A (transposed, padded) and of B
B_TILE = BK * BN
A_TILES, B_TILES = 2 * A_TILE, 2 * B_TILE  # double-buffered
A_LOADS = BM * BK // MM_THREADS  # elements of A (and of B) each thread brings per k-step
B_LOADS = BK * BN // MM_THREADS
ALIGN = None if _SIM else 16  # bytes; lets NVVM vectorise the fragment loads (no simulator support)


# Why this tiling (numbers for 4096^3 float32 on an H100: FP32 non-tensor peak ~60 TFLOP/s,
# HBM ~3 TB/s): the product is 2 * 4096^3 = 137 GFLOP, 2.3 ms at peak, while its compulsory
# traffic (read A and B, write C: 201 MB) takes 0.07 ms, so it is compute-bound once the
# on-chip traffic per FMA is small. The 16x16 one-output-per-thread tile (_small_matmul_kernel)
# does 1 FMA per 2 shared loads and 8 FMAs per global (L2) load: 7.7 TFLOP/s. Here a thread's
# TM x TN = 8x8 micro-tile takes 64 FMAs per 16 values read from shared memory (4 FMAs per
# value; 6 load instructions, most of them 128-bit), and a block's 128x128 tile takes 64 FMAs
# per value read from global memory (a k-step reads 4 KB of each operand for 131072 FMAs), so
# the FMA pipes, not shared memory or L2, set the pace. Resources (ptxas, sm_90, no spills):
# 161 registers per thread for float32, ~250 for float64 (one 256-thread block per SM); shared
# memory 16.6 KB (float32) or 33.3 KB (float64), under the 48 KB static limit, which is why
# BK = 16 (as fast in float32) is not used. Measured on an H100 at 4096^3: 26.3 TFLOP/s in
# float32 (cuBLAS without TF32: 50.8; the 16x16 kernel: 7.8), 15.7 in float64 (cuBLAS: 60).
@jit(cache=True)
def _matmul_kernel(a, b, out, zero):
    """out = a @ b for 2-d C-contiguous arrays, one BM x BN tile of out per block.

    Launched with a 1-d grid of ceil(n/BM) * ceil(m/BN) blocks of MM_THREADS threads. Thread
    (ty, tx) owns rows g*ROW_STEP + ty*VEC + v and cols g*COL_STEP + tx*VEC + v (v < VEC):
    runs of VEC adjacent values, so a warp's fragment reads are vector loads without bank
    conflicts, and its stores to out are coalesced. k is staged BK at a time in two shared
    buffers: the global loads of step t+1 are in flight while step t is computed, and one
    barrier per step suffices. A is stored transposed (k-major) so a thread's rows are
    adjacent. Loads outside the arrays read `zero`; stores outside out are skipped.

    Shared tiles are flat and indexed with uint64: numba wraps negative signed indices, and
    that select per access kept NVVM from folding addresses into immediates and vectorising."""
    n, k = a.shape
    m = b.shape[1]
    tile_cols = (m + BN - 1) // BN
    tile_rows = (n + BM - 1) // BM
    per_group = GROUP * tile_cols
    block = cuda.blockIdx.x
    first_row = (block // per_group) * GROUP
    group_rows = min(tile_rows - first_row, GROUP)
    row0 = (first_row + (block % per_group) % group_rows) * BM
    col0 = ((block % per_group) // group_rows) * BN

    tid = cuda.threadIdx.x
    tx = tid % (BN // TN)
    ty = tid // (BN // TN)
    utid = uint64(tid)
    a_tile = cuda.shared.array(A_TILES, a.dtype, ALIGN)
    b_tile = cuda.shared.array(B_TILES, a.dtype, ALIGN)
    a_next = cuda.local.array(A_LOADS, a.dtype)
    b_next = cuda.local.array(B_LOADS, a.dtype)
    a_frag = cuda.local.array(TM, a.dtype)
    b_frag = cuda.local.array(TN, a.dtype)
    acc = cuda.local.array((TM, TN), a.dtype)
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = zero

    steps = (k + BK - 1) // BK
    for step in range(steps + 1):
        if step < steps:  # fetch step's panels into registers; they land during the compute
            k0 = step * BK
            for s in range(A_LOADS):
                e = tid + s * MM_THREADS
                r, c = row0 + e // BK, k0 + e % BK
                a_next[s] = a[r, c] if r < n and c < k else zero
            for s in range(B_LOADS):
                e = tid + s * MM_THREADS
                r, c = k0 + e // BN, col0 + e % BN
                b_next[s] = b[r, c] if r < k and c < m else zero
        if step > 0:  # multiply the panels step - 1 left in shared memory
            buf = uint64((step - 1) & 1)
            a_at = buf * uint64(A_TILE) + uint64(ty * VEC)
            b_at = buf * uint64(B_TILE) + uint64(tx * VEC)
            for kk in range(BK):
                for g in range(TM // VEC):
                    a_run = a_at + uint64(kk * A_ROW + g * ROW_STEP)
                    for v in range(VEC):
                        a_frag[g * VEC + v] = a_tile[a_run + uint64(v)]
                for g in range(TN // VEC):
                    b_run = b_at + uint64(kk * BN + g * COL_STEP)
                    for v in range(VEC):
                        b_frag[g * VEC + v] = b_tile[b_run + uint64(v)]
                for i in range(TM):
                    for j in range(TN):
                        acc[i, j] += a_frag[i] * b_frag[j]
        if step < steps:  # the other buffer: its last readers passed the previous barrier
            buf = uint64(step & 1)
            for s in range(A_LOADS):
                e = utid + uint64(s * MM_THREADS)
                at = (e % uint64(BK)) * uint64(A_ROW) + e // uint64(BK)
                a_tile[buf * uint64(A_TILE) + at] = a_next[s]
            for s in range(B_LOADS):
                e = utid + uint64(s * MM_THREADS)
                b_tile[buf * uint64(B_TILE) + e] = b_next[s]
        cuda.syncthreads()

    for i in range(TM):
        r = row0 + (i // VEC) * ROW_STEP + ty * VEC + i % VEC
        if r < n:
            for j in range(TN):
                c = col0 + (j // VEC) * COL_STEP + tx * VEC + j % VEC
                if c < m:
                    out[r, c] = acc[i, j]


@jit(cache=True)
def _small_matmul_kernel(a, b, out, zero):
    """out = a @ b, one output per thread in TILE x TILE blocks through shared-memory tiles:
    the kernel for products of few BM x BN tiles (see matmul_launch)."""
    tile_a = cuda.shared.array((TILE, TILE), a.dtype)
    tile_b = cuda.shared.array((TILE, TILE), a.dtype)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    n, k = a.shape
    m = b.shape[1]
    acc = zero
    for k0 in range(0, k, TILE):
        tile_a[ty, tx] = a[row, k0 + tx] if row < n and k0 + tx < k else zero
        tile_b[ty, tx] = b[k0 + ty, col] if k0 + ty < k and col < m else zero
        cuda.syncthreads()
        for j in range(TILE):
            acc += tile_a[ty, j] * tile_b[j, tx]
        cuda.syncthreads()
    if row < n and col < m:
        out[row, col] = acc


@jit(cache=True)
def _transpose_kernel(src, dst):
    """dst = src.T through shared TILE x TILE tiles (padded a column against bank conflicts):
    reads and writes both run along rows. Blocks of TILE x TRANSPOSE_ROWS threads walk the tiles
    of src on a 1-d grid."""
    tile = cuda.shared.array((TILE, TILE_PAD), src.dtype)
    rows, cols = src.shape
    tile_cols = (cols + TILE - 1) // TILE
    tiles = ((rows + TILE - 1) // TILE) * tile_cols
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    for t in range(cuda.blockIdx.x, tiles, cuda.gridDim.x):
        r0, c0 = (t // tile_cols) * TILE, (t % tile_cols) * TILE
        for k in range(ty, TILE, TRANSPOSE_ROWS):
            if r0 + k < rows and c0 + tx < cols:
                tile[k, tx] = src[r0 + k, c0 + tx]
        cuda.syncthreads()
        for k in range(ty, TILE, TRANSPOSE_ROWS):
            if c0 + k < cols and r0 + tx < rows:
                dst[c0 + k, r0 + tx] = tile[tx, k]
        cuda.syncthreads()


def transposed(arr, stream, slot: int):
    """arr.T for the product kernels: for an operand of COPY_MIN elements or more, a
    C-contiguous copy in scratch `slot` of the stream (one coalesced pass, so the product
    keeps its coalesced loads); for a smaller one, a strided view (`transposed_view`)."""
    if arr.size < COPY_MIN:
        return transposed_view(arr)
    out = SCRATCH.view(stream, slot, arr.shape[::-1], arr.dtype)
    tiles = -(-arr.shape[0] // TILE) * -(-arr.shape[1] // TILE)
    launch(_transpose_kernel, min(tiles, PART_BLOCKS), (TILE, TRANSPOSE_ROWS), stream, arr, out)
    return out


def transposed_view(arr):
    """The transpose of a 2-d device array as a view of the same memory, made once per array
    object (pooled arrays are reused, and a new array object costs numba ~10 us to type)."""
    view = arr.__dict__.get("_transposed")
    if view is None:
        if on_simulator():
            view = arr.T
        else:
            from numba.cuda.cudadrv.devicearray import DeviceNDArray

            view = DeviceNDArray(arr.shape[::-1], arr.strides[::-1], arr.dtype,
                                 gpu_data=arr.gpu_data)
        arr.__dict__["_transposed"] = view
    return view


def matmul_launch(n: int, m: int):
    """(kernel, grid, block) for an n x m product. With fewer than MIN_TILES output tiles the
    register-blocked kernel leaves most SMs idle and each of its blocks waits on memory every
    k-step; the one-output-per-thread kernel then runs more, smaller blocks. Measured on an
    H100 (float32): tiled vs small 0.31 vs 0.38 ms at 1024^3 (64 tiles), 0.15 vs 0.07 ms at
    256^3 (4 tiles), 0.78 vs 0.27 ms at 1x4096 @ 4096x4096 (32 tiles). The small kernel's grid
    y (rows / TILE) stays far below its 65535 limit: it never gets more than MIN_TILES * BM
    rows."""
    tiles = -(-n // BM) * -(-m // BN)
    if tiles >= MIN_TILES:
        return _matmul_kernel, tiles, MM_THREADS
    return _small_matmul_kernel, (-(-m // TILE), -(-n // TILE)), (TILE, TILE)
