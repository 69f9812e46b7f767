"""benchmarks/one_call.py: the push that is one compiled call, which `push_parts.py` times against
numpy's op. Its floor is only worth printing if its calls are the program: the values, the
predecessors it finds, the buffers' reuse and its errors must come out right, run in the call or
by an engine's workers, for any program of creations, ops and drops."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from one_call import OneCall  # noqa: E402

from asyncsim.nd.frontend import ND  # noqa: E402
from realexec.engine import layout  # noqa: E402
from realexec.engine.native import NativeEngine  # noqa: E402


def test_a_chain_in_the_call_equals_numpy_and_reuses_its_buffers():
    backend = OneCall(slots=16, items=16 * 8)  # room for 8 arrays: the chain must reuse
    nd = ND(backend)
    y = nd.ones((1, 2))
    for _ in range(500):
        y = y + 1
    assert y.asnumpy().tolist() == [501.0, 501.0]
    assert (backend.ops, backend.preds) == (500, 499)  # each op after the one before


def test_two_chains_on_two_engine_workers_equal_numpy():
    with NativeEngine(workers=2) as engine:
        backend = OneCall(slots=64, items=4096, engine=engine)
        nd = ND(backend)
        a, b = nd.ones((10,)), nd.ones((10,))
        for _ in range(400):
            a, b = a + 1, b + 2
        assert a.asnumpy().tolist() == [401.0] * 10
        assert b.asnumpy().tolist() == [801.0] * 10
        assert (backend.ops, backend.preds) == (800, 798)
        nd.waitall()
        assert engine.state[layout.H_DONE] == 800  # the engine's workers ran every op
        del a, b


def test_a_full_table_or_arena_is_an_error_at_the_call_with_nothing_changed():
    nd = ND(OneCall(slots=4, items=4096))
    kept = [nd.ones((2,)) for _ in range(4)]
    with pytest.raises(RuntimeError, match=r"add_scalar \(\(2,\)\): one call: its var table"):
        kept[0] + 1
    assert kept[0].asnumpy().tolist() == [1.0, 1.0]
    nd = ND(OneCall(slots=8, items=32))  # two arrays of the smallest class
    kept = [nd.ones((2,)), nd.ones((2,))]
    with pytest.raises(RuntimeError, match="its arena of 32 float32 is full"):
        kept[1] + 1
    del kept[0]  # its buffer comes back: the same op now finds room
    assert (kept[0] + 1).asnumpy().tolist() == [2.0, 2.0]


def test_unsupported_ops_and_sizes_are_refused_at_the_call():
    nd = ND(OneCall(slots=8, items=4096))
    x = nd.ones((3,))
    with pytest.raises(NotImplementedError, match="mul_scalar: one call only adds a scalar"):
        x * 2
    with pytest.raises(NotImplementedError, match="keeps arrays of up to"):
        nd.ones((1 << 28,))
    assert (x + 1).asnumpy().tolist() == [2.0] * 3


def test_an_engine_that_runs_nothing_is_an_error_not_a_hang():
    engine = NativeEngine(workers=1, capacity=2)
    backend = OneCall(slots=8, items=4096, engine=engine, wait_ns=50_000_000)
    engine.close()  # its workers are gone: the third op's table slot never comes free
    nd = ND(backend)
    x = nd.ones((2,))
    kept = [x + 1, x + 1]
    with pytest.raises(RuntimeError, match="freed no room within 0.05 s"):
        kept.append(x + 1)
    assert backend.ops == 2


PROGRAMS = st.lists(st.tuples(st.sampled_from(["new", "add", "add", "add", "drop"]),
                              st.integers(0, 1 << 16), st.integers(-3, 3)),
                    min_size=1, max_size=80)


def _run(program, nd) -> tuple[list, list]:
    """Run `program` on `nd` and on numpy side by side: (nd's arrays, numpy's)."""
    arrays, expected = [], []
    for kind, pick, value in program:
        if kind == "new" or not arrays:
            arrays.append(nd.ones((1 + pick % 5,)) if value >= 0 else nd.zeros((pick % 7 + 1,)))
            expected.append(np.full(arrays[-1].shape, 1.0 if value >= 0 else 0.0, np.float32))
        elif kind == "add":
            i = pick % len(arrays)
            arrays.append(arrays[i] + value)
            expected.append(expected[i] + np.float32(value))
        else:
            i = pick % len(arrays)
            del arrays[i], expected[i]
    return arrays, expected


@settings(max_examples=60, deadline=None)
@given(PROGRAMS)
def test_any_program_in_the_call_equals_numpy(program):
    arrays, expected = _run(program, ND(OneCall(slots=128, items=1 << 14)))
    for got, want in zip(arrays, expected, strict=True):
        assert np.array_equal(got.asnumpy(), want)


@settings(max_examples=40, deadline=None)
@given(PROGRAMS)
def test_any_program_on_the_engine_equals_numpy(program):
    # an engine per program: the backend numbers its ops from 0, and the engine's counters
    # must start there too
    with NativeEngine(workers=2) as fresh:
        arrays, expected = _run(program, ND(OneCall(slots=128, items=1 << 14, engine=fresh)))
        for got, want in zip(arrays, expected, strict=True):
            assert np.array_equal(got.asnumpy(), want)
        del arrays
