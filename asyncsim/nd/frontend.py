"""The `nd` surface that workloads are written against, shared by both halves.

A workload is a plain function `workload(nd, **params)`. `ND` gives it MXNet's `nd` names
(creation, arithmetic, `dot`, blockers, contexts, `benchmark`) and `NDArray` its operators.
Every call checks its inputs here, at the call (shapes and dtypes through `asyncsim.nd.ops`, devices
through the backend), builds one `Op` record and hands it to a *backend*:

- `asyncsim.record.Recorder` appends it to a `Program` (no data);
- `realexec.frontend.EngineBackend` pushes it to the real engine.

A backend implements `issue(op, out_var, host)`, `sync(kind, var)`, `free(var)`,
`mark(label, begin)` and `check_device(device)`. Frees follow CPython reference counting: when
the last Python handle to an array goes, `NDArray.__del__` tells the backend, in program order.

This is the real engine's push path too, so it is written for speed (about 1 us per op):
arithmetic with a number, or with an array of the same shape, dtype and device, and relu and
copy, take `ND._same`, which has nothing left to infer (`ops.SAME_SHAPE`); everything else goes
through `ND._op` and `ops.infer`.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import weakref
from dataclasses import dataclass

import numpy as np

from asyncsim.nd import autograd, ops
from asyncsim.nd.functions import Functions
from asyncsim.nd.program import Op, Var

_TAPE = autograd.STATE  # read once per op: is autograd recording?


@dataclass(frozen=True, slots=True)
class Context:
    device_type: str  # "cpu" or "gpu"
    device_id: int = 0

    def __post_init__(self):
        if self.device_type not in ("cpu", "gpu"):
            raise ValueError(f"unknown device type {self.device_type!r}: devices are nd.cpu(i) "
                             f"and nd.gpu(i)")
        if isinstance(self.device_id, bool) or not isinstance(self.device_id, int | np.integer) \
                or self.device_id < 0:
            raise ValueError(f"device id must be a non-negative int, got {self.device_id!r}")

    @property
    def device(self) -> str:
        """The device's name in programs, traces and profiles: "cpu" for cpu(0), "cpu1".. for
        cpu(i) (a device of its own, with its own workers, as MXNet's cpu(i) contexts have),
        "gpu0".. for gpu(i)."""
        if self.device_type == "cpu":
            return "cpu" if self.device_id == 0 else f"cpu{self.device_id}"
        return f"gpu{self.device_id}"

    def __str__(self) -> str:
        return f"{self.device_type}({self.device_id})"

    __repr__ = __str__


CPU = Context("cpu", 0)


def _arithmetic(name: str, scalar_name: str, in_place: bool = False):
    """An NDArray operator: op `name` with an array, `scalar_name` with a Python or numpy number
    (the result written into the left operand when `in_place`).

    The two common cases take the fast path (`ND._same`): a number, and an array of the same nd
    with the same shape, dtype and device. The rest (broadcasting, mixed devices or dtypes,
    foreign objects) takes the general path, which checks and explains."""

    def operator(self, other):
        out = self if in_place else None
        cls = other.__class__
        if cls is float:
            return self.nd._same(scalar_name, (self,), {"scalar": other}, out)
        if cls is int:
            return self.nd._same(scalar_name, (self,), {"scalar": _scalar(name, other)}, out)
        if cls is NDArray:
            if (other.shape == self.shape and other.nd is self.nd
                    and other.device == self.device and other.dtype == self.dtype):
                return self.nd._same(name, (self, other), {}, out)
            return self.nd._op(name, (self, other), {}, out=out)
        if isinstance(other, int | float | np.number):
            return self.nd._same(scalar_name, (self,), {"scalar": _scalar(name, other)}, out)
        if isinstance(other, np.ndarray):
            raise TypeError(f"{name}: cannot combine an NDArray with a numpy array; make it an "
                            f"NDArray first with nd.array(...)")
        return NotImplemented

    return operator


class NDArray:
    """A handle to one var: shape, dtype and context are known at once; values only on a blocker.

    `device` is the memory-pool name of `ctx` ("cpu", "gpu0"), kept so the push path reads a
    slot instead of calling `Context.device` per op."""

    __slots__ = ("nd", "var", "_shape", "_dtype", "_ctx", "_device", "_nbytes", "_node",
                 "_grad", "__weakref__")

    # what the array is, read-only: an op trusts them (a rewritten shape would send a kernel
    # past the end of its buffer)
    shape = property(operator.attrgetter("_shape"), doc="the shape, a tuple of ints")
    dtype = property(operator.attrgetter("_dtype"), doc="the dtype's name")
    ctx = property(operator.attrgetter("_ctx"), doc="the Context it lives on")
    device = property(operator.attrgetter("_device"), doc='the device\'s name ("cpu", "gpu0")')
    nbytes = property(operator.attrgetter("_nbytes"), doc="its size in bytes")

    # numpy must not broadcast its ufuncs over NDArrays (it would build object arrays of them):
    # `nd_array + numpy_array` raises TypeError instead; move data with nd.array(...) first
    __array_ufunc__ = None

    def __init__(self, nd: ND, var: int, shape: tuple[int, ...], dtype: str, ctx: Context,
                 device: str, nbytes: int):
        self.nd = nd
        self.var = var
        self._shape = shape
        self._dtype = dtype
        self._ctx = ctx
        self._device = device
        self._nbytes = nbytes
        self._node = None  # autograd: (op name, inputs, attrs) of the op that made it, recorded
        self._grad = None  # autograd: the gradient buffer attach_grad() made

    def __del__(self):
        # try/except rather than contextlib.suppress: this runs once per op and costs nothing
        # when nothing is raised
        try:
            self.nd._free(self.var)
        except Exception:  # interpreter shutdown may have torn things down
            pass

    # -- properties --------------------------------------------------------------------------
    @property
    def context(self) -> Context:
        return self.ctx

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d NDArray")
        return self.shape[0]

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(f"the truth value of an NDArray of shape {self.shape} is ambiguous "
                             f"(use .item() on a one-element array)")
        return self.item() != 0.0

    __hash__ = object.__hash__  # `==` is elementwise, as MXNet's; identity stays the hash

    # -- arithmetic ----------------------------------------------------------------------------
    # each operator comes from `_arithmetic` (above): one Python call per `a + b`
    __add__ = __radd__ = _arithmetic("add", "add_scalar")
    __sub__ = _arithmetic("sub", "sub_scalar")
    __rsub__ = _arithmetic("sub", "rsub_scalar")
    __mul__ = __rmul__ = _arithmetic("mul", "mul_scalar")
    __truediv__ = _arithmetic("div", "div_scalar")
    __rtruediv__ = _arithmetic("div", "rdiv_scalar")
    __iadd__ = _arithmetic("add", "add_scalar", in_place=True)
    __isub__ = _arithmetic("sub", "sub_scalar", in_place=True)
    __imul__ = _arithmetic("mul", "mul_scalar", in_place=True)
    __itruediv__ = _arithmetic("div", "div_scalar", in_place=True)

    def __neg__(self):
        return self.nd._same("mul_scalar", (self,), {"scalar": -1.0})

    def __eq__(self, other):
        if isinstance(other, NDArray):
            return self.nd._op("equal", (self, other), {})
        if isinstance(other, int | float | np.number):
            return self.nd._op("equal", (self, self.nd.full((), other, self.ctx, self.dtype)), {})
        return NotImplemented

    def sum(self, axis=None, keepdims=False):
        return self.nd.sum(self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        return self.nd.mean(self, axis, keepdims)

    def norm(self):
        return self.nd._op("norm", (self,), {})

    def relu(self):
        return self.nd._same("relu", (self,), {})

    def argmax(self, axis=None):
        return self.nd.argmax(self, axis)

    def reshape(self, *shape):
        return self.nd.reshape(self, shape[0] if len(shape) == 1 else shape)

    def flatten(self):
        return self.nd.flatten(self)

    def astype(self, dtype):
        return self.nd._op("cast", (self,), {"dtype": _dtype("cast", dtype)})

    def softmax(self, axis=-1):
        return self.nd.softmax(self, axis)

    # -- autograd ------------------------------------------------------------------------------
    def attach_grad(self, grad_req: str = "write") -> None:
        """Give this array a gradient buffer (zeros): a leaf of the next `backward()`."""
        if grad_req != "write":
            raise ValueError(f"attach_grad: grad_req {grad_req!r} is not supported (use 'write')")
        self._grad = self.nd.zeros(self.shape, ctx=self.ctx, dtype=self.dtype)
        self._node = None

    @property
    def grad(self):
        return self._grad

    def backward(self, out_grad=None, retain_graph: bool = False) -> None:
        """Issue the gradient ops of what was recorded up to this array (see `autograd`)."""
        autograd.backward(self, out_grad, retain_graph)

    def detach(self) -> NDArray:
        """A copy that autograd does not follow."""
        with autograd.pause(autograd.is_training()):
            return self.copy()

    # -- first-axis indexing -------------------------------------------------------------------
    def _rows(self, key) -> dict:
        if not self.shape:
            raise IndexError(f"cannot index a 0-d array of shape {self.shape}")
        n = self.shape[0]
        if isinstance(key, bool | np.bool_):
            raise IndexError(f"boolean indices are not supported (got {key!r} for shape "
                             f"{self.shape})")
        if isinstance(key, int | np.integer):
            i = int(key) + (n if key < 0 else 0)
            if not 0 <= i < n:
                raise IndexError(f"index {key} is out of range for axis 0 of shape {self.shape}")
            return {"start": i, "stop": i + 1, "squeeze": True}
        if isinstance(key, slice) and key.step in (None, 1):
            start, stop, _ = key.indices(n)
            return {"start": start, "stop": max(start, stop), "squeeze": False}
        raise IndexError(f"only integers and step-1 slices of the first axis are supported, "
                         f"got {key!r} for shape {self.shape}")

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d NDArray")
        return (self[i] for i in range(self.shape[0]))

    def __getitem__(self, key):
        if _whole(key) and self.shape:  # `a[:]` is `a`, as MXNet's view is: `a[:] += b` writes a
            return self
        return self.nd._op("slice", (self,), self._rows(key))

    def __setitem__(self, key, value):
        rows = self._rows(key)
        if value is self and _whole(key):  # what `a[:] += b` leaves to do: nothing
            return
        if isinstance(value, NDArray):
            self.nd._op("setitem", (self, value), rows, out=self)
        elif isinstance(value, int | float | np.number):
            self.nd._op("setitem_scalar", (self,), {**rows, "scalar": float(value)}, out=self)
        else:
            raise TypeError(f"setitem: cannot assign a {type(value).__name__} into an NDArray")

    # -- devices -------------------------------------------------------------------------------
    def copyto(self, other) -> NDArray:
        """A copy on context `other`, or (`other` an NDArray) into `other`, which is returned:
        a copy to its device, then an in-place `assign` there."""
        if isinstance(other, NDArray):
            if other.shape != self.shape:
                raise ops.ShapeError(f"copyto: cannot copy shape {self.shape} into an array of "
                                     f"shape {other.shape}")
            src = self if other.device == self.device else self.copyto(other.ctx)
            other.nd._op("assign", (other, src), {}, out=other)
            return other
        self.nd._check_ctx(other)
        return self.nd._op("copyto", (self,), {"src": self.ctx.device, "dst": other.device},
                           ctx=other)

    def as_in_context(self, ctx: Context) -> NDArray:
        return self if ctx.device == self.ctx.device else self.copyto(ctx)

    def copy(self) -> NDArray:
        return self.nd._same("copy", (self,), {})

    # -- blockers ------------------------------------------------------------------------------
    def wait_to_read(self) -> None:
        self.nd._backend.sync("wait_to_read", self.var)

    def asnumpy(self) -> np.ndarray:
        return self.nd._backend.sync("asnumpy", self.var)

    def item(self) -> float:
        if self.size != 1:
            raise ValueError(f"item: needs an array of one element, got shape {self.shape}")
        return float(np.asarray(self.nd._backend.sync("item", self.var)).reshape(-1)[0])

    asscalar = item

    def __float__(self) -> float:
        return self.item()

    def __repr__(self) -> str:
        if self.nd._symbolic:  # a symbol of a hybridized block's trace has no values
            return f"<Symbol {self.nd._backend.graph.names.get(self.var, self.var)}>"
        values = self.nd._backend.sync("print", self.var)
        return f"\n{values}\n<NDArray {'x'.join(map(str, self.shape)) or 'scalar'} @{self.ctx}>"

    __str__ = __repr__


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
        return self._op("relu", (a,), {})

    def invoke(self, name: str, *inputs, out=None, **attrs) -> NDArray:
        """Issue op `name` of `asyncsim.nd.ops` on `inputs` with `attrs` (into `out` for an
        in-place op): how gradients and layers reach ops that have no method of their own."""
        if name in ops.INPLACE and out is None:
            out = inputs[0]
        return self._op(name, tuple(inputs), attrs, out=out)

    def note(self, kind: str) -> None:
        """Tell the backend the frontend ran Python that issues no op (`program.Call`): the
        recorder writes it down for the model; a real backend has nothing to do."""
        note = getattr(self._backend, "note", None)
        if note is not None:
            note(kind)

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
        """Check the call (inputs, devices, then shapes and dtypes through `ops.infer`), build
        the Op (and the Var of a fresh output), issue it; the result's handle."""
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
        shape, dtype = ops.infer(name, shapes, tuple([a.dtype for a in inputs]), attrs)
        op_id = next(self._op_ids)
        if name in ("uniform", "normal"):
            attrs["seed"] = self._seed * 1_000_003 + op_id
        geometry = ops.geometry(name, shapes, attrs) if name in ops.GEOMETRY else ""
        return self._build(op_id, name, inputs, attrs, ctx, ctx.device, shape, dtype,
                           ops.nbytes(shape, dtype), in_bytes, ops.flops(name, shapes, shape),
                           out, host, geometry)

    def _same(self, name, inputs, attrs, out=None) -> NDArray:
        """The fast path of `_op` for an op of `ops.SAME_SHAPE`, called by NDArray's own methods
        on NDArrays of this nd that share one shape, dtype and device (the caller checked): the
        result has that shape, dtype and device and costs a flop per element, so nothing is
        left to infer or to check. tests/test_frontend_fast_path.py holds it to `_op`."""
        first = inputs[0]
        nbytes = first.nbytes
        dtype = first.dtype
        flops = float(nbytes // ops.ITEMSIZE[dtype])
        if out is not None:
            return self._build(next(self._op_ids), name, inputs, attrs, first.ctx, first.device,
                               first.shape, dtype, nbytes, nbytes * len(inputs), flops, out,
                               None)
        # a fresh result, the common case: `_build` written out, one call less per op
        op_id = next(self._op_ids)
        var = next(self._var_ids)
        shape, device = first.shape, first.device
        reads = (first.var,) if len(inputs) == 1 else (first.var, inputs[1].var)
        if _TAPE.phase is not None:
            attrs = {**attrs, "phase": _TAPE.phase}
        op = Op(op_id, name, reads, var, True, device, attrs, flops, nbytes * (1 + len(inputs)))
        self._backend.issue(op, Var(var, shape, dtype, device, nbytes), None)
        result = NDArray(self, var, shape, dtype, first.ctx, device, nbytes)
        if _TAPE.recording:
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


def _whole(key) -> bool:
    return isinstance(key, slice) and key == slice(None)


def _scalar(name: str, value) -> float:
    """A scalar operand as the float64 an op's attrs hold, or an error naming the op."""
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"{name}: {value!r:.40} is not a number an op can take") from None


def _dtype(name: str, dtype) -> str:
    try:
        return np.dtype(dtype).name
    except TypeError:
        raise ops.ShapeError(f"{name}: dtype {dtype!r} is not supported "
                             f"(use one of {ops.DTYPES})") from None
