"""The dependency rules of realexec.engine.deps, as plain single-threaded unit tests (no threads).

Each hazard case (RAW, WAR, WAW, many readers then a writer, a writer then many readers) is
checked by pushing ops into `Deps`, completing some, and looking at which ops became ready. A
property test then runs random programs under a random completion schedule and checks that every
pair of conflicting ops runs in push order and that nothing deadlocks.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from realexec.engine.deps import Deps, Failure, OpRecord, Var


def op(name, reads=(), writes=()):
    return OpRecord(None, (), tuple(reads), tuple(writes), name=name)


def complete(deps, record, failure=None):
    ready: list = []
    deps.complete(record, failure, ready)
    return ready


def test_read_after_write_waits_for_the_write():
    """A read pushed after a write becomes ready only when the write completes."""
    deps, a = Deps(), Var("a")
    w, r = op("w", writes=[a]), op("r", reads=[a])
    assert deps.add(w)
    assert not deps.add(r)
    assert complete(deps, w) == [r]


def test_write_after_read_waits_for_the_read():
    """A write pushed after a read waits until the read completes."""
    deps, a = Deps(), Var("a")
    r, w = op("r", reads=[a]), op("w", writes=[a])
    assert deps.add(r)
    assert not deps.add(w)
    assert complete(deps, r) == [w]


def test_write_after_write_keeps_push_order():
    """A second write waits for the first."""
    deps, a = Deps(), Var("a")
    w1, w2 = op("w1", writes=[a]), op("w2", writes=[a])
    assert deps.add(w1)
    assert not deps.add(w2)
    assert complete(deps, w1) == [w2]
    assert complete(deps, w2) == []
    assert a.idle


def test_many_readers_then_a_writer():
    """Consecutive reads all start at once; the writer starts only after the last one ends."""
    deps, a = Deps(), Var("a")
    readers = [op(f"r{i}", reads=[a]) for i in range(4)]
    writer = op("w", writes=[a])
    assert all(deps.add(r) for r in readers)
    assert not deps.add(writer)
    for r in readers[:-1]:
        assert complete(deps, r) == []
    assert complete(deps, readers[-1]) == [writer]


def test_a_writer_then_many_readers():
    """Reads queued behind a write all become ready together when it completes."""
    deps, a = Deps(), Var("a")
    writer = op("w", writes=[a])
    readers = [op(f"r{i}", reads=[a]) for i in range(4)]
    assert deps.add(writer)
    assert not any(deps.add(r) for r in readers)
    assert complete(deps, writer) == readers


def test_reads_after_a_queued_write_wait_for_it():
    """R1, W, R2: W waits for R1; R2 waits for W even though R1 is still running."""
    deps, a = Deps(), Var("a")
    r1, w, r2 = op("r1", reads=[a]), op("w", writes=[a]), op("r2", reads=[a])
    assert deps.add(r1)
    assert not deps.add(w)
    assert not deps.add(r2)
    assert complete(deps, r1) == [w]
    assert complete(deps, w) == [r2]


def test_independent_vars_do_not_wait():
    """Ops on different vars are ready at once; reads of one var run together."""
    deps, a, b = Deps(), Var("a"), Var("b")
    assert deps.add(op("wa", writes=[a]))
    assert deps.add(op("wb", writes=[b]))
    c = Var("c")
    assert deps.add(op("r1", reads=[c]))
    assert deps.add(op("r2", reads=[c]))


def test_an_op_waits_for_every_var():
    """An op reading two vars becomes ready only after both of their writers complete."""
    deps, a, b, c = Deps(), Var("a"), Var("b"), Var("c")
    wa, wb = op("wa", writes=[a]), op("wb", writes=[b])
    add = op("add", reads=[a, b], writes=[c])
    deps.add(wa)
    deps.add(wb)
    assert not deps.add(add)
    assert complete(deps, wb) == []
    assert complete(deps, wa) == [add]


def test_in_place_op_counts_as_a_write_only():
    """An op that reads and writes the same var (a += b) holds it as a writer, once."""
    deps, a, b = Deps(), Var("a"), Var("b")
    inplace = op("iadd", reads=[a, b], writes=[a])
    assert inplace.reads == (b,) and inplace.writes == (a,)
    assert deps.add(inplace)
    assert a.writing and a.running_reads == 0
    complete(deps, inplace)
    assert a.idle and b.idle


def test_duplicate_reads_are_held_once():
    """x + x reads x once, so completing it leaves x idle for the next writer."""
    deps, x, y = Deps(), Var("x"), Var("y")
    double = op("add", reads=[x, x], writes=[y])
    assert double.reads == (x,)
    assert deps.add(double)
    w = op("w", writes=[x])
    assert not deps.add(w)
    assert complete(deps, double) == [w]


def test_failure_poisons_the_writes_only():
    """A failing op poisons what it writes; an op touching a poisoned var inherits the failure."""
    deps, a, b = Deps(), Var("a"), Var("b")
    bad = op("bad", reads=[b], writes=[a])
    deps.add(bad)
    failure = Failure("bad", 7, ValueError("boom"))
    complete(deps, bad, failure)
    assert a.failure is failure and b.failure is None
    assert Deps.inherited_failure(op("r", reads=[a])) is failure
    assert Deps.inherited_failure(op("w", writes=[a])) is failure
    assert Deps.inherited_failure(op("ok", reads=[b])) is None


def test_write_counts_track_pending_writes():
    """writes_pushed/writes_done say when every write pushed so far has finished."""
    deps, a = Deps(), Var("a")
    w1, w2 = op("w1", writes=[a]), op("w2", writes=[a])
    deps.add(w1)
    deps.add(w2)
    assert (a.writes_pushed, a.writes_done) == (2, 0)
    complete(deps, w1)
    complete(deps, w2)
    assert (a.writes_pushed, a.writes_done) == (2, 2)


# -- property: random programs under random schedules ---------------------------------------------

program_ops = st.lists(
    st.tuples(st.lists(st.integers(0, 3), max_size=3), st.lists(st.integers(0, 3), max_size=2)),
    min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(program_ops, st.integers(0, 2**32 - 1))
def test_random_schedules_respect_push_order(spec, seed):
    """Under any completion order, conflicting ops (sharing a var, one writing) run in push order
    and every op eventually runs."""
    rng = random.Random(seed)
    deps, vars_ = Deps(), [Var(str(i)) for i in range(4)]
    ops = [op(f"op{i}", [vars_[j] for j in reads], [vars_[j] for j in writes])
           for i, (reads, writes) in enumerate(spec)]
    running = [o for o in ops if deps.add(o)]
    started = {id(o): t for t, o in enumerate(running)}
    finished = {}
    clock = len(running)
    while running:
        o = running.pop(rng.randrange(len(running)))
        clock += 1
        finished[id(o)] = clock
        for r in complete(deps, o):
            clock += 1
            started[id(r)] = clock
            running.append(r)
    assert len(finished) == len(ops), "an op never became ready"
    for i, first in enumerate(ops):
        for later in ops[i + 1:]:
            shared = (set(first.writes) & (set(later.reads) | set(later.writes))) | (
                set(first.reads) & set(later.writes))
            if shared:
                assert finished[id(first)] < started[id(later)], (first, later)
    assert all(v.idle for v in vars_)
