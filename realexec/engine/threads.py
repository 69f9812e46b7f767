"""The compiled engine's worker threads, and the ops that come back from their loop to Python.

Each worker thread enters the compiled loop `realexec.cpu.worker.work` for its life and leaves it
only for an op the loop cannot run: a Python kernel (convolutions, reductions, a GPU lane's
launch) or an op whose predecessor failed. The thread runs such ops with the GIL, one after the
other while the next ready op is one too (`ready.finish_and_pop_python`), and goes back in. A
kernel's exception becomes a `Failure` on the op's outputs (they are *poisoned*), and the ops
that read or write a poisoned var do not run, poisoning their own outputs in turn, as MXNet
propagates `var_exception`; the blockers raise it (`realexec.engine.native`). The table hands
every successor of a failed op to Python; one whose own vars are sound (it overwrites a var the
failed op only read) runs after all, its native kernel through `run_op`.

`WorkerThreads` is a part of `realexec.engine.native.NativeEngine`, which starts the threads
(`add_lane`) and sets the state these methods use: the table (`state`, `_buf`), the Python
records of its slots (`_ops`: name, op id, reads, writes, kernel, arguments), `_lane_index`,
`_cores` (pinned workers), `_log`, `_lock`, `_failures`, `_tainted`, `_lights_out`, `_sync` and
`_stopped`.
Units: nanoseconds (perf_counter_ns) in the spans.
"""

from __future__ import annotations

import os
import threading
from time import perf_counter_ns

from realexec.cpu.worker import PYTHON, run_op, seed_thread, work
from realexec.engine import layout, placement, ready
from realexec.engine.deps import Failure
from realexec.engine.lanes import Lane


class WorkerThreads:
    """A worker thread's life, and the Python ops it runs."""

    def _work(self, lane: Lane, label: str, index: int, thread_context=None,
              core: int = -1) -> None:
        if core >= 0:
            os.sched_setaffinity(0, {core})  # this thread's (see `_cores`)
        if thread_context is not None:
            with thread_context():
                return self._work(lane, label, index)
        state, lane_index = self.state, self._lane_index[lane.name]
        if lane.name == "cpu":  # a waker may steer it to a free core (GPU lanes stay put)
            placement.register(state, index, threading.get_native_id())
            # numba seeds a thread's random state from os.urandom, with the GIL, at its first
            # use: here, so that no sampler in the loop waits for a GIL the frontend holds
            seed_thread()
        try:
            self._serve(state, lane, lane_index, label, index, core)
        except BaseException as exc:  # an error of the engine's own (not a kernel's): the
            # ops it held never finish, so every blocker stops at its next look (50 ms)
            self._stopped = f"worker {label} stopped on an error of the engine's own: {exc!r}"
            raise

    def _serve(self, state, lane: Lane, lane_index: int, label: str, index: int,
               core: int) -> None:
        """The worker's life: the compiled loop, and the runs of Python ops it hands back."""
        failed, kind = layout.at(0, layout.F_FAILED), layout.at(0, layout.F_KIND)
        free = set(self._cores)  # while it runs Python ops (see the module docstring)
        while True:
            slot = work(state, lane_index, index)  # lets the GIL go meanwhile
            if slot < 0 or self._stopped is not None:
                return
            if core >= 0:
                os.sched_setaffinity(0, free)
            while slot >= 0:  # a run of Python ops, the GIL held throughout
                bad = self._buf[failed + slot * layout.STRIDE]
                if bad and self._fail_python(slot):
                    how = layout.FAILED_INHERITED
                else:
                    if bad:  # a predecessor failed, but no var of its own is poisoned: it runs
                        self._buf[failed + slot * layout.STRIDE] = 0
                    if self._buf[kind + slot * layout.STRIDE] != PYTHON:  # a native op, handed over
                        run_op(state, slot, index)  # for its predecessor's failure alone
                        how = 0
                    else:
                        how = layout.FAILED_OWN if self._run_python(slot, label, lane.log) else 0
                slot = ready.finish_and_pop_python(state, lane_index, slot, how)
                if self._stopped is not None:
                    return
            if core >= 0:
                os.sched_setaffinity(0, {core})

    def _run_python(self, slot: int, label: str, log: bool) -> bool:
        """Run a Python op's kernel on this thread; True if it raised (its outputs poisoned)."""
        name, op_id, reads, writes, fn, args = self._ops[slot]
        start = perf_counter_ns()
        try:
            fn(*args)
        except BaseException as exc:  # any error of a kernel belongs to its op
            failure = Failure(name, op_id, exc)
            self._poison(writes, failure)
            with self._lock:
                self._failures.append(failure)
            if self._sync and isinstance(exc, KeyboardInterrupt):
                raise  # Ctrl-C inside a sync-mode op is the user's, not the op's
            return True
        finally:
            if log:
                self._log.append((label, "exec", name, op_id, start, perf_counter_ns()))
        return False

    def _fail_python(self, slot: int) -> bool:
        """An op whose predecessor failed: if a var it reads or writes carries the failure, it
        does not run and its outputs carry that failure too (True). Otherwise the failure came
        along an edge that is no var of its own (it overwrites a var the failed op read): it
        runs, as MXNet, which passes failures through vars, runs it (False)."""
        name, op_id, reads, writes, fn, args = self._ops[slot]
        failure = self._inherited(reads, writes)
        if failure is None:
            return False
        self._poison(writes, failure)
        return True

    def _poison(self, writes, failure: Failure) -> None:
        for v in writes:
            if hasattr(v, "failure"):
                v.failure = failure
        self._tainted = True
        self._lights_out()  # (the light pushes look no more for inherited failures)

    @staticmethod
    def _inherited(reads, writes) -> Failure | None:
        for v in reads:
            f = getattr(v, "failure", None)
            if f is not None:
                return f
        for v in writes:
            f = getattr(v, "failure", None)
            if f is not None:
                return f
        return None
