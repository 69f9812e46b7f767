"""The compiled engine's spans: read out of its op table in blocks, made into tuples when read.

A push stamps its own "issue" span (start and end) in its op's record, and a compiled worker
stamps each native op's "exec" span there too. The frontend copies both out of the table in
blocks of a few hundred ops (`_harvest`, every `2 * BLOCK` pushes, and before a slot is
reused), as numpy arrays filled by one compiled loop (`read_out`), and frees those slots'
Python records; the log's tuples are made only when the log is read (`flush`, `spans`). Made per
op on the push path, they cost 0.3-0.7 us of a 6 us `y = x + 1` (`benchmarks/overhead.py`,
2-core Xeon VM). Sync mode's native ops (`realexec.cpu.worker.run_stamped`) stamp both there
too, and their frontend "wait" is read out with their exec span. Python ops' exec spans,
blockers' waits and the spans of sync mode's Python ops go to the log as they happen.

`TableSpans` is a part of `realexec.engine.native.NativeEngine`, which sets the state its
methods use: the table (`state`, `_buf`, `cap`), the Python records of its slots (`_ops`), the
next token (`_next`) and the tokens read out so far (`_harvested`), `_trace`, `_log` and the
blocks not yet in it (`_blocks`), the op names and lane labels that the table stores as numbers
(`_names`, `_labels`), `origin_ns`, `_sync`, `_closed` and `_wait`. Units: nanoseconds
(perf_counter_ns) in the table and the log, seconds in `spans`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from asyncsim.nd.trace import Span
from realexec.cpu.worker import PYTHON
from realexec.engine import layout
from realexec.engine.lanes import FRONTEND

BLOCK = 256  # spans are read out of the table this many ops at a time
RECHECK = 64  # pushes between two read-outs while the workers lag behind the frontend
# the fields an issue span and an exec span are made of (`read_out` copies them, in this order)
_ISSUE_FIELDS = (layout.F_NAME, layout.F_OP, layout.F_ISSUE, layout.F_ISSUED)
_EXEC_FIELDS = (layout.F_WORKER, layout.F_NAME, layout.F_OP, layout.F_START, layout.F_END)


class TableSpans:
    """Reading the spans the table holds into the engine's log."""

    def _harvest(self, token: int, beyond: bool = False) -> None:
        """Copy the spans of the ops below the low-water mark (with `beyond`, of every op pushed:
        the issue spans, and the exec spans of the finished native ops) out of the table into
        `_blocks`, as arrays, and free the slots below the mark; first wait, if the slot that op
        `token` needs still holds an op not read out. No Python object per op: the frontend
        runs this every few hundred pushes, and `flush` makes the spans' tuples when the log is
        read (why, in the module docstring)."""
        if token - self.cap >= self._buf[layout.H_LOW] and not self._closed:
            self._wait(2, token - self.cap + 1)
        lo, low = self._harvested, min(self._buf[layout.H_LOW], token)
        # the next read-out: a block's worth of ops later, or `RECHECK` pushes later while the
        # workers lag (it was every push then, each copying out the few ops done since), but
        # before a push could need a slot whose op is not done
        self._next_harvest = min(max(low + self._harvest_every, token + RECHECK), low + self.cap)
        hi = self._next if beyond else low
        if hi <= lo:
            return
        if self._trace is not False:
            n = hi - lo
            issues, execs = np.empty((len(_ISSUE_FIELDS), n), np.int64), np.empty(
                (len(_EXEC_FIELDS), n), np.int64)
            k, m = read_out(self.state, lo, hi, issues, execs)
            self._blocks.append((issues[:, :k], execs[:, :m], self._sync))
            if self._trace is not True:  # a bounded log: keep no more than it would
                self._spans_out()
        _clear(self._ops, lo, low)
        self._harvested = low

    def _spans_out(self) -> None:
        """Turn the blocks that `_harvest` copied out into the log's spans."""
        blocks, self._blocks = self._blocks, []
        names, labels, log = self._names, self._labels, self._log
        for issues, execs, waited in blocks:
            log.extend([(FRONTEND, "issue", names[k], o, a, b) for k, o, a, b in zip(
                *(c.tolist() for c in issues), strict=True)])
            execs = [c.tolist() for c in execs]
            log.extend([(labels[w], "exec", names[k], o, a, b) for w, k, o, a, b in zip(
                *execs, strict=True)])
            if waited:  # sync mode: the frontend waited through each op it ran
                log.extend([(FRONTEND, "wait", names[k], o, a, b) for _, k, o, a, b in zip(
                    *execs, strict=True)])

    def flush(self) -> None:
        """Read the spans of every op pushed so far (of the native ops, of those finished) into
        `log`."""
        self._harvest(self._next, beyond=True)
        self._spans_out()

    def spans(self) -> list[Span]:
        """Every span recorded so far, in seconds from `origin_ns`, ordered by start."""
        self.flush()
        t0 = self.origin_ns
        spans = [Span(lane, name, op_id, (a - t0) * 1e-9, (b - t0) * 1e-9, kind)
                 for lane, kind, name, op_id, a, b in list(self._log)]
        spans.sort(key=lambda s: s.start)
        return spans


@njit(nogil=True, cache=True)
def read_out(s, lo, hi, issues, execs):
    """Copy the spans of tokens lo..hi-1 out of table `s`: each op's issue span (if not read
    yet) as a column of `issues` (`_ISSUE_FIELDS`), and each finished native op's exec span
    (if not read yet) as a column of `execs` (`_EXEC_FIELDS`); mark both read, so that a
    later read-out of the same tokens skips them. Returns how many of each. Compiled: with
    numpy's fancy indexing over the table's columns a read-out cost 0.1 us per op of a
    `y = x + 1` loop in sync mode (57 us a block, 2-core AMD EPYC VM)."""
    cap = s[layout.H_CAP]
    k = m = 0
    for token in range(lo, hi):
        base = layout.at(token & (cap - 1), 0)
        if s[base + layout.F_ISSUE] != 0:
            for i in range(len(_ISSUE_FIELDS)):
                issues[i, k] = s[base + _ISSUE_FIELDS[i]]
            s[base + layout.F_ISSUE] = 0
            k += 1
        if (s[base + layout.F_STATE] == layout.DONE and s[base + layout.F_START] != 0
                and s[base + layout.F_KIND] != PYTHON):
            for i in range(len(_EXEC_FIELDS)):
                execs[i, m] = s[base + _EXEC_FIELDS[i]]
            s[base + layout.F_START] = 0
            m += 1
    return k, m


def _clear(ops: list, lo: int, hi: int) -> None:
    """Drop the records of tokens lo..hi-1 from `ops`, a ring of slots (token t in t % len)."""
    cap = len(ops)
    n = hi - lo
    if n <= 0:
        return
    a = lo & (cap - 1)
    if n >= cap:
        ops[:] = [None] * cap
    elif a + n <= cap:
        ops[a:a + n] = [None] * n
    else:  # wraps around the end of the ring
        ops[a:] = [None] * (cap - a)
        ops[:a + n - cap] = [None] * (a + n - cap)
