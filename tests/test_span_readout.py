"""Reading spans out of the compiled engine's table (`realexec.engine.spans.read_out`).

The frontend copies the spans that pushes and workers stamp in the op records out in blocks:
each op's issue span once it has one, each finished native op's exec span, each exactly once
however often a block is read (a flush reads ops that a later read-out reads again)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from realexec.cpu.worker import PYTHON, SCALAR
from realexec.engine import layout
from realexec.engine.spans import _EXEC_FIELDS, _ISSUE_FIELDS, read_out

CAP = 8

# per op: has an issue span, its state, its kind, has a start stamp
OPS = st.lists(st.tuples(st.booleans(),
                         st.sampled_from([layout.PENDING, layout.RUNNING, layout.DONE]),
                         st.sampled_from([SCALAR, PYTHON]), st.booleans()),
               min_size=1, max_size=CAP)


def _stamped(lo, ops):
    """A table whose tokens lo.. hold `ops`, every field a number that names op and field."""
    _, s = layout.new_state(CAP, 0)
    for i, (issued, state, kind, started) in enumerate(ops):
        token = lo + i
        base = layout.at(token & (CAP - 1), 0)
        for f in (*_ISSUE_FIELDS, *_EXEC_FIELDS):
            s[base + f] = 1000 * token + f + 1
        s[base + layout.F_TOKEN] = token
        s[base + layout.F_STATE], s[base + layout.F_KIND] = state, kind
        s[base + layout.F_ISSUE] = 1000 * token + layout.F_ISSUE + 1 if issued else 0
        s[base + layout.F_START] = 1000 * token + layout.F_START + 1 if started else 0
    return s


def _read(s, lo, hi):
    issues = np.full((len(_ISSUE_FIELDS), hi - lo), -1, np.int64)
    execs = np.full((len(_EXEC_FIELDS), hi - lo), -1, np.int64)
    k, m = read_out(s, lo, hi, issues, execs)
    return issues[:, :k], execs[:, :m]


@settings(max_examples=200, deadline=None)
@given(OPS, st.integers(0, 3 * CAP))
def test_each_issue_and_finished_native_exec_is_read_once(ops, lo):
    s = _stamped(lo, ops)
    hi = lo + len(ops)
    issues, execs = _read(s, lo, hi)
    want_issued = [lo + i for i, (issued, *_) in enumerate(ops) if issued]
    want_ran = [lo + i for i, (_, state, kind, started) in enumerate(ops)
                if state == layout.DONE and kind != PYTHON and started]
    # each column is one op's fields, in the order the log's spans are made from
    assert issues.T.tolist() == [[1000 * k + f + 1 for f in _ISSUE_FIELDS] for k in want_issued]
    assert execs.T.tolist() == [[1000 * k + f + 1 for f in _EXEC_FIELDS] for k in want_ran]
    again_issues, again_execs = _read(s, lo, hi)  # read: not again
    assert again_issues.shape[1] == again_execs.shape[1] == 0


def test_a_running_op_is_read_once_it_is_done():
    s = _stamped(5, [(True, layout.RUNNING, SCALAR, True)])
    issues, execs = _read(s, 5, 6)
    assert (issues.shape[1], execs.shape[1]) == (1, 0)
    s[layout.at(5, layout.F_STATE)] = layout.DONE
    issues, execs = _read(s, 5, 6)
    assert (issues.shape[1], execs.shape[1]) == (0, 1)
    assert execs[:, 0].tolist() == [5000 + f + 1 for f in _EXEC_FIELDS]
