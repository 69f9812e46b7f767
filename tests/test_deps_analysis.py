"""The dependency analysis on its own (`asyncsim.nd.deps.Deps`): each hazard, the pruning that
bounds reader lists, the queries a blocker and a deletion use, and, for random programs, that its
predecessors order ops exactly as MXNet's ThreadedVar rules do; then that DepTracker, built on it,
releases ops in any completion order exactly when their conflicting earlier ops are done."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncsim.model.deps import DepTracker
from asyncsim.nd.deps import PRUNE, Deps

# -- each hazard ----------------------------------------------------------------------------------


def test_read_after_write_waits_for_the_write():
    deps = Deps()
    assert deps.add(0, (), ("x",)) == []
    assert deps.add(1, ("x",), ("y",)) == [0]


def test_write_after_read_waits_for_every_read_since_the_last_write():
    deps = Deps()
    deps.add(0, (), ("x",))
    deps.add(1, ("x",), ("y",))
    deps.add(2, ("x",), ("z",))
    # the reads waited for 0, so waiting for them covers it
    assert sorted(deps.add(3, (), ("x",))) == [1, 2]


def test_write_after_write_waits_for_the_previous_write():
    deps = Deps()
    deps.add(0, (), ("x",))
    assert deps.add(1, (), ("x",)) == [0]
    assert deps.add(2, (), ("x",)) == [1]


def test_reads_do_not_wait_for_each_other():
    deps = Deps()
    deps.add(0, (), ("x",))
    assert deps.add(1, ("x",), ("y",)) == [0]
    assert deps.add(2, ("x",), ("z",)) == [0]
    assert deps.add(3, ("x",), ()) == [0]


def test_reads_of_a_never_written_var_wait_for_nothing():
    deps = Deps()
    assert deps.add(0, ("w",), ("a",)) == []
    assert deps.add(1, ("w",), ("b",)) == []


def test_read_and_write_of_one_var_counts_as_a_write():
    """`x += 1` waits for the readers of x, and is not itself left behind as a reader of x."""
    deps = Deps()
    deps.add(0, (), ("x",))
    deps.add(1, ("x",), ("y",))
    assert deps.add(2, ("x",), ("x",)) == [1]
    assert deps.users("x") == [2]
    assert deps.add(3, ("x",), ()) == [2]
    assert deps.add(4, ("x",), ("x",)) == [3]


def test_ops_on_different_vars_are_independent():
    deps = Deps()
    deps.add(0, (), ("a",))
    deps.add(1, ("a",), ("b",))
    assert deps.add(2, ("c",), ("d",)) == []
    assert deps.add(3, (), ("e",)) == []


def test_a_write_after_reads_of_a_fresh_var_waits_only_for_those_reads():
    deps = Deps()
    deps.add(0, ("w",), ("a",))
    assert deps.add(1, (), ("w",)) == [0]


# -- pruning --------------------------------------------------------------------------------------


def _read_many(deps, count, done):
    for token in range(count):
        deps.add(token, ("w",), ())
        done.add(token)  # each read finishes before the next is added


def test_without_a_finished_predicate_reader_lists_are_kept_whole():
    deps, done = Deps(), set()
    _read_many(deps, 3 * PRUNE, done)
    assert deps.users("w") == list(range(3 * PRUNE))


def test_finished_readers_are_pruned_so_the_list_stays_bounded():
    done: set = set()
    deps = Deps(finished=done.__contains__)
    _read_many(deps, 20 * PRUNE, done)
    assert len(deps.users("w")) <= PRUNE + 1
    # the latest reader stays findable: it is what a deletion of the var must follow
    assert deps.last_use("w") == 20 * PRUNE - 1


def test_pruning_keeps_every_unfinished_reader():
    done: set = set()
    deps = Deps(finished=done.__contains__)
    for token in range(5 * PRUNE):
        deps.add(token, ("w",), ())
        if token % 7:
            done.add(token)
    unfinished = [t for t in range(5 * PRUNE) if t % 7 == 0]
    assert set(unfinished) <= set(deps.users("w"))
    assert set(unfinished) <= set(deps.add(5 * PRUNE, (), ("w",)))


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.integers(0, 3), min_size=1, max_size=6 * PRUNE))
def test_pruning_never_drops_an_unfinished_reader(steps):
    """Reads of one var interleaved with finishes (step 0 finishes the oldest running read,
    any other step adds a read): every running read stays listed; the list is never longer
    than four times the most reads that ran at once (or PRUNE), and weeding it asks `finished`
    at most four times per read."""
    done: set = set()
    asked = [0]

    def finished(token):
        asked[0] += 1
        return token in done

    deps = Deps(finished=finished)
    running: list[int] = []
    token = most = 0
    for step in steps:
        if step == 0 and running:
            done.add(running.pop(0))
            continue
        deps.add(token, ("w",), ())
        running.append(token)
        token += 1
        most = max(most, len(running))
        users = deps.users("w")
        assert set(running) <= set(users)
        assert len(users) <= max(PRUNE, 4 * most)
    assert asked[0] <= 4 * token
    if token:
        assert set(running) <= set(deps.add(token, (), ("w",)))


def _hovering_window(low: bool, window: int = 120, reads: int = 4000) -> tuple[int, list]:
    """`reads` reads of x, each finishing `window` reads later: (how many times `finished` was
    asked, x's reader list at the end)."""
    asked, now = [0], [0]

    def finished(t):
        asked[0] += 1
        return t < now[0] - window

    deps = Deps(finished=finished, low=(lambda: now[0] - window) if low else None)
    for token in range(reads):
        now[0] = token
        deps.add(token, ("x",), (("y", token),))
    return asked[0], deps.users("x")


@pytest.mark.parametrize("low", [False, True])
def test_a_long_list_of_running_reads_is_not_weeded_at_every_read(low):
    """120 reads of x always running (each finishes 120 reads later, as `small_ops`' queued
    products do): the list hovers just under 128. Weeding it at each return to 128 asked
    `finished` of ~128 tokens every 8 reads, 16 asks a read; it must stay a few."""
    asked, users = _hovering_window(low)
    assert asked <= 3 * 4000
    assert set(range(4000 - 120, 4000)) <= set(users)


def test_an_op_reading_a_var_twice_is_listed_once():
    deps = Deps()
    deps.add(0, (), ("x",))
    assert deps.add(1, ("x", "x"), ("y",)) == [0, 0]
    assert deps.users("x") == [1]
    assert sorted(deps.add(2, (), ("x",))) == [1]


# -- queries --------------------------------------------------------------------------------------


def test_last_write_names_the_latest_write_and_ignores_reads():
    deps = Deps()
    assert deps.last_write("x") is None
    deps.add(0, (), ("x",))
    deps.add(1, ("x",), ("y",))
    assert deps.last_write("x") == 0
    deps.add(2, ("x",), ("x",))
    assert deps.last_write("x") == 2
    assert deps.last_write("y") == 1


def test_last_use_is_the_latest_op_touching_the_var():
    deps = Deps()
    assert deps.last_use("x") is None
    deps.add(0, (), ("x",))
    assert deps.last_use("x") == 0
    deps.add(1, ("x",), ("y",))
    deps.add(2, ("x",), ("z",))
    assert deps.last_use("x") == 2
    deps.add(3, (), ("x",))
    assert deps.last_use("x") == 3
    deps.add(4, ("q",), ())
    assert deps.last_use("x") == 3


def test_users_are_what_a_write_pushed_now_would_wait_for():
    deps = Deps()
    assert deps.users("x") == []
    deps.add(0, (), ("x",))
    assert deps.users("x") == [0]
    deps.add(1, ("x",), ("y",))
    deps.add(2, ("x",), ("z",))
    users = deps.users("x")
    assert users == [1, 2]
    users.append(99)  # a copy: the caller may not corrupt the analysis
    assert sorted(deps.add(3, (), ("x",))) == [1, 2]
    assert deps.users("x") == [3]


def test_forget_drops_a_var_entirely():
    deps = Deps()
    deps.add(0, (), ("x",))
    deps.add(1, ("x",), ("y",))
    deps.forget("x")
    assert deps.last_write("x") is None
    assert deps.last_use("x") is None
    assert deps.users("x") == []
    assert deps.add(2, ("x",), ("x",)) == []
    assert deps.last_write("y") == 1  # other vars untouched
    deps.forget("never-seen")  # forgetting an unknown var is harmless


@settings(max_examples=100, deadline=None)
@given(program=st.lists(st.tuples(st.lists(st.integers(0, 3), max_size=3),
                                  st.lists(st.integers(0, 3), max_size=2, unique=True)),
                        min_size=1, max_size=12), var=st.integers(0, 3))
def test_drop_is_users_then_forget(program, var):
    """What a deletion asks in one step: the same tokens as `users`, and the var forgotten."""
    one, two = Deps(), Deps()
    for token, (reads, writes) in enumerate(program):
        one.add(token, tuple(reads), tuple(writes))
        two.add(token, tuple(reads), tuple(writes))
    expected = one.users(var)
    one.forget(var)
    assert two.drop(var) == expected
    assert two.users(var) == [] and two.last_write(var) is None
    assert two.writer == one.writer and two.readers == one.readers


# -- random programs against the brute-force rules ---------------------------------------------

VARS = 4


@st.composite
def programs(draw, max_ops=14, unique_writes=True):
    """A list of (reads, writes) over a few vars; reads may repeat a var (`x * x`)."""
    count = draw(st.integers(1, max_ops))
    var = st.integers(0, VARS - 1)
    return [(tuple(draw(st.lists(var, max_size=3))),
             tuple(draw(st.lists(var, max_size=2, unique=unique_writes))))
            for _ in range(count)]


def conflicts(a, b) -> bool:
    """Two ops share a var that at least one of them writes (ThreadedVar orders them)."""
    (ra, wa), (rb, wb) = a, b
    return bool(set(wa) & (set(rb) | set(wb)) or set(wb) & set(ra))


@settings(max_examples=200, deadline=None)
@given(program=programs())
def test_predecessors_order_exactly_the_conflicting_ops(program):
    """Every earlier op that conflicts with an op is among its ancestors (the transitive closure
    of the predecessors), and every direct predecessor is earlier and conflicts with it."""
    deps = Deps()
    ancestors: list[set] = []
    for j, (reads, writes) in enumerate(program):
        preds = deps.add(j, reads, writes)
        for p in preds:
            assert p < j
            assert conflicts(program[p], program[j])
        closure = set(preds)
        for p in preds:
            closure |= ancestors[p]
        ancestors.append(closure)
        for i in range(j):
            if conflicts(program[i], program[j]):
                assert i in closure, (i, j)


@settings(max_examples=200, deadline=None)
@given(program=programs(unique_writes=False), data=st.data())
def test_tracker_releases_each_op_once_when_its_conflicts_are_done(program, data):
    """Pushes, completions of any running op and frees of any var, interleaved at random: each
    op is released exactly once, right when every conflicting earlier op has completed (not
    before, not later), in issue order within one completion, and last_write names the latest
    unfinished write."""
    tracker = DepTracker()
    pushed, released, done, running = 0, set(), set(), []
    frees = 0

    def must_wait(j):
        return any(i not in done and conflicts(program[i], program[j]) for i in range(j))

    def release(tokens):
        assert tokens == sorted(tokens)
        for t in tokens:
            assert t not in released
            assert not must_wait(t)
            released.add(t)
            running.append(t)

    while pushed < len(program) or running:
        moves = (["push"] if pushed < len(program) else []) + (["complete"] if running else [])
        if frees < len(program):
            moves.append("free")
        move = data.draw(st.sampled_from(moves))
        if move == "push":
            reads, writes = program[pushed]
            if tracker.push(pushed, reads, writes):
                release([pushed])
            pushed += 1
        elif move == "complete":
            token = running.pop(data.draw(st.integers(0, len(running) - 1)))
            done.add(token)
            release(tracker.complete(token))
        else:
            # a freed var stays ordered even if named again: forgetting must never lose an edge
            tracker.forget(data.draw(st.integers(0, VARS - 1)))
            frees += 1
        for j in range(pushed):
            assert (j in released) != must_wait(j)
        assert tracker.waiting() == pushed - len(released)
        for var in range(VARS):
            writers = [j for j in range(pushed) if var in program[j][1]]
            expected = writers[-1] if writers and writers[-1] not in done else None
            assert tracker.last_write(var) == expected
    assert released == done == set(range(len(program)))
    assert tracker.waiting() == 0


# -- the engine's shortcuts ---------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(program=programs(), fresh=st.lists(st.tuples(st.integers(0, 13), st.integers(0, 3)),
                                          max_size=10))
