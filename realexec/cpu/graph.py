"""The CPU kernel of `graph`: a hybridized block's traced ops run in order inside one engine op.

attrs['graph'] describes the block: `.inputs` (the var ids the op's inputs bind to, in order),
`.ops` (records with `.name`, `.reads`, `.out`, `.attrs`), `.vars` (var id -> record with
`.shape`, `.dtype`) and `.output` (the var id written into the op's `out`). Step by step, each
member op runs through the same kernel table as an ordinary op. The output var is bound to
`out`; every other var an op writes gets a temporary, allocated when written and dropped right
after its last read, so such a graph holds no more memory than the imperative run would.

The plan (which buffer each op reads and writes, and which temporaries die after it) is worked
out once per graph object and cached on it (in a module table, holding the graph, for an object
that takes no new attribute). An in-place op inside a graph is refused when the plan is made.
A graph whose every op the compiled worker runs itself (products, elementwise ops, bias adds:
`realexec.cpu.worker.native_op`) and whose temporaries come to at most `NATIVE_TEMPORARIES`
(`asyncsim.nd.jit.Graph.compiled` says the same from the graph alone) does not come here on
the compiled engine: `program(graph)` encodes it once, and the worker runs each call itself, no
Python and no GIL per call (`native_ops.GRAPH`). Here (the Python engine, or a member's kernel
replaced) it runs in one compiled call (`native_ops.run_steps`), over temporaries each worker
thread allocates once per graph and keeps; any other graph runs step by step.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

from asyncsim.nd.jit import NATIVE_TEMPORARIES  # the model's rule as well
from asyncsim.nd.ops import INPLACE

# fallback cache for graph objects that take no new attribute: id -> (graph, (steps, native
# coding)); the graph is kept alive with its plan, so its id cannot be reused by another object
_PLANS: dict[int, tuple[object, tuple]] = {}
_local = threading.local()  # per worker thread: id(graph) -> (graph, its native workspace)


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


def _cached_plan(graph) -> tuple[list[Step], list | None]:
    """The graph's steps and their native coding (`_native_plan`), worked out at its first run."""
    plan = getattr(graph, "_cpu_plan", None)
    if plan is not None:
        return plan
    entry = _PLANS.get(id(graph))
    if entry is not None and entry[0] is graph:
        return entry[1]
    steps = _plan(graph)
    plan = (steps, _native_plan(graph, steps))
    try:
        graph._cpu_plan = plan
    except (AttributeError, TypeError):
        _PLANS[id(graph)] = (graph, plan)
    return plan


def _native_plan(graph, plan: list[Step]):
    """Each step as (kind, code, dtype, scalar) of `realexec.cpu.worker.native_op`, or None when
    a step is not a native op or the temporaries come to more than `NATIVE_TEMPORARIES` (its
    temporaries are all allocated first; step by step, each is dropped after its last read)."""
    from realexec.cpu.worker import DTYPES, RANDOM, native_op  # (the worker imports this)

    coded, temporaries = [], 0
    for step in plan:
        shapes = [tuple(graph.vars[v].shape) for v in step.reads]
        dtype = np.dtype(graph.vars[step.out].dtype)
        code = native_op(step.name, step.attrs, shapes) if dtype in DTYPES else None
        if code is None or code[0] == RANDOM:  # a sampler's seed is drawn per call: Python
            return None
        coded.append((code[0], code[1], DTYPES[dtype], code[2]))
        if step.new is not None:
            temporaries += int(np.prod(step.new[0], dtype=np.int64)) * step.new[1].itemsize
    return coded if temporaries <= NATIVE_TEMPORARIES else None


class Program(NamedTuple):
    """A native graph as the compiled worker runs it (`native_ops.run_graph`)."""

    head: np.ndarray  # steps, the records' address, the scalars' address, temporaries' bytes
    records: np.ndarray  # per step (kind, code, dtype, n, a, b, out); a, b, out as bound
    scalars: np.ndarray
    address: int  # of `head`: the op's `a`
    names: tuple  # the member ops' names (their kernels must be the shipped ones)


_PROGRAMS: dict[int, tuple[object, Program | None]] = {}  # as `_PLANS`


