"""What compiled engine code needs from the CPU and the OS, as Numba intrinsics: atomics on int64
array items, the spin-wait hint, the monotonic clock, futexes, and arrays over raw addresses.

- `cas(a, i, expected, new)` -> the old value (a compare-and-swap, acquire-release);
  `fetch_add(a, i, v)` -> the old value; `load(a, i)` (acquire) and `store(a, i, v)` (release).
- `pause()`: x86's `pause` between reads of a spin loop (nothing elsewhere); `sched_yield()`.
- `now_ns()`: clock_gettime(CLOCK_MONOTONIC) in nanoseconds, the clock of Python's
  `time.perf_counter_ns` on Linux, so compiled and Python timestamps share one time line.
- `futex_wait(a, i, expected, timeout_ns)`: sleep while the low 32 bits of a[i] equal `expected`
  (little-endian: the item's first 4 bytes), at most `timeout_ns`; `futex_wake(a, i, n)` wakes n
  sleepers. Linux only (x86-64, aarch64); elsewhere the wait is a `sched_yield`, so a sleeping
  thread becomes a slow spinner, and nothing else changes.
- `cpu()`: the core the calling thread runs on now (sched_getcpu; -1 where there is none);
  `set_affinity(a, i, nwords, tid)`: thread `tid` (0: the calling thread) may run only on the
  cores whose bits are set in a[i:i + nwords] (a cpu_set_t; sched_setaffinity; nothing where
  there is no futex).
- `pointer(address)`: a `voidptr` for `numba.carray(pointer(address), n, dtype)`.
- `gemm(fn, ...)`: a row-major matrix product through the CBLAS function at address `fn`.

All run without the GIL, inside `@njit(nogil=True)` functions. Symbols come from the C library
the process has loaded, found by name when the function is compiled or loaded from the cache.
"""

from __future__ import annotations

import platform
import sys

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_MACHINE = platform.machine().lower()
_X86 = _MACHINE in ("x86_64", "amd64", "i686", "x86")
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}.get(_MACHINE)
FUTEX = sys.platform.startswith("linux") and _SYS_FUTEX is not None
_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129
_I64 = ir.IntType(64)


def _item(context, builder, signature, args):
    aryty = signature.args[0]
    ary = context.make_array(aryty)(context, builder, args[0])
    return cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]])


def _libc(builder, name, ret, argtys, var_arg=False):
    fnty = ir.FunctionType(ret, argtys, var_arg=var_arg)
    return cgutils.get_or_insert_function(builder.module, fnty, name)


@intrinsic
def cas(typingctx, a, i, expected, new):
    def codegen(context, builder, signature, args):
        pair = builder.cmpxchg(_item(context, builder, signature, args), args[2], args[3],
                               "acq_rel", "acquire")
        return builder.extract_value(pair, 0)

    return types.int64(a, types.intp, types.int64, types.int64), codegen


@intrinsic
def fetch_add(typingctx, a, i, v):
    def codegen(context, builder, signature, args):
        return builder.atomic_rmw("add", _item(context, builder, signature, args), args[2],
                                  "acq_rel")

    return types.int64(a, types.intp, types.int64), codegen


@intrinsic
def load(typingctx, a, i):
    def codegen(context, builder, signature, args):
        return builder.load_atomic(_item(context, builder, signature, args), "acquire", 8)

    return types.int64(a, types.intp), codegen


@intrinsic
def store(typingctx, a, i, v):
    def codegen(context, builder, signature, args):
        builder.store_atomic(args[2], _item(context, builder, signature, args), "release", 8)
        return context.get_dummy_value()

    return types.void(a, types.intp, types.int64), codegen


@intrinsic
def pause(typingctx):
    def codegen(context, builder, signature, args):
        if _X86:
            builder.call(_libc(builder, "llvm.x86.sse2.pause", ir.VoidType(), []), [])
        return context.get_dummy_value()

    return types.void(), codegen


@intrinsic
def sched_yield(typingctx):
    def codegen(context, builder, signature, args):
        return builder.call(_libc(builder, "sched_yield", ir.IntType(32), []), [])

    return types.int32(), codegen


def _timespec(builder, ns):
    """An alloca'd struct timespec {i64 sec; i64 nsec} holding `ns` (an i64 value)."""
    ts = cgutils.alloca_once(builder, ir.ArrayType(_I64, 2))
    billion = ir.Constant(_I64, 1_000_000_000)
    builder.store(builder.sdiv(ns, billion), builder.gep(ts, [_I64(0), _I64(0)]))
    builder.store(builder.srem(ns, billion), builder.gep(ts, [_I64(0), _I64(1)]))
    return ts


