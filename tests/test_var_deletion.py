"""Deleting an engine var (the frontend dropped its last handle): the release runs exactly once,
when the last op pushed on the var has finished, as MXNet's DeleteVariable (a write pushed last)
would; `wait_all` returns only after it ran.
"""

from __future__ import annotations

import random
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

import realexec
from realexec.engine.deps import Deps, OpRecord, Var


def op(name, reads=(), writes=()):
    return OpRecord(None, (), tuple(reads), tuple(writes), name=name)


def _complete(deps, record):
    ready, released = [], []
    deps.complete(record, None, ready, released)
    return ready, released


def test_deleted_var_is_released_after_its_last_reader():
    """With two readers and a queued writer pending, a deleted var is reported as released only
    when the writer, its last op, completes."""
    deps, a = Deps(), Var("a")
    r1, r2, w = op("r1", reads=[a]), op("r2", reads=[a]), op("w", writes=[a])
    deps.add(r1)
    deps.add(r2)
    deps.add(w)
    a.on_idle = print  # what Engine.delete_var stores: the var has pending ops
    assert _complete(deps, r1) == ([], [])
    assert _complete(deps, r2) == ([w], [])
    assert _complete(deps, w) == ([], [a])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=8), st.integers(0, 2**32 - 1))
def test_release_comes_once_after_every_op_whatever_the_order(writes, seed):
    """For any mix of reads and writes on a deleted var, completed in any order the rules allow,
    the var is released once, by the completion of the last op."""
    rng = random.Random(seed)
    deps, a = Deps(), Var("a")
    ops = [op(f"op{i}", writes=[a]) if w else op(f"op{i}", reads=[a])
           for i, w in enumerate(writes)]
    running = [o for o in ops if deps.add(o)]
    a.on_idle = print
    releases, left = [], len(ops)
    while running:
        o = running.pop(rng.randrange(len(running)))
        ready, released = _complete(deps, o)
        left -= 1
        running += ready
        releases += [left] * len(released)
    assert releases == [0]


def test_wait_all_waits_for_the_release():
    """A var deleted while an op still writes it is released when that op finishes, and
    wait_all returns only after the release ran."""
    gate, released = threading.Event(), []
    with realexec.Engine(workers=1) as engine:
        var = engine.new_var("v")
        engine.push(gate.wait, (), (var,))
        engine.delete_var(var, released.append, ("v",))
        assert released == []  # its op is still running
        gate.set()
        engine.wait_all()
        assert released == ["v"]


def test_a_deletion_does_not_wait_for_an_earlier_one_whose_op_runs_long():
    """The compiled engine keeps pending deletions in the order of their last op; one whose ops
    finished comes back while an earlier one's op still runs, once enough ops have finished
    (`frees._RESCAN`), and the earlier one comes back when its op is done."""
    from realexec.engine import frees

    gate, released = threading.Event(), []
    with realexec.NativeEngine(workers=2) as engine:
        held, var, tail = engine.new_var("held"), engine.new_var("v"), engine.new_var("tail")
        engine.push(gate.wait, (), (held,))
        engine.delete_var(held, released.append, ("held",))
        for _ in range(frees._RESCAN):  # a chain on the other worker
            engine.push(lambda: None, (), (var, tail))
        engine.delete_var(var, released.append, ("v",))
        engine.wait_for_var(tail)  # the chain is done: its deletion comes back here
        assert released == ["v"]
        gate.set()
        engine.wait_all()
        assert released == ["v", "held"]


def test_a_push_looks_at_pending_deletions_only_after_an_op_finished(monkeypatch):
    """Pushes behind a held op, each deleting the var the push before wrote: no op finishes
    meanwhile, so after the first no push looks at the pending deletions (a look per push cost
    a frontend running ahead of its workers microseconds an op). Once the ops have finished,
    the next push gives back every deletion, and nothing is given back twice."""
    gate, released, looks = threading.Event(), [], []
    with realexec.NativeEngine(workers=1) as engine:
        look = engine._run_frees
        monkeypatch.setattr(engine, "_run_frees",
                            lambda every=False: (looks.append(every), look(every)))
        held = engine.new_var("held")
        engine.push(gate.wait, (), (held,))
        previous = None
        for k in range(40):
            var = engine.new_var(f"v{k}")
            engine.push(lambda: None, (held,), (var,))
            if previous is not None:
                engine.delete_var(previous, released.append, (k - 1,))
            previous = var
        assert len(looks) == 1 and released == []
        gate.set()
        engine.wait_for_var(previous)
        engine.push(lambda: None, (), (engine.new_var("after"),))
        assert sorted(released) == list(range(39))
        engine.delete_var(previous, released.append, (39,))
        engine.wait_all()
        assert sorted(released) == list(range(40))


def test_a_backlog_of_deletions_is_looked_at_once_per_share_of_it():
    """With more deletions pending than `_SHARE` x `_RESCAN`, the look at every one of them waits
    for a `_SHARE`th of their number of finished ops (not `_RESCAN`), so a backlog costs a
    bounded number of looks per finished op; the ones it finds done come back then, the one
    whose op still runs stays."""
    import itertools
    from array import array

    from realexec.engine import frees, layout

    class Frontend(frees.DeferredFrees):
        """The state `DeferredFrees` reads, with a set of finished tokens for the table."""

        def __init__(self):
            self._buf = array("q", bytes(8 * 64))
            self.finished: set[int] = set()
            self._done = self.finished.__contains__
            self._deps = type("Users", (), {"drop": staticmethod(lambda users: users)})()
            self._frees, self._free_seq = [], itertools.count()
            self._scanned, self._frees_seen = 0, -1
            self._closed, self._lock, self._failures = False, threading.RLock(), []

    front, back = Frontend(), []
    front.delete_var([0], back.append, ("held",))  # its op never finishes: the heap's top
    n = frees._SHARE * 2 * frees._RESCAN
    for token in range(1, n + 1):
        front.delete_var([token], back.append, (token,))
    front.finished.update(range(1, n + 1))
    front._buf[layout.H_DONE] = frees._RESCAN
    front._run_frees()
    assert back == [] and len(front._frees) == n + 1  # a look now would have freed them all
    front._buf[layout.H_DONE] = (n + 1) // frees._SHARE
    front._run_frees()
    assert sorted(back) == list(range(1, n + 1)) and [e[4] for e in front._frees] == [("held",)]