def program(graph) -> Program | None:
    """The graph's `Program`, made at its first native call; None when it is not native (a
    member the worker does not run, too many temporaries) or writes into one of its inputs."""
    made = getattr(graph, "_cpu_program", None)
    if made is None:
        entry = _PROGRAMS.get(id(graph))
        made = entry[1] if entry is not None and entry[0] is graph else None
    if made is not None:
        return made or None
    plan, coded = _cached_plan(graph)
    made = False if coded is None or graph.output in graph.inputs else _program(graph, plan,
                                                                                 coded)
    try:
        graph._cpu_program = made
    except (AttributeError, TypeError):
        _PROGRAMS[id(graph)] = (graph, made)
    return made or None


def _program(graph, plan: list[Step], coded: list) -> Program:
    # an input is binding k (-1 - k), the output the one after them; each temporary an offset
    # into the call's scratch, on a cache line of its own
    where = {var: -1 - k for k, var in enumerate(graph.inputs)}
    where[graph.output] = -1 - len(graph.inputs)
    scratch = 0
    for step in plan:
        if step.new is not None and step.out not in where:
            where[step.out] = scratch
            scratch += -(-int(np.prod(step.new[0], dtype=np.int64)) * step.new[1].itemsize
                         // 64) * 64
    records, scalars = _records(graph, plan, coded, lambda var, row, column: where[var])
    head = np.array([len(plan), records.ctypes.data, scalars.ctypes.data, scratch], np.int64)
    return Program(head, records, scalars, head.ctypes.data,
                   tuple(dict.fromkeys(step.name for step in plan)))


def _records(graph, plan: list[Step], coded: list, field) -> tuple[np.ndarray, np.ndarray]:
    """Each step's record (kind, code, dtype, n, a, b, out) and its scalar, with a, b and out
    as `field(var, row, column)` gives them (a fill reads its own output)."""
    records = np.zeros((len(plan), 7), np.int64)
    scalars = np.zeros(len(plan), np.float64)
    for i, (step, (kind, code, dtype, scalar)) in enumerate(zip(plan, coded, strict=True)):
        records[i, :4] = (kind, code, dtype,
                          int(np.prod(graph.vars[step.out].shape, dtype=np.int64)))
        scalars[i] = scalar
        reads = step.reads[:2] if step.reads else (step.out,)
        for column, var in ((4, reads[0]), (5, reads[-1]), (6, step.out)):
            records[i, column] = field(var, i, column)
    return records, scalars


def _workspace(graph, plan, coded) -> tuple:
    """This thread's (temporaries, records, scalars, patches) for `graph`, made at its first
    run here: the records hold every step's op with the temporaries' addresses filled in, and
    `patches` says which fields take the call's inputs and output ((row, column, var))."""
    from realexec.cpu.worker import address

    spaces = _local.__dict__.setdefault("graphs", {})
    entry = spaces.get(id(graph))
    if entry is not None and entry[0] is graph:
        return entry[1:]
    temps = {step.out: np.empty(*step.new) for step in plan if step.new is not None}
    patches = []

    def field(var, row, column):
        if var in temps:
            return address(temps[var].reshape(-1))
        patches.append((row, column, var))  # filled in per call
        return 0

    records, scalars = _records(graph, plan, coded, field)
    spaces[id(graph)] = (graph, temps, records, scalars, patches)
    return temps, records, scalars, patches


def _run_native(graph, plan, coded, buffers) -> None:
    """Every step in one compiled call (`native_ops.run_steps`), no GIL held meanwhile, over this
    thread's temporaries for the graph (reused from call to call)."""
    from realexec.cpu.native_ops import run_steps
    from realexec.cpu.worker import GEMM_ADDRESSES, address

    temps, records, scalars, patches = _workspace(graph, plan, coded)
    for row, column, var in patches:
        records[row, column] = address(buffers[var].reshape(-1))
    sgemm, dgemm = GEMM_ADDRESSES or (0, 0)
    run_steps(records, scalars, sgemm, dgemm)


def graph_kernel(kernels: dict, built: dict | None = None):
    """The `graph` kernel over the table `kernels` (looked up per call, so a patched table
    entry is used). `built`: the kernels the compiled worker stands for (`kernels.KERNELS` as
    made); a graph runs in one compiled call only while each of its members' kernels is still
    that one (a test's gate or a teacher's tracer put in since runs step by step, as itself)."""
    built = built or {}

    def run_graph(inputs, out, attrs):
        graph = attrs["graph"]
        plan, coded = _cached_plan(graph)
        buffers = dict(zip(graph.inputs, inputs, strict=True))
        output_is_input = graph.output in buffers
        if not output_is_input:
            buffers[graph.output] = out
        if coded is not None and all(kernels[step.name] is built.get(step.name)
                                     for step in plan):
            _run_native(graph, plan, coded, buffers)
        else:
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
