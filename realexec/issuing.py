"""How `realexec.frontend.EngineBackend` issues ops: op records into engine pushes.

`issue` is the backend protocol's general path. It reserves the output buffer from the device's
`Pool` and pushes the op's kernel (`realexec.cpu.kernels.KERNELS[name](inputs, out, attrs)`) to
the engine, reading the input vars and writing the output var; an op that touches a GPU goes to
its lanes (`realexec.gpu.backend`). On the compiled engine an op the worker runs itself
(`asyncsim.nd.ops.COMPILED`, encoded by `realexec.cpu.worker.native_op`) is pushed as that code
over the buffers' addresses, and a hybridized graph of such ops as one program
(`realexec.cpu.graph.program`), so no Python runs per op on the worker. `issue_same` does the
same for the frontend's fast path (`ND._same`) without its records: the common case of
`y = x + 1`, written out.

Assumes the kernel table as shipped: an op whose kernel was replaced (a test's gate, a teacher's
tracer, assigned through `kernels`) runs as given, in Python, on the compiled engine too. A pool
hands out arrays at offset 0 of their buffers (`_address_of`). Units: nanoseconds
(perf_counter_ns) for `t_issue`, bytes and addresses as ints.

`Issuing` is mixed into `EngineBackend`, which sets the state its methods use (`engine`, `vars`,
`pools`, `_native`, `_same`, `_on_device`; `kernels` through the setter here), with its
other halves: `gpus` and `_issue_gpu` (`realexec.gpu.backend`), `_take_cpu` and `_release_cpu`
(`realexec.cpu.drops`).
"""

from __future__ import annotations

from time import perf_counter_ns

import numpy as np

from asyncsim.nd.frontend import same_records
from asyncsim.nd.ops import COMPILED
from realexec.cpu import kernels as cpu
from realexec.cpu.graph import program
from realexec.cpu.native_ops import GRAPH
from realexec.cpu.worker import (
    DTYPES,
    RANDOM,
    SCALAR,
    UNARY,
    address,
    native_op,
    random_fields,
)
from realexec.engine.deps import Var
from realexec.engine.memory import ADDRESSES
from realexec.engine.shutdown import EngineStopped
from realexec.gpu.vars import StreamVar, after_device

_KERNELS = dict(cpu.KERNELS)  # as shipped: the native worker runs these ops itself
_CODES = {d.name: code for d, code in DTYPES.items()}  # by name: a str's hash is kept


