"""The frontend's fast path (`ND._same`, taken by arithmetic with a scalar or an array of the same
shape, the activations (as methods and `nd` functions), copy and negation) builds exactly the Op
and Var that the general, checking path (`ND._op` through `ops.infer`) builds for the same call,
and only for ops of `ops.SAME_SHAPE`.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncsim.nd import ops
from asyncsim.nd.frontend import ND
from asyncsim.nd.program import Op, Program
from asyncsim.nd.record import Recorder

shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)
dtypes = st.sampled_from(ops.DTYPES)

# (operator call on arrays a, b; the general path's op name, its inputs, its attrs, in place)
CASES = [
    (lambda a, b: a + 2.5, "add_scalar", "a", {"scalar": 2.5}, False),
    (lambda a, b: 2.5 + a, "add_scalar", "a", {"scalar": 2.5}, False),
    (lambda a, b: a - 3, "sub_scalar", "a", {"scalar": 3.0}, False),
    (lambda a, b: 3 - a, "rsub_scalar", "a", {"scalar": 3.0}, False),
    (lambda a, b: a * 0.5, "mul_scalar", "a", {"scalar": 0.5}, False),
    (lambda a, b: a / 4, "div_scalar", "a", {"scalar": 4.0}, False),
    (lambda a, b: 4 / a, "rdiv_scalar", "a", {"scalar": 4.0}, False),
    (lambda a, b: -a, "mul_scalar", "a", {"scalar": -1.0}, False),
    (lambda a, b: a.relu(), "relu", "a", {}, False),
    (lambda a, b: a.nd.relu(a), "relu", "a", {}, False),
    (lambda a, b: a.nd.sigmoid(a), "sigmoid", "a", {}, False),
    (lambda a, b: a.nd.tanh(a), "tanh", "a", {}, False),
    (lambda a, b: a.nd.Activation(a, act_type="relu"), "relu", "a", {}, False),
    (lambda a, b: a.copy(), "copy", "a", {}, False),
    (lambda a, b: a + b, "add", "ab", {}, False),
    (lambda a, b: a - b, "sub", "ab", {}, False),
    (lambda a, b: a * b, "mul", "ab", {}, False),
    (lambda a, b: a / b, "div", "ab", {}, False),
    (lambda a, b: a.__iadd__(1.0), "add_scalar", "a", {"scalar": 1.0}, True),
    (lambda a, b: a.__imul__(b), "mul", "ab", {}, True),
]


def _program(call, shape, dtype):
    """The Program of two fresh arrays of `shape` and `dtype` and then `call(nd, a, b)`."""
    program = Program()
    nd = ND(Recorder(program))
    a = nd.ones(shape, dtype=dtype)
    b = nd.zeros(shape, dtype=dtype)
    result = call(nd, a, b)
    del result, a, b
    return program


@settings(max_examples=30, deadline=None)
@given(shape=shapes, dtype=dtypes)
def test_fast_path_builds_what_the_general_path_builds(shape, dtype):
    """For every operator that takes the fast path, the recorded instructions (Op fields: shape
    derived bytes, flops, reads, out, device, attrs; the new Var; the frees) equal those of the
    same op issued through the general path, whatever the shape and dtype."""
    for operator, name, which, attrs, inplace in CASES:
        fast = _program(lambda nd, a, b, f=operator: f(a, b), shape, dtype)

        def general(nd, a, b, name=name, which=which, attrs=attrs, inplace=inplace):
            inputs = (a,) if which == "a" else (a, b)
            return nd._op(name, inputs, dict(attrs), out=a if inplace else None)

        slow = _program(general, shape, dtype)
        assert fast.instrs == slow.instrs, name
        assert fast.vars == slow.vars, name


def test_fast_path_only_issues_ops_whose_output_keeps_the_input_shape():
    """Every op the fast-path operators issue is in ops.SAME_SHAPE, and `ops.infer` agrees that
    such an op keeps its inputs' shape and dtype and costs a flop per element."""
    for operator, name, *_ in CASES:
        program = _program(lambda nd, a, b, f=operator: f(a, b), (2, 3), "float32")
        issued = [i for i in program.instrs if isinstance(i, Op)][-1]
        assert issued.name == name and name in ops.SAME_SHAPE
    for name in ops.SAME_SHAPE:
        arity = ops.OPS[name].arity
        shape, dtype = ops.infer(name, ((2, 3),) * arity, ("float64",) * arity, {"scalar": 1.0})
        assert (shape, dtype) == ((2, 3), "float64")
        assert ops.flops(name, ((2, 3),) * arity, shape) == 6.0


def test_broadcasting_and_mismatches_still_take_the_checking_path():
    """Arrays of different shapes broadcast (or fail naming the op and shapes), and arrays of
    different dtypes fail, as the general path decides."""
    program = Program()
    nd = ND(Recorder(program))
    a, row = nd.ones((2, 3)), nd.ones((3,))
    assert (a + row).shape == (2, 3)
    with pytest.raises(ops.ShapeError, match=r"add: shapes do not broadcast .*\(2, 3\)"):
        a + nd.ones((2,))
    with pytest.raises(ops.ShapeError, match="mul: inputs have different dtypes"):
        a * nd.ones((2, 3), dtype="float64")


@pytest.mark.parametrize("recording", [False, True])
def test_fast_path_handle_has_every_slot_the_constructor_sets(recording):
    """`ND._same` writes `NDArray.__init__` out: its result has every slot, with the values the
    general path's constructor gives (the var aside), recording or not."""
    from asyncsim.nd import autograd
    from asyncsim.nd.ndarray import NDArray

    nd = ND(Recorder(Program()))
    a = nd.ones((2, 3))
    if recording:
        a.attach_grad()
    with autograd.record() if recording else contextlib.nullcontext():
        fast, slow = a + 1.0, nd._op("add_scalar", (a,), {"scalar": 1.0})
    for slot in NDArray.__slots__:
        if slot in ("var", "__weakref__"):
            continue
        got, want = getattr(fast, slot), getattr(slow, slot)
        if slot == "_node":  # (op name, inputs, attrs): the same op recorded
            assert (got is None) == (want is None) == (not recording)
            if recording:
                assert got[0] == want[0] and got[1] == want[1]
            continue
        assert got == want, slot
