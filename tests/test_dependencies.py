"""Dependency rules: DepTracker on its own (every hazard as a plain unit test), then the same rules
holding in simulated time (concurrency of independent ops, serialised hazards, random programs)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from asyncsim import Profile, predict
from asyncsim.model.deps import DepTracker
from asyncsim.model.profile import Cost
from asyncsim.nd.deps import PRUNE

# -- DepTracker, no time ------------------------------------------------------------------------


def test_read_after_write_waits_for_the_write():
    """A read of a var waits for the unfinished write before it and is released by it."""
    deps = DepTracker()
    assert deps.push(0, (), (1,))
    assert not deps.push(1, (1,), (2,))
    assert deps.complete(0) == [1]


def test_reads_of_one_var_run_together():
    """Consecutive reads of a written-and-finished var are all ready at once."""
    deps = DepTracker()
    deps.push(0, (), (1,))
    deps.complete(0)
    assert deps.push(1, (1,), (2,))
    assert deps.push(2, (1,), (3,))


def test_write_after_read_waits_for_every_reader():
    """A write waits until every read issued before it has finished, not just the first."""
    deps = DepTracker()
    assert deps.push(0, (1,), (2,))
    assert deps.push(1, (1,), (3,))
    assert not deps.push(2, (), (1,))
    assert deps.complete(0) == []
    assert deps.complete(1) == [2]


def test_write_after_write_waits_for_the_previous_write():
    """Two writes of a var run in issue order."""
    deps = DepTracker()
    assert deps.push(0, (), (1,))
    assert not deps.push(1, (), (1,))
    assert deps.complete(0) == [1]


def test_reads_after_a_waiting_write_wait_for_it():
    """A read issued after a write that is itself waiting waits for that write, not the old one."""
    deps = DepTracker()
    deps.push(0, (1,), (2,))  # a reader of var 1 runs
    deps.push(1, (), (1,))  # a write of var 1 waits for it
    assert not deps.push(2, (1,), (3,))
    assert deps.complete(0) == [1]
    assert deps.complete(1) == [2]


def test_in_place_update_is_a_write_of_its_target():
    """`x += 1` reads and writes x: it waits for earlier readers of x (write-after-read)."""
    deps = DepTracker()
    deps.push(0, (), (1,))
    deps.complete(0)
    deps.push(1, (1,), (2,))  # y = x * 2
    assert not deps.push(2, (1,), (1,))  # x += 1
    assert deps.complete(1) == [2]


def test_ops_on_different_vars_do_not_wait():
    """Ops that share no var are all ready when pushed."""
    deps = DepTracker()
    assert all(deps.push(i, (10 + i,), (20 + i,)) for i in range(5))


def test_newly_ready_ops_come_back_in_issue_order():
    """Ops released by one completion are listed in issue order."""
    deps = DepTracker()
    deps.push(0, (), (1,))
    for token in (3, 1, 2):
        deps.push(token, (1,), (10 + token,))
    assert deps.complete(0) == [1, 2, 3]


def test_last_write_is_what_a_blocker_waits_for():
    """last_write names the latest unfinished write of a var and clears once it finishes."""
    deps = DepTracker()
    deps.push(0, (), (1,))
    deps.push(1, (), (1,))
    assert deps.last_write(1) == 1
    deps.complete(0)
    deps.complete(1)
    assert deps.last_write(1) is None
    assert deps.waiting() == 0


def test_same_input_twice_is_consistent():
    """`x * x` reads x twice; it becomes ready exactly once, and a later write waits for it."""
    deps = DepTracker()
    deps.push(0, (), (1,))
    assert not deps.push(1, (1, 1), (2,))
    assert not deps.push(2, (), (1,))
    assert deps.complete(0) == [1]
    assert deps.complete(1) == [2]


def test_a_write_waits_for_every_one_of_many_running_reads():
    """However many reads of a var are running (far past the point where finished readers are
    weeded out), a write of it waits for the last of them."""
    deps = DepTracker()
    reads = 3 * PRUNE
    assert all(deps.push(i, (1,), (100 + i,)) for i in range(reads))
    assert not deps.push(reads, (), (1,))
    for i in range(reads - 1):
        assert deps.complete(i) == []
    assert deps.complete(reads - 1) == [reads]


def test_a_var_read_forever_keeps_bounded_bookkeeping():
    """A var read over and over but never written (a weight at inference) does not keep every
    finished reader."""
    deps = DepTracker()
    for i in range(20 * PRUNE):
        assert deps.push(i, (1,), (100 + i,))
        deps.complete(i)
    assert len(deps._deps.users(1)) <= PRUNE + 1


def test_a_var_freed_while_read_still_orders_a_later_write():
    """Freeing a var whose read is still running forgets nothing yet: a write naming it again
    waits for that read."""
    deps = DepTracker()
    deps.push(0, (), (1,))
    deps.complete(0)
    assert deps.push(1, (1,), (2,))
    deps.forget(1)
    assert not deps.push(2, (), (1,))
    assert deps.last_write(1) == 2
    assert deps.complete(1) == [2]


def test_a_freed_var_is_dropped_once_its_ops_finish():
    """The bookkeeping of a var freed while its ops run goes when the last of them finishes."""
    deps = DepTracker()
    deps.push(0, (), (1,))
    deps.push(1, (1,), (2,))
    deps.push(2, (1,), (3,))
    deps.forget(1)
    assert deps._deps.last_use(1) == 2
    deps.complete(0)
    deps.complete(2)
    assert deps._deps.last_use(1) == 2  # read 1 still runs
    deps.complete(1)
    assert deps._deps.last_use(1) is None
    assert deps._deps.last_use(2) == 1  # vars not freed stay


# -- the same rules in simulated time -------------------------------------------------------------


def _execs(trace):
    return sorted(trace.spans_of(kind="exec"), key=lambda s: s.op_id)


def test_two_workers_run_independent_creations_together():
    """z = x * y + 2 with two workers: the two `ones` run at the same time on different lanes, and
    the multiply starts only when both are done."""

    def z_graph(nd):
        x = nd.ones((1, 2))
        y = nd.ones((1, 2))
        z = x * y + 2
        print(z)

    trace = predict(z_graph, Profile.ideal(t1=1e-6, t2=1e-3, workers=2))
    ones_x, ones_y, mul, add = _execs(trace)
    assert {ones_x.lane, ones_y.lane} == {"cpu/w0", "cpu/w1"}
    assert ones_y.start < ones_x.end  # they overlap
    assert mul.start == max(ones_x.end, ones_y.end)
    assert add.start == mul.end


def test_in_place_write_waits_for_a_running_reader():
    """An in-place `x += 1` issued while `y = x * 2` runs starts only when that read is done,
    even with a free worker."""

    def war(nd):
        x = nd.ones((4,))
        x.wait_to_read()
        y = x * 2
        x += 1
        nd.waitall()
        return y

    profile = Profile.ideal(t1=1e-6, t2=1e-3, workers=2).replace(
        **{"cpu:mul_scalar.latency": 0.5, "cpu:add_scalar.latency": 0.1})
    _, reader, writer = _execs(predict(war, profile))
    assert (reader.name, writer.name) == ("mul_scalar", "add_scalar")
    assert writer.start == reader.end


def _script(nd, steps):
    arrays = [nd.ones((2,)) for _ in range(3)]
    for kind, i, j in steps:
        if kind == 0:
            arrays[i] = arrays[i] + arrays[j]
        elif kind == 1:
            arrays[i] += 1
        elif kind == 2:
            arrays[i] += arrays[j]
        elif kind == 3:
            arrays[i] = arrays[j] * 3
        else:
            arrays[i].wait_to_read()
    nd.waitall()


_steps = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2), st.integers(0, 2)),
                  max_size=25)
_latency = st.floats(1e-4, 1e-2)


@settings(max_examples=60, deadline=None)
@given(steps=_steps, workers=st.integers(1, 3), add=_latency, scale=_latency, inplace=_latency)
def test_hazards_are_serialised_in_random_programs(steps, workers, add, scale, inplace):
    """In any program, ops that touch a common var (one of them writing it) run one after the
    other in issue order; no op starts before its issue ends; a lane runs one op at a time."""
    from asyncsim import record, simulate

    program = record(_script, steps=steps)
    costs = {"cpu:add": Cost(latency=add), "cpu:mul_scalar": Cost(latency=scale),
             "cpu:add_scalar": Cost(latency=inplace), "cpu:*": Cost(latency=1e-3)}
    profile = Profile(name="random", t1=2e-4, t3=1e-4, workers=workers, costs=costs)
    trace = simulate(program, profile)
    runs = {s.op_id: s for s in trace.spans_of(kind="exec")}
    issued = {s.op_id: s for s in trace.spans_of(lane="frontend", kind="issue")}
    ops = program.ops
    for op in ops:
        assert runs[op.id].start >= issued[op.id].end
    for k, later in enumerate(ops):
        for earlier in ops[:k]:
            shared_write = (earlier.out in later.reads or later.out in earlier.reads
                            or earlier.out == later.out)
            if shared_write:
                assert runs[later.id].start >= runs[earlier.id].end - 1e-12
    for lane in trace.lanes:
        spans = sorted(trace.spans_of(lane=lane, kind="exec"), key=lambda s: s.start)
        assert all(a.end <= b.start + 1e-12 for a, b in zip(spans, spans[1:], strict=False))
