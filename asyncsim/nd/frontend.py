"""The `nd` surface that workloads are written against, shared by both halves.

A workload is a plain function `workload(nd, **params)`. `ND` gives it MXNet's `nd` names
(creation, arithmetic, `dot`, blockers, contexts, `benchmark`) and `NDArray`
(`asyncsim.nd.ndarray`) its operators. Every call checks its inputs here, at the call (shapes and
dtypes through `asyncsim.nd.ops`, devices through the backend), builds one `Op` record and hands
it to a *backend*:

- `asyncsim.record.Recorder` appends it to a `Program` (no data);
- `realexec.frontend.EngineBackend` pushes it to the real engine.

A backend implements `issue(op, out_var, host)`, `sync(kind, var)` (what the blocker hands back:
asnumpy a copy of the values, item and print the values, print formatted as text, so that a real
backend's wait covers the formatting, as the model prices and draws a print), `free(var)`,
`mark(label, begin)` and `check_device(device)`. Frees follow CPython reference counting: when
the last Python handle to an array goes, `NDArray.__del__` tells the backend, in program order.
A backend may also have `issue_same(op_id, name, reads, var, shape, dtype, device, attrs,
nbytes)` (read once; None: it has none), which must do what `issue(*same_records(...), None)`
does: `ND._same` then hands it its ops without building their records (the compiled engine
keeps none, and building and reading them cost it 0.7 us of a 7 us op).

This is the real engine's push path too, so it is written for speed (about 1 us per op):
arithmetic with a number, or with an array of the same shape, dtype and device, copy and the
activations (relu, sigmoid, tanh, as methods or `nd` functions) take `ND._same`, which has
nothing left to infer (`ops.SAME_SHAPE`); everything else goes through `ND._op` and `ops.infer`.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import weakref

import numpy as np

from asyncsim.nd import autograd, ops
from asyncsim.nd.functions import Functions
from asyncsim.nd.ndarray import CPU, Context, NDArray, _dtype, _scalar
from asyncsim.nd.program import Op, Var

_TAPE = autograd.STATE  # read once per op: is autograd recording?
_ACTIVATIONS = frozenset({"relu", "sigmoid", "tanh"})  # `invoke` gives these to `_same`
_ITEMSIZE = ops.ITEMSIZE


class _Random:
    def __init__(self, nd: ND):
        self._nd = nd

    def uniform(self, low=0.0, high=1.0, shape=(1,), ctx=None, dtype="float32"):
        return self._nd._create("uniform", shape, ctx, dtype, low=_scalar("uniform", low),
                                high=_scalar("uniform", high))

    def normal(self, loc=0.0, scale=1.0, shape=(1,), ctx=None, dtype="float32"):
        return self._nd._create("normal", shape, ctx, dtype, loc=_scalar("normal", loc),
                                scale=_scalar("normal", scale))


class ND(Functions):
    """MXNet's `nd` namespace over a backend: what a workload function receives. The functions
    of layers and losses (Convolution, Pooling, softmax, ...) come from `Functions`."""

    NDArray = NDArray
    _symbolic = False  # True for the nd of a hybridize trace (`asyncsim.nd.jit`)

    def __init__(self, backend, seed: int = 0, device: str = "cpu", current: bool = True):
        if device not in ("cpu", "gpu"):
            raise ValueError(f"device must be 'cpu' or 'gpu' (where arrays made without a ctx "
                             f"live), got {device!r}")
        self._backend = backend
        self._free = backend.free  # bound once: every NDArray's __del__ calls it
        self._issue_same = getattr(backend, "issue_same", None)
        self._issue_scalar = getattr(backend, "issue_scalar", None)  # (`NDArray`'s operators)
        self._default = CPU if device == "cpu" else Context("gpu", 0)
        self._var_ids = itertools.count()
        self._op_ids = itertools.count()
        self._seed = seed
        self.random = _Random(self)
        if current:
            _current[0] = weakref.ref(self)

    def __repr__(self) -> str:
        describe = getattr(self._backend, "describe", None)
        return describe or f"<nd over {type(self._backend).__name__}>"

    # -- contexts ------------------------------------------------------------------------------
    def cpu(self, i: int = 0) -> Context:
        return Context("cpu", i)

    def gpu(self, i: int = 0) -> Context:
        ctx = Context("gpu", i)
        self._check_ctx(ctx)
        return ctx

    def _check_ctx(self, ctx) -> None:
        if not isinstance(ctx, Context):
            raise TypeError(f"expected a context such as nd.cpu() or nd.gpu(0), got {ctx!r}")
        self._backend.check_device(ctx.device)

    # -- creation ------------------------------------------------------------------------------
    def _create(self, name, shape, ctx, dtype, **attrs):
        shape = _shape(name, shape)
        return self._op(name, (), {"shape": shape, "dtype": _dtype(name, dtype), **attrs},
                        ctx=self._default if ctx is None else ctx)

    def ones(self, shape, ctx=None, dtype="float32"):
        return self._create("ones", shape, ctx, dtype)

    def zeros(self, shape, ctx=None, dtype="float32"):
        return self._create("zeros", shape, ctx, dtype)

    def full(self, shape, val, ctx=None, dtype="float32"):
        return self._create("full", shape, ctx, dtype, value=_scalar("full", val))

    def array(self, source, ctx=None, dtype="float32"):
        if isinstance(source, NDArray):
            source = source.asnumpy()
        # a copy taken now: the op runs later, and the caller may change `source` meanwhile
        host = np.array(source, dtype=ops.check_dtype("array", _dtype("array", dtype)), order="C",
                        copy=True)
        return self._op("array", (), {"shape": host.shape, "dtype": str(host.dtype)},
                        ctx=self._default if ctx is None else ctx, host=host)

    # -- functions -----------------------------------------------------------------------------
    def relu(self, a: NDArray) -> NDArray:
        return self.invoke("relu", a)

    def invoke(self, name: str, *inputs, out=None, **attrs) -> NDArray:
        """Issue op `name` of `asyncsim.nd.ops` on `inputs` with `attrs` (into `out` for an
        in-place op): how gradients and layers reach ops that have no method of their own.
        An activation of one array of this nd takes `_same` (Gluon's `Dense` and `Activation`
        come here once per layer)."""
        if name in ops.INPLACE and out is None:
            out = inputs[0]
        if name in _ACTIVATIONS and out is None and len(inputs) == 1 and not attrs:
            a = inputs[0]
            if a.__class__ is NDArray and a.nd is self:
                return self._same(name, inputs, {})
        return self._op(name, tuple(inputs), attrs, out=out)

    def note(self, kind: str, block: str = "") -> None:
        """Tell the backend the frontend ran Python that issues no op (`program.Call`; `block`:
        the class of the Gluon block called): the recorder writes it down for the model; a real
        backend has nothing to do."""
        note = getattr(self._backend, "note", None)
        if note is not None:
            note(kind, block)

    def waitall(self) -> None:
        self._backend.sync("waitall", None)

    def cell(self) -> None:
        """A notebook cell boundary: the frontend idles until every queued op has finished (a
        reader between two cells), at no blocker cost; the trace shows a "cell" wait span."""
        self._backend.sync("cell", None)

    @contextlib.contextmanager
    def benchmark(self, label: str = "Done", sync: bool = False):
        """Time a region from entering the block to leaving it, in the run's own clock.

        Like d2l's `Benchmark`, the region ends when the frontend leaves the block: the chapters'
        workloads end their regions with an explicit `nd.waitall()`, and the ones that leave it
        out show that ops were only queued. `sync=True` appends a `waitall` so the region also
        covers every op issued before it ends."""
        self._backend.mark(label, True)
        try:
            yield
            if sync:
                self.waitall()
        finally:
            self._backend.mark(label, False)

    # -- the one place an op is built ----------------------------------------------------------
    # This is the push path of the real engine too, so it is written for speed: one pass over
    # the inputs, no sets, the per-array facts (device, bytes) read from the NDArray's slots.
    def _op(self, name, inputs, attrs, ctx=None, out=None, host=None) -> NDArray:
        """Check the call (inputs, devices, then shapes and dtypes through `ops.describe`),
        build the Op (and the Var of a fresh output), issue it; the result's handle."""
        in_bytes = 0
        for a in inputs:
            if a.__class__ is not NDArray or a.nd is not self:
                raise TypeError(f"{name}: inputs must be NDArrays of this nd, got {a!r:.60}")
            in_bytes += a.nbytes
        if inputs:
            first = inputs[0]
            if name != "copyto":
                device = first.device
                for a in inputs:
                    if a.device != device:
                        devs = ", ".join(str(a.ctx) for a in inputs)
                        raise ValueError(f"{name}: inputs are on different devices ({devs}); "
                                         f"move them with .copyto(ctx) first")
            ctx = ctx or first.ctx
        else:
            self._check_ctx(ctx)
        shapes = tuple([a.shape for a in inputs])
        shape, dtype, nbytes, flops, geometry = ops.describe(
            name, shapes, tuple([a.dtype for a in inputs]), attrs)
        op_id = next(self._op_ids)
        if name in ("uniform", "normal"):
            attrs["seed"] = self._seed * 1_000_003 + op_id
        return self._build(op_id, name, inputs, attrs, ctx, ctx.device, shape, dtype, nbytes,
                           in_bytes, flops, out, host, geometry)

    def _same(self, name, inputs, attrs, out=None) -> NDArray:
        """The fast path of `_op` for an op of `ops.SAME_SHAPE`, called by NDArray's own methods
        on NDArrays of this nd that share one shape, dtype and device (the caller checked): the
        result has that shape, dtype and device and costs a flop per element, so nothing is
        left to infer or to check. tests/test_frontend_fast_path.py holds it to `_op`."""
        first = inputs[0]
        # the slots, not their read-only properties: a property read costs twice a slot's
        nbytes, dtype, shape, device = first._nbytes, first._dtype, first._shape, first._device
        if out is not None:
            return self._build(next(self._op_ids), name, inputs, attrs, first._ctx, device,
                               shape, dtype, nbytes, nbytes * len(inputs),
                               float(nbytes // _ITEMSIZE[dtype]), out, None)
        # a fresh result, the common case: `_build` written out, one call less per op
        op_id = next(self._op_ids)
        var = next(self._var_ids)
        reads = (first.var,) if len(inputs) == 1 else (first.var, inputs[1].var)
        tape = _TAPE.active  # (one look, not two, while neither recording nor in a phase)
        if tape and _TAPE.phase is not None:
            attrs = {**attrs, "phase": _TAPE.phase}
        if self._issue_same is not None:
            self._issue_same(op_id, name, reads, var, shape, dtype, device, attrs, nbytes)
        else:  # `same_records`, written out: one call less per recorded op
            self._backend.issue(Op(op_id, name, reads, var, True, device, attrs,
                                   float(nbytes // _ITEMSIZE[dtype]), nbytes * (1 + len(reads))),
                                Var(var, shape, dtype, device, nbytes), None)
        result = NDArray(self, var, shape, dtype, first._ctx, device, nbytes)
        if tape and _TAPE.recording:
            autograd.note(result, name, inputs, attrs)
        return result

    def _build(self, op_id, name, inputs, attrs, ctx, device, shape, dtype, nbytes, in_bytes,
               flops, out, host, geometry="") -> NDArray:
        """Make the Op (and for a fresh output its Var), issue it, return the result's handle."""
        if out is None:
            var = next(self._var_ids)
            new = Var(var, shape, dtype, device, nbytes)
        else:
            if shape != out.shape:
                raise ops.ShapeError(f"{name}: result of shape {shape} cannot be written in "
                                     f"place into shape {out.shape}")
            if not any(a is out for a in inputs):
                inputs = (out, *inputs)
                in_bytes += out.nbytes
            var, new = out.var, None
        reads = (inputs[0].var,) if len(inputs) == 1 else tuple([a.var for a in inputs])
        if _TAPE.phase is not None:  # e.g. issued by backward: a profile may price it apart
            attrs = {**attrs, "phase": _TAPE.phase}
        op = Op(op_id, name, reads, var, out is None, device, attrs, flops, nbytes + in_bytes,
                geometry)
        if out is not None:
            if _TAPE.recording:  # before the issue: a refused in-place write must not run
                autograd.note(out, name, inputs, attrs)
            self._backend.issue(op, new, host)
            return out
        self._backend.issue(op, new, host)
        result = NDArray(self, var, shape, dtype, ctx, device, nbytes)
        if _TAPE.recording:
            autograd.note(result, name, inputs, attrs)
        return result


def same_records(op_id, name, reads, var, shape, dtype, device, attrs, nbytes) -> tuple[Op, Var]:
    """The Op and the output's Var of op `op_id` of `ops.SAME_SHAPE` on vars `reads`, whose fresh
    output `var` has their shape, dtype and device (`nbytes` bytes): a flop per element, and
    every input's bytes read and the output's written."""
    return (Op(op_id, name, reads, var, True, device, attrs, float(nbytes // _ITEMSIZE[dtype]),
               nbytes * (1 + len(reads))), Var(var, shape, dtype, device, nbytes))


def _shape(name: str, shape) -> tuple[int, ...]:
    """A shape given as an int or a sequence of ints (numpy's integers too), as a tuple of ints;
    a TypeError naming the op otherwise."""
    items = (shape,) if isinstance(shape, int | np.integer) else shape
    try:
        items = tuple(items)
        if any(isinstance(s, bool) for s in items):
            raise TypeError
        return tuple(operator.index(s) for s in items)
    except TypeError:
        raise TypeError(f"{name}: shape must be an int or a sequence of ints, got {shape!r:.60}")\
            from None


_current: list = [None]  # a weak reference to the nd made last (not a hybridize trace's)


def current() -> ND:
    """The `nd` a workload is running on: the one made last by `asyncsim.record`,
    `realexec.run` or `realexec.session`. Helpers that the book calls without an `nd` (the d2l
    package's data iterators) make their arrays with it, as MXNet's global `nd` would."""
    nd = _current[0]() if _current[0] is not None else None
    if nd is None:
        raise RuntimeError("no nd is active: call this inside a workload run by asyncsim.record/"
                           "predict or realexec.run, or inside `with realexec.session() as nd:`")
    return nd
