"""The compiled CPU worker: a loop that takes ready ops from the engine's table and runs their
kernels without the GIL, and the table of ops it can run that way.

`work(state, lane, worker)` is entered from a worker thread (`realexec.engine.native`) and
returns only to hand an op to Python: one whose kernel is Python (kind `PYTHON`: any op the table
below does not cover, or a GPU lane's op), or one whose predecessor failed. Python runs it,
completes it and calls `work` again. -1 means the engine stopped.

The ops run here are native ops (`realexec.cpu.native_ops`: elementwise ops over their flat
buffers, bias adds, 2-d products through numpy's BLAS, samplers, and hybridized graphs of
those), their addresses in the op record, so no Python object is touched. `native_op(name,
attrs, shapes)` says how an op of `asyncsim.nd.ops` is encoded, or None when it is not run here
(other broadcasting, reductions, convolutions: ops long enough that a GIL round per op costs
little against the kernel); `random_fields` gives a sampler's seed and second bound, drawn at
the push.

Spans: the worker stamps each op's start and end (`atomics.now_ns`) and its index into the
op record; the engine turns them into "exec" spans.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import njit, types

from asyncsim.nd.ops import COMPILED, block_broadcast
from realexec.cpu.blas import addresses, packed
from realexec.cpu.loops import (
    ADD,
    COPY,
    DIV,
    FILL,
    MAX,
    MUL,
    RDIV,
    RSUB,
    SUB,
    random_fill,
    random_seed,
    sampler_bounds,
)
from realexec.cpu.native_ops import (
    BINARY,
    BLOCK,
    BLOCK_SIDE,
    DTYPES,
    GEMM,
    GRAPH,
    PYTHON,
    RANDOM,
    SCALAR,
    run_graph,
    run_native,
)
from realexec.engine import layout, placement, ready, sleep
from realexec.engine import table as t
from realexec.engine.atomics import fetch_add, load, now_ns

_SCALAR_OPS = {"add_scalar": ADD, "sub_scalar": SUB, "rsub_scalar": RSUB, "mul_scalar": MUL,
               "div_scalar": DIV, "rdiv_scalar": RDIV}
_BINARY_OPS = {"add": ADD, "sub": SUB, "mul": MUL, "div": DIV, "copy": COPY, "copyto": COPY}
_FILLS = {"ones": 1.0, "zeros": 0.0}
_SAMPLERS = {"uniform": 0, "normal": 1}
# the ops of kind SCALAR that read one array (the scalar attr, 0 for relu): `y = x + 1`'s push
# path looks its op up here, not through `native_op`
UNARY = {**_SCALAR_OPS, "relu": MAX}
GEMM_ADDRESSES = addresses()  # numpy's BLAS, called by address; None: `dot` stays Python


assert {*_SCALAR_OPS, *_BINARY_OPS, *_FILLS, *_SAMPLERS, "relu", "full", "dot"} == COMPILED, \
    COMPILED


def native_op(name: str, attrs: dict, shapes) -> tuple[int, int, float] | None:
    """(kind, code, scalar) of an op this worker runs itself, or None. `shapes`: the inputs'."""
    if name == "dot":
        if GEMM_ADDRESSES is None or len(shapes) != 2:
            return None
        return _gemm(attrs, *shapes)
    code = _SCALAR_OPS.get(name)
    if code is not None:
        return SCALAR, code, float(attrs["scalar"])
    code = _BINARY_OPS.get(name)
    if code is not None:
        if name == "copyto" or len(shapes) == 1 or shapes[0] == shapes[1]:
            return BINARY, code, 0.0
        block = block_broadcast(shapes[0], shapes[1])  # a bias: x + b, b repeating in blocks
        if block is None or max(block) >= BLOCK_SIDE:
            return None  # other broadcasting: the strided kernel, in Python
        return BLOCK, code, float(block[0] * BLOCK_SIDE + block[1])
    if name == "relu":
        return SCALAR, MAX, 0.0
    value = _FILLS.get(name)
    if value is not None:
        return SCALAR, FILL, value
    if name == "full":
        return SCALAR, FILL, float(attrs["value"])
    code = _SAMPLERS.get(name)
    if code is not None:  # its seed and second bound: `random_fields`
        return RANDOM, code, sampler_bounds(name, attrs)[0]
    return None