def test_add_fresh_answers_as_add_does(program, fresh):
    """`add_fresh(token, x, y)`, the engine's `y = f(x)` with y a fresh var, leaves the analysis
    as `add(token, (x,), (y,))` does and names the same predecessor, wherever it falls in a
    program (its read may be a var written or read before, or an earlier fresh result)."""
    ops = [("any", r, w) for r, w in program]
    for place, read in sorted(fresh, reverse=True):
        ops.insert(min(place, len(ops)), ("fresh", read, None))
    general, shortcut = Deps(), Deps()
    made = 0
    for token, (kind, reads, writes) in enumerate(ops):
        if kind == "any":
            assert general.add(token, reads, writes) == shortcut.add(token, reads, writes)
            continue
        read = reads if made == 0 or reads % 2 else f"fresh{made - 1}"  # x, or an earlier result
        write = f"fresh{made}"
        made += 1
        expected = general.add(token, (read,), (write,))
        assert expected in ([], [shortcut.writer.get(read)])
        assert shortcut.add_fresh(token, read, write) == (expected[0] if expected else -1)
    assert general.writer == shortcut.writer and general.readers == shortcut.readers


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(st.integers(0, 3), min_size=1, max_size=6 * PRUNE), at=st.integers(0, 8))
def test_a_low_water_mark_prunes_as_asking_each_reader_does(steps, at):
    """A reader list pruned with `low` (every token below it finished) keeps what asking
    `finished` of every token keeps, and `finished` is asked only of tokens at or above it."""
    done: set = set()
    asked: list[int] = []
    mark = [0]

    def finished(token):
        asked.append(token)
        return token in done

    plain, marked = Deps(finished=done.__contains__), Deps(finished=finished,
                                                           low=lambda: mark[0])
    running: list[int] = []
    token = 0
    for step in steps:
        if step == 0 and running:  # the oldest running read finishes, or one `at` further on
            done.add(running.pop(min(at, len(running) - 1)))
            mark[0] = running[0] if running else token
            continue
        plain.add(token, ("w",), ())
        marked.add(token, ("w",), ())
        running.append(token)
        token += 1
        assert marked.users("w") == plain.users("w")
        assert all(t >= mark[0] for t in asked if t != token - 1)
        asked.clear()