@intrinsic
def now_ns(typingctx):
    def codegen(context, builder, signature, args):
        ts = _timespec(builder, _I64(0))
        fn = _libc(builder, "clock_gettime", ir.IntType(32),
                   [ir.IntType(32), cgutils.voidptr_t])
        builder.call(fn, [ir.Constant(ir.IntType(32), 1), builder.bitcast(ts, cgutils.voidptr_t)])
        sec = builder.load(builder.gep(ts, [_I64(0), _I64(0)]))
        nsec = builder.load(builder.gep(ts, [_I64(0), _I64(1)]))
        return builder.add(builder.mul(sec, _I64(1_000_000_000)), nsec)

    return types.int64(), codegen


@intrinsic
def futex_wait(typingctx, a, i, expected, timeout_ns):
    def codegen(context, builder, signature, args):
        if not FUTEX:
            builder.call(_libc(builder, "sched_yield", ir.IntType(32), []), [])
            return context.get_dummy_value()
        addr = builder.ptrtoint(_item(context, builder, signature, args), _I64)
        ts = builder.ptrtoint(_timespec(builder, args[3]), _I64)
        low = builder.and_(args[2], _I64(0xFFFFFFFF))
        fn = _libc(builder, "syscall", _I64, [_I64], var_arg=True)
        builder.call(fn, [_I64(_SYS_FUTEX), addr, _I64(_FUTEX_WAIT_PRIVATE), low, ts,
                          _I64(0), _I64(0)])
        return context.get_dummy_value()

    return types.void(a, types.intp, types.int64, types.int64), codegen


@intrinsic
def futex_wake(typingctx, a, i, n):
    def codegen(context, builder, signature, args):
        if FUTEX:
            addr = builder.ptrtoint(_item(context, builder, signature, args), _I64)
            fn = _libc(builder, "syscall", _I64, [_I64], var_arg=True)
            builder.call(fn, [_I64(_SYS_FUTEX), addr, _I64(_FUTEX_WAKE_PRIVATE), args[2],
                              _I64(0), _I64(0), _I64(0)])
        return context.get_dummy_value()

    return types.void(a, types.intp, types.int64), codegen


@intrinsic
def cpu(typingctx):
    def codegen(context, builder, signature, args):
        if not FUTEX:  # Linux's call; a constant elsewhere (no thread is then kept off a core)
            return ir.Constant(ir.IntType(32), -1)
        return builder.call(_libc(builder, "sched_getcpu", ir.IntType(32), []), [])

    return types.int32(), codegen


@intrinsic
def set_affinity(typingctx, a, i, nwords, tid):
    def codegen(context, builder, signature, args):
        if FUTEX:  # Linux: a thread id is a pid; 0 is the calling thread
            mask = builder.bitcast(_item(context, builder, signature, args), cgutils.voidptr_t)
            fn = _libc(builder, "sched_setaffinity", ir.IntType(32),
                       [ir.IntType(32), _I64, cgutils.voidptr_t])
            builder.call(fn, [builder.trunc(args[3], ir.IntType(32)),
                              builder.mul(args[2], _I64(8)), mask])
        return context.get_dummy_value()

    return types.void(a, types.intp, types.int64, types.int64), codegen


@intrinsic
def pointer(typingctx, address):
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return types.voidptr(types.int64), codegen


@intrinsic
def gemm(typingctx, fn, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, c, ldc):
    """C = alpha op(A) op(B) (beta 0) through the CBLAS function at address `fn`, row-major,
    64-bit sizes (`realexec.cpu.blas`): sgemm for a float32 `alpha`, dgemm for a float64 one.
    `trans_a`/`trans_b` nonzero transpose; `a`, `b`, `c` are addresses."""
    real = ir.FloatType() if alpha == types.float32 else ir.DoubleType()
    i32 = ir.IntType(32)
    ptr = cgutils.voidptr_t
    fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, _I64, _I64, _I64, real, ptr, _I64,
                                           ptr, _I64, real, ptr, _I64])

    def codegen(context, builder, signature, args):
        (f, ta, tb, m_, n_, k_, al, a_, lda_, b_, ldb_, c_, ldc_) = args
        target = builder.inttoptr(f, fnty.as_pointer())

        def flag(x):  # CblasTrans 112, CblasNoTrans 111
            return builder.select(builder.icmp_signed("!=", x, ir.Constant(_I64, 0)),
                                  ir.Constant(i32, 112), ir.Constant(i32, 111))

        builder.call(target, [ir.Constant(i32, 101), flag(ta), flag(tb), m_, n_, k_, al,
                              builder.inttoptr(a_, ptr), lda_, builder.inttoptr(b_, ptr), ldb_,
                              ir.Constant(real, 0.0), builder.inttoptr(c_, ptr), ldc_])
        return context.get_dummy_value()

    i64 = types.int64
    sig = types.void(i64, i64, i64, i64, i64, i64, alpha, i64, i64, i64, i64, i64, i64)
    return sig, codegen
