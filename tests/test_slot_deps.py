"""`realexec.engine.slotdeps`: the compiled dependency analysis by var slot gives `Deps`'s answer
for every program, and with finished ops weeded out below a low mark it drops only those."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncsim.nd.deps import Deps
from realexec.engine import slotdeps as rd

VARS = 5
ops = st.lists(st.one_of(
    st.tuples(st.just("op"), st.lists(st.integers(0, VARS - 1), max_size=3),
              st.lists(st.integers(0, VARS - 1), max_size=2)),
    st.tuples(st.just("drop"), st.integers(0, VARS - 1), st.just(()))), max_size=150)


def run(program, lows=None):
    """Each step's answer from `Deps` and from the compiled analysis (with `lows[i]` as the low
    mark of step i, or none)."""
    deps, (rows, nodes, pool) = Deps(), rd.new_deps(VARS, 512)
    preds = np.empty(600, np.int64)
    token, answers = 0, []
    for i, (kind, a, b) in enumerate(program):
        if kind == "drop":
            want = deps.drop(a)
            got = preds[:rd.drop(rows, nodes, pool, a, preds)].tolist()
        else:
            want = deps.add(token, a, b)
            n = rd.add(rows, nodes, pool, token, np.array(a, np.int64), np.array(b, np.int64),
                       0 if lows is None else lows[i], preds)
            assert n >= 0
            got = preds[:n].tolist()
            token += 1
        answers.append((want, got))
    return answers


@settings(max_examples=200, deadline=None)
@given(ops)
def test_the_same_predecessors_as_deps_in_the_same_order(program):
    for want, got in run(program):
        assert got == want


@settings(max_examples=100, deadline=None)
@given(ops, st.data())
def test_with_a_low_mark_only_finished_reads_are_left_out(program, data):
    # a low mark that only grows and stays at or below the op being added
    lows, low, token = [], 0, 0
    for kind, _, _ in program:
        low = data.draw(st.integers(low, max(low, token)))
        lows.append(low)
        token += kind == "op"
    for (want, got), low in zip(run(program, lows), lows, strict=True):
        assert set(got) <= set(want)
        assert all(t < low for t in set(want) - set(got))


def test_a_var_read_by_hundreds_in_flight_keeps_them_all_then_weeds_the_finished():
    rows, nodes, pool = rd.new_deps(2, 300)
    preds = np.empty(400, np.int64)
    for token in range(200):  # 200 reads of slot 0, none finished: all kept
        assert rd.add_fresh(rows, nodes, pool, token, 0, 1, 0) == -1
    assert rows[0, rd.LEN] == 200
    for token in range(200, 260):  # now all but the last five are done
        assert rd.add_fresh(rows, nodes, pool, token, 0, 1, token - 5) == -1
    # weeded when the list reached 256: what was left then, and the reads since
    assert rows[0, rd.LEN] < 20
    n = rd.drop(rows, nodes, pool, 0, preds)
    assert set(range(255, 260)) <= set(preds[:n].tolist()) <= set(range(250, 260))
    free, i = 0, pool[0]
    while i >= 0:
        free, i = free + 1, nodes[i, rd.LINK]
    assert free == 300  # every node back in the pool


def test_out_of_nodes_is_an_answer_not_a_write_past_the_pool():
    rows, nodes, pool = rd.new_deps(2, 2)
    assert rd.add_fresh(rows, nodes, pool, 0, 0, 1, 0) == -1
    assert rd.add_fresh(rows, nodes, pool, 1, 0, 1, 0) == -1
    assert rd.add_fresh(rows, nodes, pool, 2, 0, 1, 0) == rd.OUT_OF_NODES - 1
