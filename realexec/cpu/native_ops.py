"""Native ops: what the compiled worker runs without Python, encoded as plain numbers, and how
one runs over raw addresses (`run_native`), or a hybridized graph of them (`run_graph`).

An op record is (kind, code, dtype, n, a, b, out) plus a float `scalar`: `n` items of `dtype`
(float32 0, float64 1) at addresses `a`, `b` (inputs) and `out`. `SCALAR` ops are
`loops.scalar_flat(code, a, scalar, out)` (x + 1, relu, fills), `BINARY` ops
`loops.binary_flat(code, a, b, out)` (x + y of one shape, copies), `BLOCK` ops x + b where b
repeats as a bias (`ops.block_broadcast`, packed in the scalar: a dense layer's or a
convolution's); `GEMM`, a 2-d `dot` through numpy's own BLAS called by address
(`realexec.cpu.blas`, its sizes packed in the scalar); `RANDOM`, the samplers
(`loops.random_fill`: code 1 normal, 0 uniform; loc or low in the scalar and, as they read no
input, the seed in `a` and the scale or high in `b`, a float's bits). `PYTHON` marks an op whose
kernel is Python. `realexec.cpu.worker.native_op` encodes an op of `asyncsim.nd.ops`.

`GRAPH` is a hybridized graph whose every op is native (`realexec.cpu.graph.program`): `a` is
the address of its program (steps, the address of their records and of their scalars, the
bytes of its temporaries), `b` the address of this call's bindings (the addresses of its inputs,
then its output: `n` of them). A record's a, b and out are a binding (-1 - its index) or an
offset into temporaries that the call allocates, so two workers can run one graph at once.

Every function here is compiled without the GIL; addresses are passed at run time (never
compiled in), so numba's cache stays valid across processes.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit, types

from realexec.cpu.blas import SIDE
from realexec.cpu.loops import binary_flat, random_fill, scalar_flat
from realexec.engine.atomics import gemm, pointer

PYTHON, SCALAR, BINARY, GEMM, BLOCK, RANDOM, GRAPH = 0, 1, 2, 3, 4, 5, 6
BLOCK_SIDE = 1 << 26  # a bias's `block_broadcast` (inner, count), packed: each under this
DTYPES = {np.dtype("float32"): 0, np.dtype("float64"): 1}
PROGRAM = 4  # a graph's program: steps, records' address, scalars' address, temporaries' bytes


@njit(nogil=True, cache=True)
def _float_of(bits):
    """The float64 whose bits are the int64 `bits`."""
    box = np.empty(1, np.int64)
    box[0] = bits
    return box.view(np.float64)[0]


@njit(nogil=True, cache=True)
def _run_gemm(fn, code, a, b, out, sizes, dtype):
    """out = op(a) op(b) through BLAS (`fn`), sizes packed as `blas.packed` packs them."""
    q = np.int64(sizes)
    n = q % SIDE
    q //= SIDE
    k = q % SIDE
    m = q // SIDE
    ta, tb = code & 1, code >> 1
    gemm(fn, ta, tb, m, n, k, dtype(1.0), a, m if ta else k, b, k if tb else n, out, n)


@njit(nogil=True, cache=True)
def _run_block(code, n, a, b, out, packed_block, dtype):
    """out = a op b over `n` items, b's `count` items each repeated `inner` times in turn."""
    q = np.int64(packed_block)
    inner, count = q // BLOCK_SIDE, q % BLOCK_SIDE
    x = carray(pointer(a), n, dtype)
    bias = carray(pointer(b), count, dtype)
    y = carray(pointer(out), n, dtype)
    if inner == 1:  # a row per block: the two rows, elementwise
        for start in range(0, n, count):
            binary_flat(code, x[start:start + count], bias, y[start:start + count])
        return
    for start in range(0, n, inner):
        scalar_flat(code, x[start:start + inner], bias[(start // inner) % count],
                    y[start:start + inner])


@njit(nogil=True, cache=True)
def _run_typed(kind, code, n, a, b, out, scalar, blas, dtype):
    if kind == GEMM:
        _run_gemm(blas, code, a, b, out, scalar, dtype)
        return
    if kind == BLOCK:
        _run_block(code, n, a, b, out, scalar, dtype)
        return
    if kind == RANDOM:
        random_fill(carray(pointer(out), n, dtype), code == 1, scalar, _float_of(b), a)
        return
    x = carray(pointer(a), n, dtype)
    y = carray(pointer(out), n, dtype)
    if kind == SCALAR:
        scalar_flat(code, x, scalar, y)
    else:
        binary_flat(code, x, carray(pointer(b), n, dtype), y)


# run_native's argument types, for a caller past numba's dispatcher (`table.entry`)
RUN_TYPES = (*[types.int64] * 7, types.float64, types.int64)


@njit(nogil=True, cache=True)
def run_native(kind, code, dtype, n, a, b, out, scalar, blas):
    """Run one native op over raw addresses (a fill reads `a` = `out`); a product through the
    BLAS function at `blas`."""
    if dtype == 0:
        _run_typed(kind, code, n, a, b, out, scalar, blas, np.float32)
    else:
        _run_typed(kind, code, n, a, b, out, scalar, blas, np.float64)


@njit(nogil=True, cache=True)
def run_steps(records, scalars, sgemm, dgemm):
    """Run native ops in order (a hybridized graph's, `realexec.cpu.graph`): each record is
    (kind, code, dtype, n, a, b, out), its scalar beside it; products through the BLAS
    functions at `sgemm` and `dgemm` (addresses passed at run time: never compiled in)."""
    for i in range(records.shape[0]):
        kind, code, dtype = records[i, 0], records[i, 1], records[i, 2]
        blas = 0
        if kind == GEMM:
            blas = sgemm if dtype == 0 else dgemm
        run_native(kind, code, dtype, records[i, 3], records[i, 4], records[i, 5],
                   records[i, 6], scalars[i], blas)


@njit(nogil=True, cache=True, inline="always")
def _bound(field, bindings, scratch):
    """A graph record's address field: a binding (negative) or an offset into the scratch."""
    return bindings[-1 - field] if field < 0 else scratch + field


@njit(nogil=True, cache=True)
def run_graph(program, bindings, count, sgemm, dgemm):
    """Run a hybridized graph's steps (`GRAPH`): `program` and `bindings` (`count` addresses)
    are addresses; the temporaries are allocated for this call and freed after it. Returns
    their bytes."""
    head = carray(pointer(program), PROGRAM, np.int64)
    steps = head[0]
    records = carray(pointer(head[1]), (steps, 7), np.int64)
    scalars = carray(pointer(head[2]), steps, np.float64)
    bound = carray(pointer(bindings), count, np.int64)
    temporaries = np.empty(max(head[3], 1), np.uint8)
    scratch = temporaries.ctypes.data
    for i in range(steps):
        kind, dtype = records[i, 0], records[i, 2]
        blas = 0
        if kind == GEMM:
            blas = sgemm if dtype == 0 else dgemm
        run_native(kind, records[i, 1], dtype, records[i, 3],
                   _bound(records[i, 4], bound, scratch), _bound(records[i, 5], bound, scratch),
                   _bound(records[i, 6], bound, scratch), scalars[i], blas)
    # a use after the loop: numba frees an array after its last use, and the steps above
    # reach the temporaries through a bare address
    return temporaries.size


__all__ = ["BINARY", "BLOCK", "BLOCK_SIDE", "DTYPES", "GEMM", "GRAPH", "PROGRAM", "PYTHON",
           "RANDOM", "RUN_TYPES", "SCALAR", "run_graph", "run_native", "run_steps"]
