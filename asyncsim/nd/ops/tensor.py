"""The tensor ops: creation, arithmetic, `dot`, reductions, reshapes, rows, copies, and the
in-place updates a training step makes; each with its gradient beside it (see `base.OpDef`).

A gradient is written with ops issued through `F`, the `nd` that runs the backward pass:
`F.invoke(name, *inputs, **attrs)` issues op `name`, and NDArray operators work as usual.
`unbroadcast` sums a gradient back to the shape of an operand that broadcasting stretched.
Units as in `base`.
"""

from __future__ import annotations

from math import isqrt

from asyncsim.nd.ops.base import (
    OpDef,
    axes,
    broadcast,
    err,
    given,
    no_flops,
    per_element,
    same,
    size,
    unbroadcast,
)


# -- shape rules --------------------------------------------------------------------------------
def _scalar(shapes, attrs):
    return ()


def _dot(shapes, attrs):
    a, b = shapes
    if len(a) not in (1, 2) or len(b) not in (1, 2):
        raise err("dot", shapes, "dot takes 1-d or 2-d arrays")
    ta, tb = attrs.get("transpose_a", False), attrs.get("transpose_b", False)
    if (ta and len(a) != 2) or (tb and len(b) != 2):
        raise err("dot", shapes, "transpose_a/transpose_b need 2-d arrays")
    a = a[::-1] if ta else a
    b = b[::-1] if tb else b
    if a[-1] != b[0]:
        raise err("dot", shapes, f"inner dimensions differ ({a[-1]} != {b[0]})")
    return a[:-1] + b[1:]


def _rows(name, shape, attrs):
    if not shape:
        raise err(name, (shape,), "cannot index a 0-d array")
    start, stop = attrs["start"], attrs["stop"]
    if not 0 <= start <= stop <= shape[0]:
        raise err(name, (shape,), f"rows {start}:{stop} are outside 0:{shape[0]}")
    return shape[1:] if attrs.get("squeeze") else (stop - start,) + shape[1:]


def _setitem(shapes, attrs):
    dst, src = shapes
    target = _rows("setitem", dst, attrs)
    if broadcast("setitem", target, src) != target:
        raise err("setitem", shapes, f"cannot assign {src} into rows of shape {target}")
    return dst


def _setitem_scalar(shapes, attrs):
    _rows("setitem_scalar", shapes[0], attrs)
    return shapes[0]


def _reshape(shapes, attrs):
    shape = tuple(attrs["shape"])
    if size(shape) != size(shapes[0]):
        raise err("reshape", shapes, f"cannot reshape into {shape}: sizes differ")
    return shape


def _broadcast_to(shapes, attrs):
    shape = tuple(attrs["shape"])
    if broadcast("broadcast_to", shapes[0], shape) != shape:
        raise err("broadcast_to", shapes, f"cannot broadcast to {shape}")
    return shape


def _reduced(name):
    def rule(shapes, attrs):
        shape = shapes[0]
        kept = set(axes(name, shape, attrs["axis"]))
        if name == "argmax" and (len(kept) != 1 or shape[min(kept)] == 0):
            raise err(name, shapes, f"argmax takes one non-empty axis, got {attrs['axis']!r}")
        keep = attrs.get("keepdims", False)
        return tuple(1 if i in kept else n for i, n in enumerate(shape) if keep or i not in kept)
    return rule


def _same_shapes(name):
    def rule(shapes, attrs):
        if len(set(shapes)) != 1:
            raise err(name, shapes, "shapes must be equal")
        return shapes[0]
    return rule


def dot_geometry(name, shapes, attrs) -> str:
    """A 2-d product's shape, as "MxKxN" (an (M, K) by (K, N) product) with "-ta"/"-tb" where an
    operand is used transposed; "" for a product with a 1-d operand. BLAS runs products of one
    size at speeds a fifth apart by their shape and transposes (a dense layer's (128, 512) by
    its (2048, 512) weight transposed: 83 GFLOP/s; a 512x512 square: 99), so a profile may time
    the products of the layers it will price and key them by this."""
    a, b = shapes
    if len(a) != 2 or len(b) != 2:
        return ""
    ta, tb = attrs.get("transpose_a", False), attrs.get("transpose_b", False)
    m, k = a[::-1] if ta else a
    n = b[0] if tb else b[1]
    return f"{m}x{k}x{n}" + ("-ta" if ta else "") + ("-tb" if tb else "")


