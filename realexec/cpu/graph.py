"""The CPU kernel of `graph`: a hybridized block's traced ops run in order inside one engine op.

attrs['graph'] describes the block: `.inputs` (the var ids the op's inputs bind to, in order),
`.ops` (records with `.name`, `.reads`, `.out`, `.attrs`), `.vars` (var id -> record with
`.shape`, `.dtype`) and `.output` (the var id written into the op's `out`). Each member op runs
through the same kernel table as an ordinary op. The output var is bound to `out`; every other
var an op writes gets a temporary, allocated when written and dropped right after its last
read, so a graph holds no more memory than the imperative run would.

The plan (which buffer each op reads and writes, and which temporaries die after it) is worked
out once per graph object and cached on it (in a module table, holding the graph, for an object
that takes no new attribute). An in-place op inside a graph is refused when the plan is made.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from asyncsim.nd.ops import INPLACE

# fallback cache for graph objects that take no new attribute: id -> (graph, plan); the graph is
# kept alive with its plan, so its id cannot be reused by another object
_PLANS: dict[int, tuple[object, list]] = {}


class Step(NamedTuple):
    name: str
    reads: tuple
    out: object
    attrs: dict
    new: tuple | None  # (shape, dtype) of a temporary to allocate for `out`, or None
    dead: tuple  # temporaries no later step reads


def _plan(graph) -> list[Step]:
    ops = list(graph.ops)
    last_read = {}
    for i, op in enumerate(ops):
        for var in op.reads:
            last_read[var] = i
    kept = set(graph.inputs) | {graph.output}
    steps = []
    for i, op in enumerate(ops):
        if op.name in INPLACE:
            raise ValueError(f"graph: the in-place op {op.name!r} cannot run inside a "
                             "hybridized graph")
        new = None
        if op.out != graph.output:
            record = graph.vars[op.out]
            new = (tuple(record.shape), np.dtype(record.dtype))
        dead = tuple(v for v in dict.fromkeys(op.reads) if last_read[v] == i and v not in kept)
        if new is not None and last_read.get(op.out, -1) <= i:
            dead += (op.out,)  # written and never read again: dropped at once
        steps.append(Step(op.name, tuple(op.reads), op.out, dict(op.attrs), new, dead))
    return steps


def _cached_plan(graph) -> list[Step]:
    plan = getattr(graph, "_cpu_plan", None)
    if plan is not None:
        return plan
    entry = _PLANS.get(id(graph))
    if entry is not None and entry[0] is graph:
        return entry[1]
    plan = _plan(graph)
    try:
        graph._cpu_plan = plan
    except (AttributeError, TypeError):
        _PLANS[id(graph)] = (graph, plan)
    return plan


def graph_kernel(kernels: dict):
    """The `graph` kernel over the table `kernels` (looked up per call, so a patched table
    entry is used)."""

    def run_graph(inputs, out, attrs):
        graph = attrs["graph"]
        plan = _cached_plan(graph)
        buffers = dict(zip(graph.inputs, inputs, strict=True))
        output_is_input = graph.output in buffers
        if not output_is_input:
            buffers[graph.output] = out
        for step in plan:
            if step.new is not None:
                buffers[step.out] = np.empty(*step.new)
            kernels[step.name](tuple(buffers[v] for v in step.reads), buffers[step.out],
                               step.attrs)
            for var in step.dead:
                del buffers[var]
        if output_is_input:
            np.copyto(out, buffers[graph.output])

    return run_graph
