"""benchmarks/ring_reader.py: the push with no call that `push_parts.py` times against numpy's op.
Its floor is only worth printing if the records it writes are the program: here a compiled
thread takes them through a ring small enough to wrap many times, and the values, the buffers'
reuse and the full ring's wait must come out right."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from ring_reader import RingReader  # noqa: E402

from asyncsim.nd.frontend import ND  # noqa: E402
from realexec.engine import layout  # noqa: E402
from realexec.engine.native import NativeEngine  # noqa: E402


@pytest.fixture
def reader():
    reader = RingReader(slots=256, table=64, items=4096).start()  # 40 records: it wraps
    yield reader
    reader.close()
    assert not reader.thread.is_alive()


def test_a_chain_through_a_wrapping_ring_gives_numpys_values(reader):
    nd = ND(reader)
    x = nd.ones((1, 3))
    expected = np.ones((1, 3), np.float32)
    y = x
    for i in range(500):  # each step: an op and a deletion, 12 ring passes in all
        y = y + float(i % 7)
        expected = expected + np.float32(i % 7)
    assert np.array_equal(np.ravel(y.asnumpy()), np.ravel(expected))
    assert np.array_equal(np.ravel(x.asnumpy()), np.ones(3, np.float32))
    # each op but the first waited for one, the write of what it read (x is written by the
    # reader itself, before any op is taken)
    assert reader.words[3] == 499


def test_deleted_buffers_are_reused(reader):
    nd = ND(reader)
    x = nd.zeros((4,))
    for _ in range(300):
        y = x + 1.0
    nd.waitall()
    # x, the live y and the one being replaced: the smallest class (16 items) at most 3 times,
    # where 300 fresh buffers would take 4800 items (more than the arena)
    assert reader.bump[0] <= 3 * 16
    assert np.ravel(y.asnumpy()).tolist() == [1.0] * 4


def test_a_full_table_is_an_error_not_a_hang(reader):
    """At the next push that needs the reader's room, or at the next wait."""
    nd = ND(reader)
    x = nd.ones((2,))
    kept = []
    with pytest.raises(RuntimeError, match="var table is full"):
        for _ in range(80):  # more live arrays than the table's 64 slots
            kept.append(x + 1.0)
        nd.waitall()
    del kept  # drops after the reader stopped write nothing, and never wait


def test_a_closed_reader_is_an_error_not_a_hang():
    reader = RingReader(slots=256).start()
    nd = ND(reader)
    x = nd.ones((2,))
    reader.close()
    with pytest.raises(RuntimeError, match="not running"):
        for _ in range(50):  # more than the ring's room
            x + 1.0
    with pytest.raises(RuntimeError, match="not running"):
        nd.waitall()


def test_only_what_the_reader_runs_is_accepted(reader):
    nd = ND(reader)
    with pytest.raises(NotImplementedError, match="normal"):
        nd.random.normal(shape=(3,))
    too_big = (1, (16 << 23) + 1)
    with pytest.raises(NotImplementedError, match=rf"up to {16 << 23} float32, not \(1, "):
        nd.ones(too_big)
    x = nd.ones((3,))
    with pytest.raises(NotImplementedError, match="mul_scalar"):
        x * 2.0
    assert np.ravel((x + 1.0).asnumpy()).tolist() == [2.0] * 3  # nothing half-written


def test_a_full_arena_is_an_error_not_a_write_past_it():
    reader = RingReader(slots=256, table=64, items=64).start()  # four buffers of 16 items
    try:
        nd = ND(reader)
        x = nd.ones((2,))
        kept = []
        with pytest.raises(RuntimeError, match="arena of 64 float32 is full"):
            for _ in range(4):
                kept.append(x + 1.0)
            nd.waitall()
        del kept
    finally:
        reader.close()


def test_a_reader_that_feeds_the_engines_table_gives_numpys_values():
    """The reader pushes each op into a compiled engine's table, behind its predecessor, and
    the engine's two workers run them: two chains side by side, their dropped buffers given
    back only once the ops reading them are done."""
    engine = NativeEngine(workers=2)
    reader = RingReader(slots=256, table=64, items=4096, engine=engine).start()
    try:
        nd = ND(reader)
        a, b = nd.ones((40,)), nd.zeros((40,))
        want_a, want_b = np.ones(40, np.float32), np.zeros(40, np.float32)
        for i in range(400):
            a, b = a + float(i % 5), b + 0.5
            want_a, want_b = want_a + np.float32(i % 5), want_b + np.float32(0.5)
        assert np.array_equal(np.ravel(a.asnumpy()), want_a)
        assert np.array_equal(np.ravel(b.asnumpy()), want_b)
        assert reader.words[4] == 800 and engine.state[layout.H_DONE] == 800
        assert reader.words[3] == 798  # every op but each chain's first waited for one
    finally:
        reader.close()
        engine.close()
