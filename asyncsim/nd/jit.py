"""hybridize's JIT: trace a forward function once into a `Graph`, then issue it as one op.

`trace(fn, name, inputs, params)` runs `fn` once on *symbols*: NDArrays of an `nd` whose backend
(`Tracer`) writes the ops down instead of running them, as MXNet's Symbol API does when a
HybridBlock is first called after `hybridize()`. The Python in `fn` runs then and only then (the
chapter's prints appear once); a blocker (`asnumpy`, `wait_to_read`, `item`), an in-place write
(`a += b`, `a[:] = ...`) or host data (`nd.array`) inside it fails with a `HybridizeError` naming
the block, since a symbol has no value and a graph has no side effects. The one side effect
allowed is an in-place write into a parameter (an auxiliary state: BatchNorm's running
statistics in training mode); a graph holding one is replayed op by op, never run as one op.
`print(symbol)` shows `<Symbol name>`.

The `Graph` is then issued as op "graph" of `asyncsim.nd.ops` with the block's input and its
parameters as inputs: one push, one issue cost (t1) in the model, one kernel call on a worker
that runs the graph's kernels in order with no frontend, no dependency tracking and no
Python dispatch per op in between (realexec's `graph` kernel). A graph of ops that the compiled
worker runs itself (`Graph.compiled`: products, bias adds, elementwise ops) needs no Python at
all per call: realexec's compiled engine runs it whole without the GIL (as MXNet's bulk
execution of a CachedOp pushes a segment of ops as one engine op), and the model's native
workers price it so. The model prices a graph as the sum of its ops' costs. A graph is traced
per input shape, dtype and device, as MXNet's CachedOp infers. Assumptions: one output array;
the parameters' shapes are known after the trace (deferred initialisation happens during it, on
the real `nd`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from asyncsim.nd.ops import COMPILED, ShapeError, block_broadcast, broadcasts
from asyncsim.nd.program import Op, Var

# a compiled worker runs a graph in one call only if its temporaries (every var it writes but
# its output, all allocated for the call) come to at most this many bytes
NATIVE_TEMPORARIES = 64 << 20
_IN_ONE_CALL = COMPILED - {"normal", "uniform"}  # a sampler's seed is drawn per call: Python
_SIDE = 1 << 17  # a product's sizes and a bias's blocks the compiled worker takes: under these
_BLOCK_SIDE = 1 << 26


class HybridizeError(RuntimeError):
    """Something a hybridized block cannot do: it has no values while it is traced."""


@dataclass(eq=False)
class Graph:
    """The ops of one traced forward, over vars of its own numbering."""

    name: str
    inputs: tuple[int, ...]  # the vars the op's inputs bind to: the data, then the parameters
    in_shapes: tuple[tuple[int, ...], ...]
    ops: list[Op] = field(default_factory=list)
    vars: dict[int, Var] = field(default_factory=dict)
    output: int = -1
    names: dict[int, str] = field(default_factory=dict)  # symbol names, for printing

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.vars[self.output].shape

    @property
    def flops(self) -> float:
        return sum(op.flops for op in self.ops)

    @property
    def writes_in_place(self) -> bool:
        """Whether an op writes a parameter in place (then the graph is replayed op by op)."""
        return any(not op.fresh for op in self.ops)

    def check(self, shapes) -> None:
        if tuple(shapes) != self.in_shapes:
            raise ShapeError(f"{self.name}: the hybridized graph was traced for inputs "
                             f"{self.in_shapes}, got {tuple(shapes)}")

    @property
    def compiled(self) -> bool:
        """Whether a compiled worker runs the whole graph itself, no Python per call (realexec's
        `native_ops.GRAPH`): every op one it runs (elementwise ops, a bias add, a 2-d product;
        not a sampler), in float32 or float64, temporaries within `NATIVE_TEMPORARIES`, and an
        output that is not one of its inputs. realexec's `graph.program` decides the same from
        the kernels' own table (tests hold the two together)."""
        if self.output in self.inputs or self.writes_in_place:
            return False
        temporaries = 0
        for op in self.ops:
            out = self.vars[op.out]
            if op.name not in _IN_ONE_CALL or str(out.dtype) not in ("float32", "float64"):
                return False
            shapes = [self.vars[v].shape for v in op.reads]
            if op.name == "dot" and (len(shapes) != 2 or any(len(s) != 2 for s in shapes)
                                     or not all(0 < d < _SIDE for s in shapes for d in s)):
                return False
            if (len(shapes) == 2 and shapes[0] != shapes[1] and op.name != "copyto"
                    and op.name != "dot"):
                block = block_broadcast(shapes[0], shapes[1])
                if block is None or max(block) >= _BLOCK_SIDE:
                    return False
            if op.out != self.output:
                temporaries += out.nbytes
        return temporaries <= NATIVE_TEMPORARIES

    def broadcasts(self, op: Op) -> bool:
        """Whether a binary member op's operands differ in shape (priced as broadcasting)."""
        return broadcasts(op, self.vars)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}: {len(self.ops)} ops, output {self.out_shape})"


