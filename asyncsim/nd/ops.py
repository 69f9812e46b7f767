"""The op vocabulary: the one place an op is defined.

Every op the `nd` frontend can issue is an `OpDef` here: how many array inputs it takes, the
rule that gives its output shape and dtype (raising `ShapeError` at the call, naming the op and
the shapes), its flops, and the *group* that a Profile prices it by. Both halves use this table:
`asyncsim.record` to describe a program without data, `realexec` to pick a kernel by `name`.

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
    arity: int  # number of array inputs
    group: str  # what a Profile prices it by: create, elementwise, reduce, dot, copy
    shape: Callable[[tuple[Shape, ...], dict], Shape]
    flops: Callable[[tuple[Shape, ...], Shape], float]
    doc: str


def _err(name: str, shapes: tuple[Shape, ...], why: str) -> ShapeError:
    got = ", ".join(str(s) for s in shapes) or "no inputs"
    return ShapeError(f"{name}: {why} (got {got})")


def broadcast(name: str, a: Shape, b: Shape) -> Shape:
    """numpy's broadcasting rule, with an error that names the op."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise _err(name, (a, b), "shapes do not broadcast")
        out.append(max(x, y) if 0 not in (x, y) else 0)
    return tuple(reversed(out))


def _given(shapes, attrs):
    return tuple(attrs["shape"])


def _same(shapes, attrs):
    return shapes[0]


def _scalar(shapes, attrs):
    return ()


def _dot(shapes, attrs):
    a, b = shapes
    if len(a) not in (1, 2) or len(b) not in (1, 2):
        raise _err("dot", shapes, "dot takes 1-d or 2-d arrays")
    if a[-1] != b[0]:
        raise _err("dot", shapes, f"inner dimensions differ ({a[-1]} != {b[0]})")
    return a[:-1] + b[1:]


def _rows(name, shape, attrs):
    if not shape:
        raise _err(name, (shape,), "cannot index a 0-d array")
    start, stop = attrs["start"], attrs["stop"]
    if not 0 <= start <= stop <= shape[0]:
        raise _err(name, (shape,), f"rows {start}:{stop} are outside 0:{shape[0]}")
    return shape[1:] if attrs.get("squeeze") else (stop - start,) + shape[1:]


def _slice(shapes, attrs):
    return _rows("slice", shapes[0], attrs)


def _setitem(shapes, attrs):
    dst, src = shapes
    target = _rows("setitem", dst, attrs)
    if broadcast("setitem", target, src) != target:
        raise _err("setitem", shapes, f"cannot assign {src} into rows of shape {target}")
    return dst


def _setitem_scalar(shapes, attrs):
    _rows("setitem_scalar", shapes[0], attrs)
    return shapes[0]


def _n(shape: Shape) -> int:
    return prod(shape)


def _elementwise(shapes, out):
    return float(_n(out))


def _none(shapes, out):
    return 0.0


def _dot_flops(shapes, out):
    a, _ = shapes
    return 2.0 * a[-1] * max(_n(out), 1)


def _reduce(shapes, out):
    return float(_n(shapes[0]))


def _binary(name: str, doc: str) -> OpDef:
    return OpDef(name, 2, "elementwise",
                 lambda shapes, attrs: broadcast(name, *shapes), _elementwise, doc)


def _unary(name: str, doc: str, group: str = "elementwise") -> OpDef:
    return OpDef(name, 1, group, _same, _elementwise, doc)


def _create(name: str, doc: str) -> OpDef:
    return OpDef(name, 0, "create", _given, _none, doc)


