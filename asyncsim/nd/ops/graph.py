"""The hybridized graph as one op: `graph(*inputs)`, with attrs['graph'] a captured
`asyncsim.nd.jit.Graph` (the ops of a HybridBlock's forward, traced once).

The op table knows the graph only through three of its members, so this module needs nothing
from `jit`: `check(shapes, dtypes)` (the input shapes it was traced for, or a ShapeError naming
the block), `out_shape` and `flops` (the sum of its ops'). Engines run its ops in order inside
one op; the model prices it as the sum of its ops' costs, issued once.
"""

from __future__ import annotations

from asyncsim.nd.ops.base import OpDef


def _graph_shape(shapes, attrs):
    graph = attrs["graph"]
    graph.check(shapes)
    return graph.out_shape


DEFS = [
    OpDef("graph", -1, "graph", _graph_shape, lambda shapes, out: 0.0,
          "a hybridized block's traced forward, run as one op (attrs['graph'])"),
]
