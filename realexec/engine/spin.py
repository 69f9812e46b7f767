"""Spinning without the GIL: how a blocker waits for a worker without paying the GIL's hand-over.

CPython hands its GIL over through a condition variable: a thread that asks for the GIL while
another holds it sleeps in the OS until woken, and a wake-up takes 5-20 us (the upper end in a VM
whose idle vCPUs halt at once). A blocker that spins *in Python*, giving the GIL back each round
(`os.sched_yield`), still pays that twice per op: the worker, back from its kernel, waits for the
spinning frontend to let go of the GIL; then the frontend, which asked for the GIL again while
the worker held it for its bookkeeping, sleeps until the worker lets go.

`Progress` is a counter that a worker bumps after an op that made a waiting blocker's condition
hold (the worker tests the conditions itself: `realexec.engine`), as the last thing it does
before its queue lets go of the GIL (one item store, inline in the engine's worker loop:
`progress.counts[0] += 1`). `Progress.spin(done, until_ns)` waits in compiled code that holds no
GIL: the worker takes the GIL at once when its kernel ends; the spinner sees the counter move,
reads `SETTLE` more times (about half a microsecond: time for the worker to reach its queue), so
it finds the GIL free, and re-checks `done()`. It takes the GIL only then, not at every op
finished: with a backlog the worker goes straight on into its next op, GIL held, and a spinner
that asked for the GIL at each op slept on it and cost the worker a wake-up each time. The loop
backs off with the CPU's `pause` between reads (a hyperthread next to it, maybe a worker's, keeps
its execution units) and calls `sched_yield` every `READS` reads (a few microseconds), so a
worker that shares this core still runs. One compiled call covers the time left to the deadline
(`ROUND_NS`, measured at import), so the clock is read, with the GIL, only between calls. The
counter is only a hint: `done()` decides, so a missed or spurious move costs time, never
correctness.

Assumes a POSIX libc (`sched_yield`). Where the compiled loop cannot be built, the spin yields in
Python instead (the GIL hand-over costs come back, nothing else changes).
"""

from __future__ import annotations

import platform
import time
from array import array
from time import perf_counter_ns

import numpy as np

READS = 200  # reads between sched_yields: ~25 ns each with `pause`, so ~5 us
MAX_ROUNDS = 400  # rounds per compiled call at most (~2 ms; Ctrl-C waits for the call's end)
SETTLE = 20  # reads after the counter moved (~0.5 us)


def _spin_in_python(counter, seen, rounds, settle) -> bool:
    time.sleep(0)  # gives the GIL and the core away for a moment
    return False


try:
    from llvmlite import ir
    from numba import njit, types
    from numba.core import cgutils
    from numba.extending import intrinsic

    _X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")

    @intrinsic
    def _load_acquire(typingctx, counter):
        """counter[0], read with acquire ordering: never hoisted out of a loop, never torn."""

        def codegen(context, builder, signature, args):
            array_ = context.make_array(signature.args[0])(context, builder, args[0])
            return builder.load_atomic(array_.data, "acquire", 8)

        return types.int64(counter), codegen

    @intrinsic
    def _pause(typingctx):
        """The CPU's spin-wait hint (x86 `pause`; nothing elsewhere)."""

        def codegen(context, builder, signature, args):
            if _X86:
                fnty = ir.FunctionType(ir.VoidType(), [])
                fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse2.pause")
                builder.call(fn, [])
            return context.get_dummy_value()

        return types.void(), codegen

    @intrinsic
    def _sched_yield(typingctx):
        """libc's sched_yield(), called from compiled code (there is no GIL to give back)."""

        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(ir.IntType(32), [])
            return builder.call(cgutils.get_or_insert_function(builder.module, fnty,
                                                               "sched_yield"), [])

        return types.int32(), codegen

    @njit(nogil=True, cache=True)
    def _spin_compiled(counter, seen, rounds, settle):
        """True once counter[0] != seen (after `settle` more pauses); False after `rounds`."""
        for _ in range(rounds):
            for _ in range(READS):
                if _load_acquire(counter) != seen:
                    for _ in range(settle):
                        _pause()
                    return True
                _pause()
            _sched_yield()
        return False

    _spin_compiled(np.zeros(1, np.int64), 0, 0, 0)  # compile, or load numba's cache, at import
    _spin = _spin_compiled
except Exception:  # pragma: no cover - no numba, no libc symbol, or no LLVM atomics here
    _spin = _spin_in_python


def _round_ns(rounds: int = 20) -> float:
    """Nanoseconds one round of the compiled spin takes here (READS reads, a sched_yield),
    from `rounds` rounds on a counter that never moves."""
    start = perf_counter_ns()
    _spin(np.zeros(1, np.int64), 0, rounds, 0)
    return max(1.0, (perf_counter_ns() - start) / rounds)


# a compiled call covers the time left to the deadline, so the spinner reads the clock (with the
# GIL) only when the counter moves or the time is up: reading it every ~100 us took the GIL from
# a worker draining a backlog each time, and cost the worker a wake-up (10% of 100 small products)
ROUND_NS = _round_ns()


class Progress:
    """A count of signals (a worker finished an op that made a waiting blocker's condition
    hold), bumped by workers, and a spin on it that holds no GIL."""

    __slots__ = ("counts", "_view")

    def __init__(self):
        self.counts = array("q", [0])  # an array item store is the cheapest bump from Python
        self._view = np.frombuffer(self.counts, np.int64)  # the same memory, for compiled code

    def spin(self, done, until_ns: int) -> bool:
        """Spin until `done()` holds (True) or perf_counter_ns() passes `until_ns` (False)."""
        counts, view = self.counts, self._view
        while (now := perf_counter_ns()) < until_ns:
            seen = counts[0]  # read before done(): an op finishing after the check moves it
            if done():
                return True
            rounds = min(MAX_ROUNDS, max(1, int((until_ns - now) / ROUND_NS)))
            _spin(view, seen, rounds, SETTLE)
        return done()