_DEFS = [
    _create("ones", "fill with 1"),
    _create("zeros", "fill with 0"),
    _create("full", "fill with attrs['value']"),
    _create("uniform", "uniform numbers in [attrs['low'], attrs['high'])"),
    _create("normal", "normal numbers, mean attrs['loc'], deviation attrs['scale']"),
    OpDef("array", 0, "copy", _given, _none, "copy a host numpy array in (the frontend's data)"),
    _binary("add", "a + b (numpy broadcasting)"),
    _binary("sub", "a - b"),
    _binary("mul", "a * b"),
    _binary("div", "a / b"),
    _unary("add_scalar", "a + attrs['scalar']"),
    _unary("sub_scalar", "a - attrs['scalar']"),
    _unary("rsub_scalar", "attrs['scalar'] - a"),
    _unary("mul_scalar", "a * attrs['scalar']"),
    _unary("div_scalar", "a / attrs['scalar']"),
    _unary("rdiv_scalar", "attrs['scalar'] / a"),
    _unary("relu", "max(a, 0)"),
    _unary("copy", "a copy on the same device", group="copy"),
    _unary("copyto", "a copy onto attrs['device'] (host<->device goes to the copy engine)",
           group="copy"),
    OpDef("dot", 2, "dot", _dot, _dot_flops, "matrix product (1-d or 2-d)"),
    OpDef("sum", 1, "reduce", _scalar, _reduce, "sum of all elements, shape ()"),
    OpDef("mean", 1, "reduce", _scalar, _reduce, "mean of all elements, shape ()"),
    OpDef("norm", 1, "reduce", _scalar, lambda s, o: 2.0 * _n(s[0]), "L2 norm, shape ()"),
    OpDef("slice", 1, "copy", _slice, _none,
          "rows attrs['start']:attrs['stop'] of the first axis (a copy; squeeze drops the axis)"),
    OpDef("setitem", 2, "copy", _setitem, _none,
          "in place: rows start:stop of the first input take the second (broadcast)"),
    OpDef("setitem_scalar", 1, "copy", _setitem_scalar, _none,
          "in place: rows start:stop of the input take attrs['scalar']"),
]

OPS: dict[str, OpDef] = {d.name: d for d in _DEFS}

# An op whose name is here writes its first input in place (out var == input 0).
INPLACE = frozenset({"setitem", "setitem_scalar"})

# Ops whose output, when all their inputs have one shape and dtype, has that shape and dtype and
# costs one flop per element (binary and scalar arithmetic, relu, copies): the frontend's fast
# path (`ND._same`) builds them without calling `infer` and `flops`.
SAME_SHAPE = frozenset(d.name for d in _DEFS if d.flops is _elementwise and d.arity >= 1)


def check_dtype(name: str, dtype: str) -> str:
    dtype = str(dtype)
    if dtype not in DTYPES:
        raise ShapeError(f"{name}: dtype {dtype!r} is not supported (use one of {DTYPES})")
    return dtype


def infer(name: str, shapes: tuple[Shape, ...], dtypes: tuple[str, ...],
          attrs: dict) -> tuple[Shape, str]:
    """Output (shape, dtype) of op `name`, or a ShapeError naming the op and shapes."""
    try:
        d = OPS[name]
    except KeyError:
        raise ShapeError(f"unknown op {name!r}; known ops: {', '.join(OPS)}") from None
    if len(shapes) != d.arity:
        raise _err(name, shapes, f"takes {d.arity} array input(s)")
    if len(set(dtypes)) > 1:
        raise ShapeError(f"{name}: inputs have different dtypes {dtypes}")
    dtype = dtypes[0] if dtypes else check_dtype(name, attrs.get("dtype", "float32"))
    if d.arity == 0:
        shape = tuple(attrs["shape"])
        if any((not isinstance(s, int)) or s < 0 for s in shape):
            raise ShapeError(f"{name}: shape {shape} must be non-negative ints")
    return d.shape(shapes, attrs), dtype


def nbytes(shape: Shape, dtype: str) -> int:
    return _n(shape) * ITEMSIZE[dtype]


def flops(name: str, shapes: tuple[Shape, ...], out: Shape) -> float:
    return OPS[name].flops(shapes, out)
