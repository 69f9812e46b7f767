"""`ops.describe`, the frontend's one question per op (shape, dtype, bytes, flops, geometry),
answers what `infer`, `nbytes`, `flops` and `geometry` answer, whether it remembers the call or
not, and never remembers an error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncsim.nd import ops

sides = st.integers(1, 6)


def fresh(name, shapes, dtypes, attrs):
    shape, dtype = ops.infer(name, shapes, dtypes, attrs)
    return (shape, dtype, ops.nbytes(shape, dtype), ops.flops(name, shapes, shape),
            ops.geometry(name, shapes, attrs) if name in ops.GEOMETRY else "")


@settings(max_examples=60, deadline=None)
@given(m=sides, k=sides, n=sides, ta=st.booleans(), tb=st.booleans(),
       dtype=st.sampled_from(ops.DTYPES))
def test_a_product_is_described_as_its_parts_say_asked_once_or_again(m, k, n, ta, tb, dtype):
    """For any 2-d product (transposed or not), the first and the remembered answer both equal
    the parts' answers, and its transposed twin is not answered from the other's entry."""
    a = (k, m) if ta else (m, k)
    b = (n, k) if tb else (k, n)
    attrs = {**({"transpose_a": True} if ta else {}), **({"transpose_b": True} if tb else {})}
    args = ("dot", (a, b), (dtype, dtype), attrs)
    expected = fresh(*args)
    assert ops.describe(*args) == expected
    assert ops.describe(*args) == expected
    swapped = ("dot", (a[::-1], b), (dtype, dtype), {**attrs, "transpose_a": not ta})
    assert ops.describe(*swapped) == fresh(*swapped)


def test_calls_that_differ_only_in_attrs_get_their_own_answers():
    square = ((3, 3), (3, 3)), ("float32", "float32")
    assert ops.describe("dot", *square, {})[4] == "3x3x3"
    assert ops.describe("dot", *square, {"transpose_a": True})[4] == "3x3x3-ta"
    assert ops.describe("dot", *square, {})[4] == "3x3x3"


def test_an_error_is_raised_each_time_and_unhashable_attrs_are_worked_out():
    for _ in range(2):
        with pytest.raises(ops.ShapeError, match=r"dot: .*inner dimensions differ"):
            ops.describe("dot", ((2, 3), (4, 5)), ("float32", "float32"), {})
    attrs = {"shape": [2, 3], "dtype": "float32"}  # a list: not hashable
    assert ops.describe("ones", (), (), attrs) == fresh("ones", (), (), attrs)
