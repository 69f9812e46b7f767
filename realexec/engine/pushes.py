"""The compiled engine's pushes: the frontend's side of an op, from its call to its record in
the table (`realexec.engine.table.push`), or in sync mode to its end.

`push_native` is the general push: it reads the table's counters (a wait for a slot, a
`max_inflight` wait, the spans' read-out and the pending deletions come due here), asks the
dependency analysis (`asyncsim.nd.deps.Deps`) for the op's predecessors, keeps the op's Python
record (for a Python kernel, and for a failure to pass on) and makes one compiled call. `push`
is the same for a Python kernel. The commonest op, `y = x + 1`, is written out from the
frontend's call to the compiled one in `realexec.unary`, in both modes.

Sync mode (MXNet's NaiveEngine): each op runs inside its push, shown on the lane's first worker
and covered by a frontend "wait" named after it, as `asyncsim.simulate` draws it. A native op
runs and stamps its record in one compiled call (`realexec.cpu.worker.run_stamped`), its spans
read out of the table with the others' (`realexec.engine.spans`); a Python op, or one whose
input is poisoned, runs here (`_run_sync`) and logs its spans as it goes. In sync mode the
analysis is never asked: every op is done when its push returns.

`Pushes` is a part of `realexec.engine.native.NativeEngine`, which sets the state its methods
use (the table, its counters and records, the analysis, the names the table keeps as numbers,
the lanes, the log). Units: tokens (op numbers in push order), nanoseconds (perf_counter_ns).
"""

from __future__ import annotations

from time import perf_counter_ns

import numpy as np

from realexec.cpu.worker import PYTHON
from realexec.engine import layout
from realexec.engine.lanes import FRONTEND
from realexec.engine.shutdown import EngineStopped

_NONE = np.empty(0, np.int64)


class Pushes:
    """`push`, `push_native` and `throttle`."""

    def push(self, fn, reads=(), writes=(), lane: str = "cpu", name: str = "op", args=(),
             op_id: int = -1, t_issue: int | None = None) -> None:
        """Queue `fn(*args)` (run by a worker, with the GIL) after the ops on its vars."""
        self.push_native(PYTHON, 0, 0, 0, 0, 0, 0, 0.0, reads, writes, lane, name, op_id,
                         t_issue, fn, args)

    def push_native(self, kind, code, dtype, n, a, b, out, scalar, reads, writes,
                    lane="cpu", name="op", op_id=-1, t_issue=None, fn=None, args=()) -> None:
        """Queue an op that the compiled worker runs itself (`realexec.cpu.worker`): buffers
        are addresses of `n` items of `dtype`, and must stay alive until the op is done (the
        pool keeps them until the vars' deletions run). `push` comes here too, with kind
        `PYTHON` and the Python kernel `fn(*args)`: one call less on the frontend's path."""
        if self._closed:
            raise EngineStopped(f"{name}: {self._stopped or 'the engine is closed'}")
        if t_issue is None:
            t_issue = perf_counter_ns()
        token = self._next
        if self.max_inflight is not None and token - self._buf[layout.H_DONE] >= self.max_inflight:
            self.throttle(name, op_id)
        if token >= self._next_harvest:
            self._harvest(token)
        if self._frees and self._buf[layout.H_DONE] != self._frees_seen:
            self._run_frees()
        failed = 0
        if self._tainted and self._inherited(reads, writes) is not None:
            failed = layout.FAILED_INHERITED
        self._next = token + 1
        slot = token & (self.cap - 1)
        if self._sync:
            if kind != PYTHON and not failed:  # run and stamped in one compiled call
                self._run(self.state, slot, token, kind, code, dtype, n, a, b, out, scalar,
                          op_id, self._name_number(name), t_issue)
                return
            self._ops[slot] = (name, op_id, reads, writes, fn, args)
            self._run_sync(kind, slot, failed, name, op_id, t_issue)
            return
        self._ops[slot] = (name, op_id, reads, writes, fn, args)
        if self._lent:  # a var lent to light pushes gets their reads back before a write
            for v in writes:
                if v in self._lent:
                    self._unlend(v)
        preds = self._deps.add(token, reads, writes)
        np_ = len(preds)
        p0 = preds[0] if np_ > 0 else -1
        p1 = preds[1] if np_ > 1 else -1
        p2 = preds[2] if np_ > 2 else -1
        more = np.array(preds[3:], np.int64) if np_ > 3 else _NONE
        number = self._numbers.get(name)
        if number is None:
            number = self._name_number(name)
        # the push's own span is stamped by the push and read out with the exec spans
        self._push(self.state, slot, token, self._lane_index[lane], kind, code, dtype, n, a, b,
                   out, scalar, failed, p0, p1, p2, more, op_id, number, t_issue)

    def _name_number(self, name: str) -> int:
        """The number that stands for op name `name` in the table."""
        number = self._numbers.get(name)
        if number is None:
            self._numbers[name] = number = len(self._names)
            self._names.append(name)
        return number

    def _run_sync(self, kind, slot, failed, name, op_id, t_issue):
        # NaiveEngine: the op runs inside its push, shown on the lane's first worker, and a
        # frontend "wait" named after the op covers it (as asyncsim.simulate draws sync mode);
        # here a Python op or a failed one (native ops: `run_stamped`, spans in the table)
        start = perf_counter_ns()
        self._log.append((FRONTEND, "issue", name, op_id, t_issue, start))
        try:
            if failed:
                self._fail_python(slot)
            else:
                self._run_python(slot, self._labels[0], log=True)
        finally:
            self._ops[slot] = None
            self._buf[layout.H_DONE] += 1
            self._buf[layout.H_LOW] = self._next
            self._log.append((FRONTEND, "wait", name, op_id, start, perf_counter_ns()))

    def throttle(self, name: str = "op", op_id: int = -1) -> None:
        """Block while `max_inflight` ops are pending (a "wait" span named "max_inflight")."""
        cap = self.max_inflight
        if cap is None or self._next - self._buf[layout.H_DONE] < cap:
            return
        start = perf_counter_ns()
        self._wait(1, self._next - cap + 1)
        if self._frees:  # the cap bounds memory too: what the finished ops held comes back
            self._run_frees()
        self._log.append((FRONTEND, "wait", "max_inflight", op_id, start, perf_counter_ns()))
