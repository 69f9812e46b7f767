"""The GPU kernel of `graph`: a hybridized block's traced ops enqueued in order on one stream,
inside one engine op.

attrs['graph'] describes the block: `.inputs` (the var ids the op's inputs bind to, in order),
`.ops` (records with `.name`, `.reads`, `.out`, `.attrs`), `.vars` (var id -> record with
`.shape`, `.dtype`) and `.output` (the var id written into the op's `out`). Each member op is
enqueued by the same kernel table as an ordinary op, on the graph op's stream, so the stream
orders them and nothing waits on the host.

Temporaries (every var an op writes but the output) live in *slots*: a plan, worked out once per
graph object and cached on it, gives each temporary a slot when its op runs and frees the slot
after the temporary's last reader, so a later temporary reuses it (stream order makes that
safe: the reader was enqueued first). A slot is as large as the largest var it ever holds, so a
graph needs no more device memory than its largest set of simultaneously live temporaries.

The slots of a graph are allocated once per stream it runs on, with cuda.device_array, and
kept while the graph lives: releasing them into the shared DevicePool after each run would let
another stream (the copy engine, another lane) take a buffer that kernels still queued here
will read, and the kernel has no event-driven release at hand. Consequences: they are not
counted in a run's live bytes; two streams running one graph at once get their own slots.
Units: bytes.
"""

from __future__ import annotations

import threading
from math import prod
from typing import NamedTuple

import numpy as np

from asyncsim.nd.ops import INPLACE
from realexec.gpu.runtime import cuda, on_simulator


class Step(NamedTuple):
    name: str
    reads: tuple  # var ids
    out: object  # var id
    attrs: dict


class Plan(NamedTuple):
    steps: list[Step]
    slot_bytes: list[int]  # size of each slot
    temps: dict  # var id -> (slot, shape, dtype)
    arenas: dict  # id(stream) -> (stream, {var id: device array})


_LOCK = threading.Lock()
_PLANS: dict[int, tuple[object, Plan]] = {}  # id -> (graph, plan), for graphs taking no attribute


def make_plan(graph) -> Plan:
    """Steps, and a slot for every temporary: taken when its op writes it, freed after the
    last op that reads it (an op's output never shares a slot with that op's inputs)."""
    ops = list(graph.ops)
    last_use = {}
    for i, op in enumerate(ops):
        for var in op.reads:
            last_use[var] = i
    bound = set(graph.inputs) | {graph.output}
    slot_bytes: list[int] = []
    free: list[int] = []
    temps = {}
    steps = []
    for i, op in enumerate(ops):
        if op.name in INPLACE:
            raise ValueError(f"graph: the in-place op {op.name!r} cannot run inside a "
                             f"hybridized graph")
        missing = [v for v in op.reads if v not in bound and v not in temps]
        if missing:
            raise ValueError(f"graph: op {i} ({op.name}) reads var(s) {missing} that no "
                             f"earlier op writes and that are not inputs of the graph")
        steps.append(Step(op.name, tuple(op.reads), op.out, dict(op.attrs)))
        if op.out not in bound and op.out not in temps:
            record = graph.vars[op.out]
            shape, dtype = tuple(record.shape), np.dtype(record.dtype)
            need = prod(shape) * dtype.itemsize
            slot = _take(free, slot_bytes, need)
            temps[op.out] = (slot, shape, dtype)
            if last_use.get(op.out, -1) <= i:  # written and never read: free at once
                free.append(slot)
        for var in dict.fromkeys(op.reads):
            if last_use[var] == i and var in temps:
                free.append(temps[var][0])
    return Plan(steps, slot_bytes, temps, {})


def _take(free: list[int], slot_bytes: list[int], need: int) -> int:
    """A free slot for `need` bytes: the smallest one that holds it, else the largest one
    (grown to fit), else a new one."""
    if free:
        fitting = [s for s in free if slot_bytes[s] >= need]
        slot = (min(fitting, key=slot_bytes.__getitem__) if fitting
                else max(free, key=slot_bytes.__getitem__))
        free.remove(slot)
        slot_bytes[slot] = max(slot_bytes[slot], need)
        return slot
    slot_bytes.append(need)
    return len(slot_bytes) - 1


def cached_plan(graph) -> Plan:
    plan = getattr(graph, "_gpu_plan", None)
    if plan is not None:
        return plan
    with _LOCK:
        entry = _PLANS.get(id(graph))
        if entry is not None and entry[0] is graph:
            return entry[1]
        plan = make_plan(graph)
        try:
            graph._gpu_plan = plan
        except (AttributeError, TypeError):
            # kept with its graph, so the id cannot be reused by another object
            _PLANS[id(graph)] = (graph, plan)
    return plan


def _typed_view(buffer, shape, dtype):
    """A C-contiguous array of shape/dtype over the start of a device buffer (bytes)."""
    if on_simulator():
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(np.ndarray(shape, dtype, buffer=buffer._ary))
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    strides, acc = [], dtype.itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return DeviceNDArray(shape, tuple(reversed(strides)), dtype, gpu_data=buffer.gpu_data)


def _arena(plan: Plan, stream) -> dict:
    """The temporaries' arrays for runs on `stream`, made on the first run there."""
    entry = plan.arenas.get(id(stream))
    if entry is None or entry[0] is not stream:
        slots = [cuda.device_array(max(n, 1), dtype=np.uint8) for n in plan.slot_bytes]
        views = {var: _typed_view(slots[slot], shape, dtype)
                 for var, (slot, shape, dtype) in plan.temps.items()}
        entry = (stream, views)
        with _LOCK:
            plan.arenas[id(stream)] = entry  # holding the stream keeps its id from reuse
    return entry[1]


def graph_kernel(kernels: dict):
    """The `graph` kernel over the table `kernels` (looked up per step, so a patched entry
    is used)."""

    def run_graph(inputs, out, attrs, stream):
        graph = attrs["graph"]
        plan = cached_plan(graph)
        arrays = dict(_arena(plan, stream))
        arrays.update(zip(graph.inputs, inputs, strict=True))
        output_is_input = graph.output in graph.inputs
        if not output_is_input:
            arrays[graph.output] = out
        for step in plan.steps:
            kernels[step.name](tuple([arrays[v] for v in step.reads]), arrays[step.out],
                               step.attrs, stream)
        if output_is_input and out.size:
            kernels["copy"]((arrays[graph.output],), out, {}, stream)

    return run_graph
