"""What an op is: `OpDef`, the shape errors, and the small rules the op tables share.

An `OpDef` says how many array inputs an op takes (`arity`, -1: any number), the rule that
gives its output shape (raising `ShapeError` at the call, naming the op and the shapes), its
flops, the *group* a Profile prices it by, and its gradient: `grad(F, inputs, out, g, attrs)`
returns one gradient per input (None where there is none), built from ops issued through `F`
(an `nd`), so a backward pass is ordinary ops that the recorder and the engines see.

Units: shapes are tuples of ints, bytes are bytes, flops are floating-point operations (a
multiply-add counts two). Dtypes are numpy dtype names; float32 is the default, as in MXNet.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import NamedTuple

DTYPES = ("float32", "float64")
ITEMSIZE = {"float32": 4, "float64": 8}

Shape = tuple[int, ...]


class ShapeError(ValueError):
    """An op was called with shapes (or attributes) it cannot take."""


class OpDef(NamedTuple):
    name: str
    arity: int  # number of array inputs; -1: any number (the hybridized graph)
    group: str  # what a Profile prices it by: create, elementwise, reduce, dot, copy, conv, nn
    shape: Callable[[tuple[Shape, ...], dict], Shape]
    flops: Callable[[tuple[Shape, ...], Shape], float]
    doc: str
    grad: Callable | None = None  # grad(F, inputs, out, g, attrs) -> one gradient per input


def err(name: str, shapes: tuple[Shape, ...], why: str) -> ShapeError:
    got = ", ".join(str(s) for s in shapes) or "no inputs"
    return ShapeError(f"{name}: {why} (got {got})")


def broadcast(name: str, a: Shape, b: Shape) -> Shape:
    """numpy's broadcasting rule, with an error that names the op."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise err(name, (a, b), "shapes do not broadcast")
        out.append(max(x, y) if 0 not in (x, y) else 0)
    return tuple(reversed(out))


def size(shape: Shape) -> int:
    return prod(shape)


def same(shapes, attrs):
    return shapes[0]


def given(shapes, attrs):
    return tuple(attrs["shape"])


def per_element(shapes, out) -> float:
    """One flop per output element: the flops of `ops.SAME_SHAPE`'s ops."""
    return float(size(out))


def no_flops(shapes, out) -> float:
    return 0.0


def axes(name: str, shape: Shape, axis) -> tuple[int, ...]:
    """`axis` (an int or a tuple of ints, negative counting from the end) as sorted,
    non-negative, distinct axes of `shape`, or a ShapeError naming the op."""
    items = (axis,) if isinstance(axis, int) else tuple(axis)
    out = set()
    for a in items:
        if not isinstance(a, int) or not -len(shape) <= a < len(shape):
            raise err(name, (shape,), f"axis {a!r} is out of range for {len(shape)} dimensions")
        out.add(a % len(shape))
    if len(out) != len(items):
        raise err(name, (shape,), f"axis {axis!r} repeats an axis")
    return tuple(sorted(out))


def unbroadcast(F, g, shape: Shape):
    """`g` summed over the axes that broadcasting stretched to reach `g.shape` from `shape`:
    the gradient of a broadcast operand."""
    if g.shape == shape:
        return g
    lead = len(g.shape) - len(shape)
    stretched = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1)
    if stretched:
        g = F.invoke("sum_axis", g, axis=stretched, keepdims=False)
    return g if g.shape == shape else F.invoke("reshape", g, shape=shape)
