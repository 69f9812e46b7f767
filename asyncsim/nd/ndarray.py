"""`NDArray`, the handle a workload holds to one array, and `Context`, where an array lives.

An NDArray knows its shape, dtype and context at once; its values only on a blocker
(`wait_to_read`, `asnumpy`, `item`, `print`), which asks the backend. It builds no op itself: each
operator and method hands the call to the array's `nd` (`asyncsim.nd.frontend.ND`), which it
reaches only through attributes (`nd._same`, `nd._op`, `nd._backend`, `nd._free`), so this module
does not import the frontend. Frees follow CPython reference counting: when the last Python handle
to an array goes, `NDArray.__del__` tells the backend, in program order.

The operators are on the real engine's push path, so they are written for speed: arithmetic with
a number, or with an array of the same shape, dtype and device, and relu and copy, take
`ND._same`; everything else goes through `ND._op`. Units: `nbytes` in bytes; devices by name
("cpu", "cpu1", "gpu0"), as programs, traces and profiles name them.
"""

from __future__ import annotations

import contextlib
import operator
import signal
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from asyncsim.nd import autograd, ops

_TAPE = autograd.STATE  # recording, or in a phase: the operators' fast path leaves it to `_same`
_new = object.__new__

if TYPE_CHECKING:
    from asyncsim.nd.frontend import ND


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
        if cls is float or cls is int:
            if cls is int:  # `_scalar` written out (a call less per op): only a huge int fails
                try:
                    other = float(other)
                except OverflowError:
                    other = _scalar(name, other)  # raises, naming the op
            nd = self.nd
            issue = nd._issue_scalar
            if issue is None or in_place or _TAPE.active:
                return nd._same(scalar_name, (self,), {"scalar": other}, out)
            # `ND._same` and `NDArray.__init__` written out for a backend that takes the op
            # and its number as they are (`issue_scalar`: no records, no attrs dict): two calls
            # and two containers less per op, 0.3 us of 1.9 (2-core AMD EPYC VM)
            op_id = next(nd._op_ids)
            var = next(nd._var_ids)
            shape, dtype, device, nbytes = self._shape, self._dtype, self._device, self._nbytes
            issue(op_id, scalar_name, self.var, var, shape, dtype, device, other, nbytes)
            result = _new(NDArray)
            result.nd = nd
            result.var = var
            result._shape = shape
            result._dtype = dtype
            result._ctx = self._ctx
            result._device = device
            result._nbytes = nbytes
            result._node = result._grad = None
            return result
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


INTERRUPT_AGAIN_S = 0.01  # when a Ctrl-C caught in a finalizer is raised again


@contextlib.contextmanager
def interrupts_outside_finalizers():
    """Ctrl-C (SIGINT) as Python's own handler raises it, except in an array's finalizer: one
    landing at the first instruction of `NDArray.__del__`, before its `try`, was dropped by
    CPython as any finalizer's exception is, and a command ran on (once in a CI run of
    tests/test_interrupt.py). The handler sees the frame it interrupts: in a `__del__` it sends
    the signal again once the finalizer has returned (`_interrupt_again`). In the main thread
    only (signals are the main thread's); the previous handler is put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if frame is not None and frame.f_code.co_name == "__del__":
            _interrupt_again()
            return
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt_again() -> None:
    """Raise KeyboardInterrupt in the main thread again, once the finalizer that caught it has
    returned. CPython drops what a finalizer raises, so a Ctrl-C landing in an array's free was
    lost and the run went on (to fail later in an error that was not the Ctrl-C); raised again
    from inside the finalizer, it would be caught there at the finalizer's next call."""
    main = threading.main_thread().ident
    # a real SIGINT, not `_thread.interrupt_main`: that one would wait out a sleep; a daemon
    # timer, so that a process ending meanwhile does not wait for it
    timer = threading.Timer(INTERRUPT_AGAIN_S, signal.pthread_kill, (main, signal.SIGINT))
    timer.daemon = True
    try:
        timer.start()
    except RuntimeError:  # the interpreter is shutting down: nothing is left to interrupt
        pass


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
        # (an operator with a number writes these stores out: `_arithmetic`)
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
        except KeyboardInterrupt:
            _interrupt_again()
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