class Tracer:
    """The backend of a symbolic `nd`: it writes the ops of one trace into a Graph. The real
    backend and `nd` are kept so that blocks can create their parameters for real while being
    traced (deferred initialisation) and so devices are checked as the real run will."""

    def __init__(self, name: str, real_nd):
        self.name = name
        self.real_nd = real_nd
        self.graph = Graph(name, (), ())
        self.counts: dict[str, itertools.count] = {}
        self.describe = f"<nd symbols: tracing {name}>"
        self.nd = None  # the symbolic nd, set by `trace`
        self.bound: list[tuple[object, int]] = []  # (parameter key, var) in first-use order
        self.by_key: dict[int, object] = {}
        self.blocks = [name]  # the traced block, then the child blocks being called in it

    @property
    def where(self) -> str:
        """The block running now, as a path from the traced one: the name errors give."""
        return "/".join(self.blocks)

    def check_device(self, device: str) -> None:
        self.real_nd._backend.check_device(device)

    def symbol(self, real, name: str, key=None):
        """A symbol standing for the real array `real` (a parameter when `key` is given: one
        symbol per key, bound as an input of the graph in first-use order)."""
        from asyncsim.nd.ndarray import NDArray

        if key is not None and id(key) in self.by_key:
            return self.by_key[id(key)]
        F = self.nd
        var = next(F._var_ids)
        self.graph.vars[var] = Var(var, real.shape, real.dtype, real.device, real.nbytes)
        self.graph.names[var] = name
        sym = NDArray(F, var, real.shape, real.dtype, real.ctx, real.device, real.nbytes)
        if key is not None:
            self.by_key[id(key)] = sym
            self.bound.append((key, var))
        return sym

    def issue(self, op, out_var, host) -> None:
        if host is not None:
            raise HybridizeError(f"{self.where}: nd.array inside a hybridized block; pass data in "
                                 f"as an input instead")
        if not op.fresh and op.out not in {var for _, var in self.bound}:
            raise HybridizeError(f"{self.where}: the in-place operation {op.name} cannot be "
                                 f"hybridized; write `a = a + b` instead of `a += b` or "
                                 f"`a[:] = ...`")
        self.graph.ops.append(op)
        if out_var is None:  # a parameter written in place keeps its var and name
            return
        self.graph.vars[out_var.id] = out_var
        count = next(self.counts.setdefault(op.name, itertools.count()))
        self.graph.names[out_var.id] = f"{self.name.lower()}_{op.name}{count}"

    def sync(self, kind: str, var):
        raise HybridizeError(f"{self.where}: {kind} inside a hybridized block: a symbol has no "
                             f"value while the block is traced (remove it, or do not hybridize)")

    def free(self, var: int) -> None:
        return None

    def mark(self, label: str, begin: bool) -> None:
        return None


def trace(fn, name: str, inputs: list):
    """Run `fn(F, *symbols)` once on symbols standing for the real arrays `inputs` and return
    (its Graph, the keys of the parameters it bound, in the order the graph takes them)."""
    from asyncsim.nd.frontend import ND
    from asyncsim.nd.ndarray import NDArray

    real_nd = inputs[0].nd
    tracer = Tracer(name, real_nd)
    F = ND(tracer, seed=real_nd._seed, current=False)
    F._symbolic = True
    tracer.nd = F
    data = [tracer.symbol(x, "data" if i == 0 else f"data{i}") for i, x in enumerate(inputs)]
    out = fn(F, *data)
    if isinstance(out, list | tuple):
        raise HybridizeError(f"{name}: a hybridized block must return one array, "
                             f"got {len(out)}")
    if not isinstance(out, NDArray) or out.nd is not F:
        raise HybridizeError(f"{name}: a hybridized block must return an array computed from "
                             f"its input, got {out!r:.60}")
    bound = [s.var for s in data] + [var for _, var in tracer.bound]
    if out.var in bound:  # the graph must write a fresh output
        out = F.invoke("copy", out)
    graph = tracer.graph
    for _ in graph.ops:  # the trace's Python, per op traced, for the model
        real_nd.note("trace")
    graph.inputs = tuple(bound)
    graph.in_shapes = tuple(graph.vars[v].shape for v in bound)
    graph.output = out.var
    return graph, [key for key, _ in tracer.bound]


def _context(device: str):
    """The context of a device name ("cpu", "cpu1", "gpu0", ...)."""
    from asyncsim.nd.ndarray import Context

    kind = "gpu" if device.startswith("gpu") else "cpu"
    return Context(kind, int(device[3:] or 0))


def replay(graph: Graph, nd, inputs: list):
    """Issue the graph's ops one by one through `nd` (so autograd records them): what a
    hybridized block does inside `autograd.record()`. Returns the output array. A creation op
    is made on the device it was traced on; an in-place write into a parameter (a running
    statistic) is not recorded, as the imperative layer issues it."""
    from asyncsim.nd import autograd

    arrays = dict(zip(graph.inputs, inputs, strict=True))
    for op in graph.ops:
        reads = tuple(arrays[v] for v in op.reads)
        if not op.fresh:
            with autograd.pause(train_mode=autograd.is_training()):
                nd._op(op.name, reads, dict(op.attrs), out=arrays[op.out])
        elif not reads:
            arrays[op.out] = nd._op(op.name, reads, dict(op.attrs), ctx=_context(op.device))
        else:
            arrays[op.out] = nd._op(op.name, reads, dict(op.attrs))
    return arrays[graph.output]


__all__ = ["Graph", "HybridizeError", "Tracer", "replay", "trace"]