def _gemm(attrs, a, b):
    """(GEMM, transposes, packed sizes) of a 2-d product, or None (empty, too large, or 1-d)."""
    return _gemm_of(bool(attrs.get("transpose_a")), bool(attrs.get("transpose_b")), a, b)


@functools.lru_cache(maxsize=1024)  # a loop pushes the same few products: 0.4 us -> 0.1
def _gemm_of(ta: bool, tb: bool, a: tuple, b: tuple):
    if len(a) != 2 or len(b) != 2:
        return None
    m, k = (a[1], a[0]) if ta else a
    n = b[0] if tb else b[1]
    sizes = packed(m, k, n) if m and k and n else None
    return None if sizes is None else (GEMM, int(ta) | int(tb) << 1, sizes)


def random_fields(name: str, attrs: dict) -> tuple[int, int]:
    """A sampler's (a, b) fields: its seed (`loops.random_seed`, drawn now: a replayed record
    would repeat it, so a hybridized graph keeps samplers in Python), and its scale (normal) or
    high (uniform) as the bits of a float64."""
    second = np.float64(sampler_bounds(name, attrs)[1])
    return random_seed(attrs), int(second.view(np.int64))


_NO_DRAWS = np.empty(0, np.float64)


def seed_thread() -> None:
    """Give this thread numba's random state now (numba makes it at its first use, seeded from
    os.urandom under the GIL): a compiled sampler on this thread then never takes the GIL."""
    random_fill(_NO_DRAWS, True, 0.0, 1.0, 0)


@njit(cache=True)  # the frontend's: keeps the GIL (see `table.push`)
def address(flat):
    """The address of a 1-d array's first item (a compiled call: numpy's own costs ~1 us)."""
    return flat.ctypes.data


@njit(cache=True)  # keeps the GIL: sync mode's frontend calls it, no worker runs meanwhile
def run_stamped(s, slot, token, kind, code, dtype, n, a, b, out, scalar, op_id, name, issue):
    """Sync mode's native op (NaiveEngine): run it on the calling thread now, and stamp its
    record as a push and a worker would (its push's span from `issue`, its exec span on the
    lane's first worker), so that its spans are read out of the table with the others' instead
    of made as tuples per op; it is then done and below the low-water mark."""
    start = now_ns()
    if kind == GRAPH:
        run_graph(a, b, n, s[layout.H_GEMM], s[layout.H_GEMM + 1])
    else:
        run_native(kind, code, dtype, n, a, b, out, scalar, s[layout.H_GEMM + dtype])
    end = now_ns()
    s[layout.at(slot, layout.F_TOKEN)] = token
    s[layout.at(slot, layout.F_STATE)] = layout.DONE
    s[layout.at(slot, layout.F_KIND)] = kind
    s[layout.at(slot, layout.F_FAILED)] = 0
    s[layout.at(slot, layout.F_OP)] = op_id
    s[layout.at(slot, layout.F_NAME)] = name
    s[layout.at(slot, layout.F_ISSUE)] = issue
    s[layout.at(slot, layout.F_ISSUED)] = start
    s[layout.at(slot, layout.F_START)] = start
    s[layout.at(slot, layout.F_END)] = end
    s[layout.at(slot, layout.F_WORKER)] = 0
    s[layout.H_LOW] = token + 1
    s[layout.H_DONE] += 1


# run_stamped's argument types: the state, nine ints (slot .. out), the scalar, three ints
STAMPED_TYPES = (types.int64[::1], *[types.int64] * 9, types.float64, *[types.int64] * 3)


@njit(cache=True)  # keeps the GIL, as `run_stamped` does
def run_unary_stamped(s, token, code, dtype, n, a, out, scalar, op_id, name, issue):
    """`run_stamped` for the commonest op, `y = x + 1`: an elementwise op with a scalar over
    one input, its slot taken from its token here. 11 arguments instead of 14, each of which
    the call converts (`realexec.unary`)."""
    run_stamped(s, token & (s[layout.H_CAP] - 1), token, SCALAR, code, dtype, n, a, a, out, scalar,
                op_id, name, issue)


# run_unary_stamped's: the state, six ints (token .. out), the scalar, three ints
UNARY_STAMPED_TYPES = (types.int64[::1], *[types.int64] * 6, types.float64, *[types.int64] * 3)


