"""The op vocabulary: the one place an op is defined, with its gradient beside it.

Every op the `nd` frontend can issue is an `OpDef` (`base`) in one of the tables: `tensor`
(creation, arithmetic, dot, reductions, reshapes, in-place updates), `nn` (convolution, pooling,
softmax, cross-entropy, batch norm) and `graph` (a hybridized block run as one op). Both halves
use this: `asyncsim.record` to describe a program without data, `realexec` to pick a kernel by
`name`, the model to price an op by name or `group`, autograd to find an op's gradient.

Units: shapes are tuples of ints, bytes are bytes, flops are floating-point operations (a
multiply-add counts two). Dtypes are numpy dtype names; float32 is the default, as in MXNet.
"""

from __future__ import annotations

import functools

from asyncsim.nd.ops import graph, nn, tensor
from asyncsim.nd.ops.base import (
    DTYPES,
    ITEMSIZE,
    OpDef,
    Shape,
    ShapeError,
    broadcast,
    per_element,
    size,
)

OPS: dict[str, OpDef] = {d.name: d for d in (*tensor.DEFS, *nn.DEFS, *graph.DEFS)}

# An op whose name is here writes its first input in place (out var == input 0).
INPLACE = tensor.INPLACE | nn.INPLACE

# Ops whose output, when all their inputs have one shape and dtype, has that shape and dtype and
# costs one flop per element (binary and scalar arithmetic, relu, copies): the frontend's fast
# path (`ND._same`) builds them without calling `infer` and `flops`.
SAME_SHAPE = frozenset(d.name for d in OPS.values()
                       if d.flops is per_element and d.arity >= 1 and d.name not in INPLACE
                       and d.name not in ("broadcast_to", "relu_grad", "equal"))

# Binary ops whose operands may differ in shape (numpy's broadcasting): priced as such.
BROADCASTING = frozenset({"add", "sub", "mul", "div", "equal"})

# Ops a compiled CPU worker runs without the interpreter (`realexec.cpu.worker`): elementwise
# loops over flat buffers, where they broadcast only as a bias does (`block_broadcast`), 2-d
# products through BLAS, and the samplers. The model's native workers hold no GIL for them.
COMPILED = frozenset({"add", "sub", "mul", "div", "copy", "copyto", "add_scalar", "sub_scalar",
                      "rsub_scalar", "mul_scalar", "div_scalar", "rdiv_scalar", "relu", "ones",
                      "zeros", "full", "dot", "normal", "uniform"})

# Ops whose speed depends on their shape beyond the bytes and flops they are priced by (the
# convolutions and 2-d products: the shape of their BLAS product): the frontend records
# `geometry` on their Op, and a profile may hold a cost per geometry
# ("cpu:conv2d@1x28x28-20x3x3-s1x1-p0x0", "cpu:dot@128x512x2048-tb").
GEOMETRY = {**nn.GEOMETRY, **tensor.GEOMETRY}


def geometry(name: str, shapes: tuple[Shape, ...], attrs: dict) -> str:
    """Op `name`'s shape without its batch (see `GEOMETRY`), or "" for an op priced by its bytes
    and flops alone."""
    rule = GEOMETRY.get(name)
    return rule(name, shapes, attrs) if rule is not None else ""


# The largest array the frontend accepts: its bytes must fit numpy's index type.
MAX_BYTES = 2**62


@functools.lru_cache(maxsize=1024)  # every bias add of a loop asks again: 0.5 us -> 0.1
def block_broadcast(a: Shape, b: Shape) -> tuple[int, int] | None:
    """(inner, count) when `a op b` is a's shape and b's items repeat as a bias's do: item i of
    the flat result reads b[(i // inner) % count] (a dense layer's (n,) bias: inner 1; a
    convolution's (1, F, 1, 1): inner H*W). None for any other broadcast (a compiled worker
    leaves those to Python)."""
    if len(b) > len(a) or 0 in a:
        return None
    dims = (1,) * (len(a) - len(b)) + tuple(b)
    kept = [i for i, d in enumerate(dims) if d != 1]
    if not kept:  # one value for everything: a single block
        return size(a), 1
    first, last = kept[0], kept[-1]
    if any(dims[i] != a[i] for i in range(first, last + 1)):
        return None
    return size(a[last + 1:]), size(a[first:last + 1])