# -- flops ----------------------------------------------------------------------------------------
def _dot_flops(shapes, out):
    """2 * inner * outputs: with a (M, K), b (K, N), size(a) * size(b) / size(out) = K^2, whatever
    the transposes and for 1-d operands too."""
    a, b = shapes
    if size(out) == 0:
        return 0.0
    inner = isqrt(size(a) * size(b) // max(size(out), 1))
    return 2.0 * inner * max(size(out), 1)


def _reduce(shapes, out):
    return float(size(shapes[0]))


# -- gradients ------------------------------------------------------------------------------------
def _g_add(F, x, out, g, attrs):
    return unbroadcast(F, g, x[0].shape), unbroadcast(F, g, x[1].shape)


def _g_sub(F, x, out, g, attrs):
    return unbroadcast(F, g, x[0].shape), unbroadcast(F, -g, x[1].shape)


def _g_mul(F, x, out, g, attrs):
    return unbroadcast(F, g * x[1], x[0].shape), unbroadcast(F, g * x[0], x[1].shape)


def _g_div(F, x, out, g, attrs):
    ga = g / x[1]
    return unbroadcast(F, ga, x[0].shape), unbroadcast(F, -(ga * out), x[1].shape)


def _g_identity(F, x, out, g, attrs):
    return (g,)


def _g_negate(F, x, out, g, attrs):
    return (-g,)


def _g_mul_scalar(F, x, out, g, attrs):
    return (g * attrs["scalar"],)


def _g_div_scalar(F, x, out, g, attrs):
    return (g / attrs["scalar"],)


def _g_rdiv_scalar(F, x, out, g, attrs):
    return (-(g * out) / x[0],)  # d(s / a) = -s / a^2 = -out / a


def _g_relu(F, x, out, g, attrs):
    return (F.invoke("relu_grad", x[0], g),)


def _g_sigmoid(F, x, out, g, attrs):
    return (g * out * (1.0 - out),)


def _g_tanh(F, x, out, g, attrs):
    return (g * (1.0 - out * out),)


def _g_copyto(F, x, out, g, attrs):
    return (g.copyto(x[0].context),)


def _g_dot(F, x, out, g, attrs):
    a, b = x
    ta, tb = attrs.get("transpose_a", False), attrs.get("transpose_b", False)
    # a 1-d operand (never transposed) is a row (1, K) on the left, a column (K, 1) on the
    # right: the 2-d rule then holds, and its gradient is reshaped back
    if len(a.shape) == 1:
        a = F.invoke("reshape", a, shape=(1, a.shape[0]))
    if len(b.shape) == 1:
        b = F.invoke("reshape", b, shape=(b.shape[0], 1))
    rows = a.shape[1] if ta else a.shape[0]
    cols = b.shape[0] if tb else b.shape[1]
    if g.shape != (rows, cols):
        g = F.invoke("reshape", g, shape=(rows, cols))
    if ta:
        ga = F.invoke("dot", b, g, transpose_a=tb, transpose_b=True)
    else:
        ga = F.invoke("dot", g, b, transpose_b=not tb)
    if tb:
        gb = F.invoke("dot", g, a, transpose_a=True, transpose_b=ta)
    else:
        gb = F.invoke("dot", a, g, transpose_a=not ta)
    ga = ga if ga.shape == x[0].shape else F.invoke("reshape", ga, shape=x[0].shape)
    gb = gb if gb.shape == x[1].shape else F.invoke("reshape", gb, shape=x[1].shape)
    return ga, gb


def _g_sum(F, x, out, g, attrs):
    return (F.invoke("broadcast_to", g, shape=x[0].shape),)


def _g_mean(F, x, out, g, attrs):
    return (F.invoke("broadcast_to", g, shape=x[0].shape) * (1.0 / max(size(x[0].shape), 1)),)


def _g_norm(F, x, out, g, attrs):
    return (x[0] * F.invoke("broadcast_to", g / out, shape=x[0].shape),)


def _g_sum_axis(F, x, out, g, attrs):
    kept = set(axes("sum_axis", x[0].shape, attrs["axis"]))
    shape = tuple(1 if i in kept else n for i, n in enumerate(x[0].shape))
    g = g if g.shape == shape else F.invoke("reshape", g, shape=shape)
    return (F.invoke("broadcast_to", g, shape=x[0].shape),)


def _g_broadcast_to(F, x, out, g, attrs):
    return (unbroadcast(F, g, x[0].shape),)


def _g_reshape(F, x, out, g, attrs):
    return (F.invoke("reshape", g, shape=x[0].shape),)


def _g_cast(F, x, out, g, attrs):
    return (F.invoke("cast", g, dtype=x[0].dtype),)


def _g_slice(F, x, out, g, attrs):
    whole = F.zeros(x[0].shape, ctx=x[0].context, dtype=x[0].dtype)
    rows = {k: attrs[k] for k in ("start", "stop")}
    whole_rows = F.invoke("reshape", g, shape=(rows["stop"] - rows["start"],) + x[0].shape[1:])
    F.invoke("setitem", whole, whole_rows, out=whole, **rows)
    return (whole,)


# -- the table ------------------------------------------------------------------------------------
def _binary(name, doc, grad=None):
    return OpDef(name, 2, "elementwise", lambda shapes, attrs: broadcast(name, *shapes),
                 per_element, doc, grad)


def _unary(name, doc, grad=None, group="elementwise"):
    return OpDef(name, 1, group, same, per_element, doc, grad)


def _create(name, doc):
    return OpDef(name, 0, "create", given, no_flops, doc)


DEFS = [
    _create("ones", "fill with 1"),
    _create("zeros", "fill with 0"),
    _create("full", "fill with attrs['value']"),
    _create("uniform", "uniform numbers in [attrs['low'], attrs['high'])"),
    _create("normal", "normal numbers, mean attrs['loc'], deviation attrs['scale']"),
    OpDef("array", 0, "copy", given, no_flops, "copy a host numpy array in (the frontend's data)"),
    _binary("add", "a + b (numpy broadcasting)", _g_add),
    _binary("sub", "a - b", _g_sub),
    _binary("mul", "a * b", _g_mul),
    _binary("div", "a / b", _g_div),
    _binary("equal", "1 where a == b, else 0 (not differentiable)"),
    _unary("add_scalar", "a + attrs['scalar']", _g_identity),
    _unary("sub_scalar", "a - attrs['scalar']", _g_identity),
    _unary("rsub_scalar", "attrs['scalar'] - a", _g_negate),
    _unary("mul_scalar", "a * attrs['scalar']", _g_mul_scalar),
    _unary("div_scalar", "a / attrs['scalar']", _g_div_scalar),
    _unary("rdiv_scalar", "attrs['scalar'] / a", _g_rdiv_scalar),
    _unary("relu", "max(a, 0)", _g_relu),
    _unary("sigmoid", "1 / (1 + exp(-a))", _g_sigmoid),
    _unary("tanh", "tanh(a)", _g_tanh),
    OpDef("relu_grad", 2, "elementwise", _same_shapes("relu_grad"), per_element,
          "g where a > 0, else 0: relu's gradient (inputs a, g)"),
    _unary("copy", "a copy on the same device", _g_identity, group="copy"),
    _unary("copyto", "a copy onto attrs['device'] (host<->device goes to the copy engine)",
           _g_copyto, group="copy"),
    OpDef("cast", 1, "copy", same, no_flops, "a copy as dtype attrs['dtype']", _g_cast),
    OpDef("dot", 2, "dot", _dot, _dot_flops,
          "matrix product (1-d or 2-d); attrs transpose_a/transpose_b use an operand transposed",
          _g_dot),
    OpDef("sum", 1, "reduce", _scalar, _reduce, "sum of all elements, shape ()", _g_sum),
    OpDef("mean", 1, "reduce", _scalar, _reduce, "mean of all elements, shape ()", _g_mean),
    OpDef("norm", 1, "reduce", _scalar, lambda s, o: 2.0 * size(s[0]), "L2 norm, shape ()",
          _g_norm),
    OpDef("sum_axis", 1, "reduce", _reduced("sum_axis"), _reduce,
          "sum over attrs['axis'] (sorted, non-negative ints), kept as 1s if attrs['keepdims']",
          _g_sum_axis),
    OpDef("argmax", 1, "reduce", _reduced("argmax"), _reduce,
          "index of the largest element along the one axis attrs['axis'] (as a float, as MXNet; "
          "the first on ties)"),
    OpDef("broadcast_to", 1, "elementwise", _broadcast_to, per_element,
          "a stretched to attrs['shape'] by numpy's broadcasting", _g_broadcast_to),
    OpDef("reshape", 1, "copy", _reshape, no_flops,
          "a copy with shape attrs['shape'] (same size, C order)", _g_reshape),
    OpDef("slice", 1, "copy", lambda shapes, attrs: _rows("slice", shapes[0], attrs), no_flops,
          "rows attrs['start']:attrs['stop'] of the first axis (a copy; squeeze drops the axis)",
          _g_slice),
    OpDef("setitem", 2, "copy", _setitem, no_flops,
          "in place: rows start:stop of the first input take the second (broadcast)"),
    OpDef("setitem_scalar", 1, "copy", _setitem_scalar, no_flops,
          "in place: rows start:stop of the input take attrs['scalar']"),
    OpDef("assign", 2, "copy", _same_shapes("assign"), no_flops,
          "in place: the first input takes the second's values (a gradient written into .grad)"),
    OpDef("sgd_update", 2, "elementwise", _same_shapes("sgd_update"),
          lambda s, o: 4.0 * size(o),
          "in place: w -= lr * (rescale * g + wd * w) (inputs w, g; attrs lr, rescale, wd)"),
]

# ops that write their first input in place (out var == input 0)
INPLACE = frozenset({"setitem", "setitem_scalar", "assign", "sgd_update"})

# ops whose cost a profile may key by their shape as well as by name (`asyncsim.nd.ops.GEOMETRY`)
GEOMETRY = {"dot": dot_geometry}