class Issuing:
    """`issue`, `issue_same` and the kernel table they check (`kernels`)."""

    def issue(self, op, out_var, host) -> None:
        if (self._world is not None and out_var is not None and host is None
                and op.name in self._unary and len(op.reads) == 1 and op.device == "cpu"
                and not self.gpus):
            # an elementwise op of one array that did not come through `ND._same` (a gradient,
            # `nd.invoke`): the light push's too, as the model takes every such op
            # (`asyncsim.model.light`); it sends the rest on to the general path below
            self._same(op.id, op.name, op.reads, out_var.id, out_var.shape, out_var.dtype,
                       op.device, op.attrs, out_var.nbytes)
            return
        if self._light_drops:  # (a light engine's) before the output is reserved
            self._hand_drops()
        engine = self.engine
        if engine.max_inflight is not None:
            engine.throttle(op.name, op.id)  # before reserving: the cap bounds memory too
        t_issue = perf_counter_ns()
        gpus = self.gpus
        if gpus and (op.device[0] == "g" or op.attrs.get("src", "cpu")[0] == "g"):
            ends = (op.device, op.attrs.get("src", op.device))
            if op.name == "copyto" and "cpu" not in ends and any(e[0] == "c" for e in ends):
                raise ValueError(f"copyto: copies between {ends[1]} and {ends[0]} are not "
                                 f"supported; copy through cpu(0)")
            self._issue_gpu(op, out_var, host, t_issue)
            return
        vars_ = self.vars
        if out_var is not None:
            device = out_var.device
            try:
                out = (self._take_cpu(out_var.shape, out_var.dtype) if device == "cpu"
                       else Var(device, self.pools[device].acquire(out_var.shape,
                                                                   out_var.dtype)))
            except MemoryError as exc:
                raise no_room(op.name, out_var.shape, out_var.dtype, exc) from None
            vars_[out_var.id] = out
        else:
            out = vars_[op.out]
        name, names = op.name, op.reads
        if len(names) == 1:  # most ops read one var: skip the list building
            reads = (vars_[names[0]],)
        else:
            reads = tuple([vars_[v] for v in names])
        if op.device != "cpu":  # cpu(i): its spans are shown under it in `trace`
            self._on_device[op.id] = op.device
        coded = native = None
        if self._native and host is None and not (
                gpus and any(type(v) is StreamVar for v in reads)):
            # a replaced kernel (a test's gate, a teacher's tracer) runs as given, in Python,
            # and so does an op whose input a GPU copy fills (it waits for the copy in Python)
            if name in COMPILED:
                if self._kernels[name] is _KERNELS[name]:
                    coded = native_op(name, op.attrs, [v.data.shape for v in reads])
            elif name == "graph":
                native = self._graph_program(op.attrs["graph"])
        try:
            if native is not None:  # the worker runs the whole graph: no Python per call
                bindings = np.array([v.ptr or _address_of(v) for v in reads]
                                    + [out.ptr or _address_of(out)], np.int64)
                engine.push_native(GRAPH, 0, 0, len(bindings), native.address,
                                   address(bindings), int(bindings[-1]), 0.0, reads, (out,),
                                   "cpu", name, op.id, t_issue, None, (bindings, native))
                return
            if coded is not None:  # the compiled worker runs it, over the buffers' addresses
                kind, code, scalar = coded
                data = out.data
                a = b = c = out.ptr or _address_of(out)
                if reads:
                    a = b = reads[0].ptr or _address_of(reads[0])
                    if len(reads) > 1:
                        b = reads[1].ptr or _address_of(reads[1])
                elif kind == RANDOM:  # a sampler reads nothing: its seed and second bound
                    a, b = random_fields(name, op.attrs)
                engine.push_native(kind, code, DTYPES[data.dtype], data.size, a, b, c, scalar,
                                   reads, (out,), "cpu", name, op.id, t_issue)
                return
            if host is not None:
                inputs = (host,)
            elif len(reads) == 1:
                inputs = (reads[0].data,)
            else:
                inputs = tuple([v.data for v in reads])
            fn, args = self._kernels[name], (inputs, out.data, op.attrs)
            if gpus:
                copied = tuple([v for v in reads if type(v) is StreamVar])
                if copied:  # buffers a copy from a GPU fills: wait for those copies first
                    fn, args = after_device, (fn, copied, *args)
            engine.push(fn, reads, (out,), "cpu", name, args, op.id, t_issue)
        except EngineStopped:  # refused before queuing: give the fresh output back
            if out_var is not None:
                vars_.pop(out_var.id, None)
                self.pools[out_var.device].release(out.data)
            raise

    def _graph_program(self, graph):
        """The compiled worker's program of a hybridized graph (`realexec.cpu.graph.program`),
        or None: not a native graph, or a kernel it uses replaced (it then runs as given)."""
        native = program(graph)
        kernels = self._kernels
        if native is None or kernels["graph"] is not _KERNELS["graph"] or any(
                kernels[n] is not _KERNELS[n] for n in native.names):
            return None
        return native

    @property
    def kernels(self) -> dict:
        """The CPU kernels by op name (`realexec.cpu.kernels.KERNELS`). A test's gate or a
        teacher's tracer replaces it by assignment, with a new dict: an op whose kernel is not
        the shipped one then runs it as given, in Python, on the compiled engine too."""
        return self._kernels

    @kernels.setter
    def kernels(self, table: dict) -> None:
        self._kernels = table
        # the compiled worker's elementwise ops over one input whose kernel is the shipped one:
        # `_issue_same` looks the commonest op up here, not through `native_op`
        self._unary = {name: code for name, code in UNARY.items()
                       if table.get(name) is _KERNELS.get(name)}
        self._light_codes = {}  # the light push's own look-up of them (`realexec.cpu.light`)

    @property
    def issue_same(self):
        """How `ND._same` issues its ops on the compiled engine: `realexec.unary`'s push for the
        commonest op, in front of `_issue_same`; None on the Python engine, which gains nothing
        by it (`ND` then hands `issue` the records)."""
        return self._same

    @property
    def issue_scalar(self):
        """How `NDArray`'s operators issue an op of an array and a number (`y = x + 1`) on an
        engine with light results, without records or an attrs dict (`realexec.unary`); None
        elsewhere (they then take `ND._same`)."""
        return self._scalar

    def _issue_same(self, op_id, name, reads, var, shape, dtype, device, attrs, nbytes) -> None:
        """`issue(*same_records(...), None)`: an op from `ND._same`, whose fresh output has its
        inputs' shape, dtype and device. The common case is written out (the compiled worker
        runs it on cpu(0), no GPU is in use, the kernel is the one shipped): building and reading
        the records and the general path's tests cost 0.7 us of a 7 us op (2-core Xeon VM). An
        elementwise op over one input (`y = x + 1`, relu: `UNARY`) comes here only when
        `realexec.unary`'s push leaves it (`max_inflight`, a poisoned var, a closed engine)."""
        on_cpu = device == "cpu" and not self.gpus
        code = self._unary.get(name) if on_cpu and len(reads) == 1 else None
        if code is not None:
            kind, scalar = SCALAR, attrs.get("scalar", 0.0)
        else:
            coded = None
            if on_cpu and self._kernels.get(name) is _KERNELS.get(name):
                coded = native_op(name, attrs, (shape,) * len(reads))
            if coded is None:
                self.issue(*same_records(op_id, name, reads, var, shape, dtype, device, attrs,
                                         nbytes), None)
                return
            kind, code, scalar = coded
        engine, vars_ = self.engine, self.vars
        if engine.max_inflight is not None:
            engine.throttle(name, op_id)  # before reserving: the cap bounds memory too
        t_issue = perf_counter_ns()
        x = vars_[reads[0]]
        y = None if len(reads) == 1 else vars_[reads[1]]
        try:
            out = self._take_cpu(shape, dtype)
        except MemoryError as exc:
            raise no_room(name, shape, dtype, exc) from None
        vars_[var] = out
        data = out.data
        a = x.ptr or _address_of(x)
        b = a if y is None else y.ptr or _address_of(y)
        try:
            engine.push_native(kind, code, _CODES[dtype], data.size, a, b,
                               out.ptr or _address_of(out), scalar,
                               (x,) if y is None else (x, y), (out,), "cpu", name, op_id, t_issue)
        except EngineStopped:  # refused before queuing: give the fresh output back
            del vars_[var]
            self._release_cpu(data)
            raise


def no_room(name: str, shape, dtype, exc: MemoryError) -> MemoryError:
    """The error of op `name` whose output (`shape`, `dtype`) could not be had: `exc`, said at
    the call that asked for it."""
    return MemoryError(f"{name}: cannot allocate an array of shape {shape} ({dtype}): {exc}")


def _address_of(var) -> int:
    """A CPU var's buffer address, learned once: from `memory.ADDRESSES` (a pool hands out
    arrays at offset 0 of their buffers), else by a compiled call (0.4 us; numpy's own costs
    ~1 us)."""
    data = var.data
    where = ADDRESSES.get(id(data.base))
    var.ptr = where if where is not None else address(data.reshape(-1))
    return var.ptr