def native_broadcast(op, vars_: dict) -> bool:
    """Whether a broadcasting op of `COMPILED` (a program.Op) still runs compiled: its first
    operand has the result's shape and its second repeats as a bias (`block_broadcast`)."""
    if len(op.reads) != 2:
        return False
    a, b = (vars_[v].shape for v in op.reads)
    return a == vars_[op.out].shape and block_broadcast(a, b) is not None


def broadcasts(op, vars_: dict) -> bool:
    """Whether op (a `program.Op` of `BROADCASTING`) has operands of different shapes, or of a
    shape other than its output's: the broadcasting path, which profiles price apart. `vars_`
    maps its var ids to `program.Var`s."""
    shapes = {vars_[v].shape for v in op.reads}
    return len(shapes) > 1 or vars_[op.out].shape not in shapes


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
    if d.arity >= 0 and len(shapes) != d.arity:
        raise ShapeError(f"{name}: takes {d.arity} array input(s) (got {len(shapes)})")
    if len(set(dtypes)) > 1 and name != "graph":
        raise ShapeError(f"{name}: inputs have different dtypes {dtypes}")
    if name == "cast":
        dtype = check_dtype(name, attrs["dtype"])
    else:
        dtype = dtypes[0] if dtypes else check_dtype(name, attrs.get("dtype", "float32"))
    if d.arity == 0:
        shape = tuple(attrs["shape"])
        if any((not isinstance(s, int)) or s < 0 for s in shape):
            raise ShapeError(f"{name}: shape {shape} must be non-negative ints")
    shape = d.shape(shapes, attrs)
    if size(shape) * ITEMSIZE[dtype] > MAX_BYTES:
        raise ShapeError(f"{name}: an array of shape {shape} and dtype {dtype} is too large "
                         f"({size(shape) * ITEMSIZE[dtype]:.3g} bytes)")
    return shape, dtype


def nbytes(shape: Shape, dtype: str) -> int:
    return size(shape) * ITEMSIZE[dtype]


def flops(name: str, shapes: tuple[Shape, ...], out: Shape) -> float:
    return OPS[name].flops(shapes, out)


def describe(name: str, shapes: tuple[Shape, ...], dtypes: tuple[str, ...],
             attrs: dict) -> tuple[Shape, str, int, float, str]:
    """(shape, dtype, nbytes, flops, geometry) of op `name` on inputs of `shapes` and `dtypes`:
    what `infer`, `nbytes`, `flops` and `geometry` say (geometry "" outside `GEOMETRY`), or
    `infer`'s ShapeError. Remembered per call seen before: the frontend asks about the same
    few calls again and again, and a product's answers cost 1.5 us to work out and 0.2 to look
    up. Not for the "graph" op, whose attrs hold the graph, nor attrs that cannot be hashed."""
    if name != "graph":
        try:
            return _described(name, shapes, dtypes, tuple(attrs.items()))
        except TypeError:  # an attr such as a slice: worked out each time below
            pass
    return _describe(name, shapes, dtypes, attrs)


def _describe(name, shapes, dtypes, attrs):
    shape, dtype = infer(name, shapes, dtypes, attrs)
    return (shape, dtype, nbytes(shape, dtype), flops(name, shapes, shape),
            geometry(name, shapes, attrs) if name in GEOMETRY else "")


@functools.lru_cache(maxsize=4096)
def _described(name, shapes, dtypes, items):
    return _describe(name, shapes, dtypes, dict(items))


__all__ = ["BROADCASTING", "COMPILED", "DTYPES", "GEOMETRY", "INPLACE", "ITEMSIZE", "MAX_BYTES",
           "OPS", "SAME_SHAPE", "OpDef", "Shape", "ShapeError", "block_broadcast", "broadcast",
           "broadcasts", "check_dtype", "describe", "flops", "geometry", "infer",
           "native_broadcast", "nbytes"]