@njit(nogil=True, cache=True)
def work(s, lane, worker):
    """Run the lane's ready native ops until one needs Python (its slot) or the engine stops
    (-1). `worker`: this thread's index, stamped on the ops it runs. The thread completes a
    Python op with `ready.finish_and_pop_python`, which keeps the GIL while Python ops follow."""
    idle_since = now_ns()
    busy = False  # counted in H_BUSY (a blocker spins only while a core is left)
    # its core still counts as taken: back from Python ops, which keep it (see below)
    placed = True
    spinning = False  # counted in the lane's Q_SPINNERS (a push wakes a sleeper only past them)
    while True:
        if load(s, layout.H_STOP):
            if busy:
                fetch_add(s, layout.H_BUSY, -1)
            if placed:
                placement.idle(s, worker)
            if spinning:
                sleep.unspin(s, lane)
            return -1
        slot = ready.pop(s, lane)
        if slot < 0:
            if busy:
                fetch_add(s, layout.H_BUSY, -1)
                busy = False
            if placed:  # a sleeping worker that still held its core kept woken ones off it
                placement.idle(s, worker)
                placed = False
            spinning = sleep.idle(s, lane, idle_since, spinning)
            continue
        if spinning:
            sleep.unspin(s, lane)
            spinning = False
        # off a busy worker's core, where the OS may have woken or moved this thread
        placement.busy(s, worker)
        placed = True
        if not busy:
            fetch_add(s, layout.H_BUSY, 1)
            busy = True
        base = layout.at(slot, 0)
        kind = s[base + layout.F_KIND]
        if kind == PYTHON or s[base + layout.F_FAILED] != 0:
            fetch_add(s, layout.H_BUSY, -1)  # Python runs it; back in here, counted anew
            # (its core stays taken: a worker it wakes from Python must not queue behind it)
            return slot
        run_op(s, slot, worker)
        ready.complete(s, slot, 0)
        idle_since = now_ns()


@njit(nogil=True, cache=True, inline="always")  # inlined in `work`: no call per op there
def run_op(s, slot, worker):
    """Run the native op in `slot` and stamp its span: `work`'s, and Python's for a native op
    handed to it after a failure that turned out not to be its own (`WorkerThreads`)."""
    base = layout.at(slot, 0)
    kind = s[base + layout.F_KIND]
    s[base + layout.F_START] = now_ns()
    if kind == GRAPH:
        run_graph(s[base + layout.F_A], s[base + layout.F_B], s[base + layout.F_N],
                  s[layout.H_GEMM], s[layout.H_GEMM + 1])
    else:
        dtype = s[base + layout.F_DTYPE]
        run_native(kind, s[base + layout.F_CODE], dtype, s[base + layout.F_N],
                   s[base + layout.F_A], s[base + layout.F_B], s[base + layout.F_OUT],
                   s.view(np.float64)[base + layout.F_SCALAR], s[layout.H_GEMM + dtype])
    s[base + layout.F_END] = now_ns()
    s[base + layout.F_WORKER] = worker


def warm_native() -> None:
    """Compile (or load from numba's cache) the worker loop and the table's functions, by
    running one op of each kind through a small table."""
    buf, s = layout.new_state(16, 0)
    layout.at(0, layout.F_FAILED)  # the engine's thread asks it once, outside the loop
    for dtype, code in DTYPES.items():  # dtype objects: `.name` costs a microsecond
        x = np.ones(4, dtype)
        a = address(x)
        for slot, kind in enumerate((SCALAR, BINARY, PYTHON)):
            t.push(s, slot, slot, 0, kind, ADD, code, 4, a, a, a, 1.0, 0, slot - 1, -1, -1,
                   np.empty(0, np.int64), slot, 0, 0)
        slot = work(s, 0, 0)  # runs the two native ops, hands the Python one back
        ready.finish_and_pop_python(s, 0, slot, 0)
        buf[layout.H_STOP] = 1
        work(s, 0, 0)
        sleep.wait(s, 1, 3, 0, 0)
        sleep.wait(s, 0, 2, 0, 0)
        sleep.wake_all(s, 1)
        buf, s = layout.new_state(16, 0)
    buf[layout.H_STOP] = 1  # so the idle wait returns at once
    sleep.idle(s, 0, 0, False)
    from realexec.engine.spans import read_out  # (it imports this module)
    read_out(s, 0, 1, np.empty((4, 1), np.int64), np.empty((5, 1), np.int64))
