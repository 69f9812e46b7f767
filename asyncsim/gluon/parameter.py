"""Gluon's Parameter and ParameterDict, with deferred initialisation.

A Parameter knows its name, its shape (0 for a dimension still unknown), its initializer and
whether it takes a gradient. `initialize()` only *requests* initialisation, as in MXNet when a
shape is not yet known; the arrays are made the first time a block runs on an input, on that
input's `nd` (the recorder, the real engine, a session), with the initializer's ops, on every
context asked for (the first one initialised, the others copies of it, so data-parallel replicas
start equal). A block is not tied to one backend: the same network can be recorded and run, and
each `nd` gets its own arrays. `data(ctx)` and `grad(ctx)` give the arrays of the `nd` the
parameter was last used on.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

from asyncsim.gluon import init as initializers


class DeferredInitializationError(RuntimeError):
    """A parameter's arrays were asked for before its shape could be known."""


class Parameter:
    """One learnable (or running-statistic) array of a block, per context."""

    def __init__(self, name: str, shape=None, init=None, dtype="float32", grad_req="write"):
        self.name = name
        self.shape = tuple(shape or ())
        self.init = initializers.create(init) if init is not None else None
        self.dtype = dtype
        if grad_req not in ("write", "null"):
            raise ValueError(f"{name}: grad_req must be 'write' or 'null', got {grad_req!r}")
        self.grad_req = grad_req
        self._requested = None  # (initializer, contexts or None) once initialize() was called
        self._arrays: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # nd -> {ctx: arr}
        self._last_nd = None

    def __repr__(self) -> str:
        return f"Parameter {self.name} (shape={self.shape}, dtype={self.dtype})"

    @property
    def known(self) -> bool:
        return bool(self.shape) and all(n > 0 for n in self.shape)

    def initialize(self, init=None, ctx=None, default_init=None, force_reinit=False) -> None:
        """Ask for initialisation with `self.init`, else `init`, else `default_init` (Uniform),
        on `ctx` (a context or a list; default: where the first input is)."""
        if self._requested is not None and not force_reinit:
            return  # MXNet warns and keeps the values
        chosen = self.init or initializers.create(init or default_init or initializers.Uniform())
        contexts = None if ctx is None else list(ctx) if isinstance(ctx, list | tuple) else [ctx]
        self._requested = (chosen, contexts)
        self._arrays = weakref.WeakKeyDictionary()

    def infer_shape(self, shape, block_name: str = "") -> None:
        """Fill the unknown (0) dimensions from an input; a known one that differs is an error."""
        shape = tuple(shape)
        if self.shape and len(self.shape) != len(shape):
            raise ValueError(f"{block_name or self.name}: parameter {self.name} has shape "
                             f"{self.shape}, the input implies {shape}")
        for have, want in zip(self.shape or shape, shape, strict=True):
            if have and have != want:
                from asyncsim.nd.ops import ShapeError

                raise ShapeError(f"{block_name or self.name}: the input implies {self.name} of "
                                 f"shape {shape}, but it is {self.shape}")
        self.shape = shape

    def on(self, nd, ctx):
        """This parameter's array for `nd` and `ctx`, made (deferred initialisation) if needed."""
        arrays = self._arrays.get(nd)
        if arrays is None or ctx not in arrays:
            arrays = self._make(nd, ctx)
        self._last_nd = weakref.ref(nd)
        try:
            return arrays[ctx]
        except KeyError:
            where = ", ".join(str(c) for c in arrays)
            raise ValueError(f"{self.name} lives on {where}, not on {ctx}: initialize(ctx=[...]) "
                             f"with every context the data comes from") from None

    def _make(self, nd, ctx) -> dict:
        if self._requested is None:
            raise RuntimeError(f"parameter {self.name} has not been initialized: call "
                               f"net.initialize() (or collect_params().initialize()) first")
        if not self.known:
            raise DeferredInitializationError(
                f"parameter {self.name} has unknown shape {self.shape}: run the block on an input "
                f"first, its shape is inferred from it")
        chosen, contexts = self._requested
        nd.note("init")  # the Python of making a parameter, beyond its ops, for the model
        contexts = contexts or [ctx]
        first = chosen(nd, self.name, self.shape, contexts[0], self.dtype)
        arrays = {contexts[0]: first}
        for c in contexts[1:]:
            arrays[c] = first.copyto(c)
        if self.grad_req != "null":
            for a in arrays.values():
                a.attach_grad()
        self._arrays[nd] = arrays
        return arrays

    def _current(self) -> dict:
        nd = self._last_nd() if self._last_nd is not None else None
        if nd is None or nd not in self._arrays:
            raise DeferredInitializationError(
                f"parameter {self.name} has no data yet: it is made when the block first runs "
                f"on an input")
        return self._arrays[nd]

    def data(self, ctx=None):
        """The array on `ctx`; without one, the only context's, or cpu(0)'s as MXNet's
        default context (a RuntimeError if the parameter lives elsewhere, as 8.5 shows)."""
        arrays = self._current()
        if ctx is None:
            if len(arrays) == 1:
                return next(iter(arrays.values()))
            ctx = next((c for c in arrays if str(c) == "cpu(0)"), "cpu(0)")
        try:
            return arrays[ctx]
        except KeyError:
            where = ", ".join(str(c) for c in arrays)
            raise RuntimeError(f"Parameter '{self.name}' was not initialized on context {ctx}. "
                               f"It was only initialized on [{where}].") from None

    def grad(self, ctx=None):
        if self.grad_req == "null":
            raise RuntimeError(f"parameter {self.name} takes no gradient (grad_req='null')")
        return self.data(ctx).grad

    def list_ctx(self) -> list:
        return list(self._current())

    def list_data(self) -> list:
        return list(self._current().values())

    def list_grad(self) -> list:
        return [a.grad for a in self._current().values()]

    def set_data(self, data) -> None:
        """Copy `data` (an NDArray) into this parameter's array on every context."""
        for arr in self._current().values():
            arr.nd.invoke("assign", arr, data.as_in_context(arr.context))


class ParameterDict(OrderedDict):
    """Parameters by full name, as `Block.collect_params()` gives them; `get(name)` also finds a
    block's own parameter by its short name (`net[0].params.get('weight')`)."""

    def get(self, name, default=None):
        if name in self:
            return self[name]
        for full, p in self.items():
            if full.endswith("_" + name):
                return p
        return default

    def initialize(self, init=None, ctx=None, verbose=False, force_reinit=False) -> None:
        for p in self.values():
            p.initialize(init=None, ctx=ctx, default_init=init, force_reinit=force_reinit)

    def zero_grad(self) -> None:
        for p in self.values():
            if p.grad_req != "null":
                for g in p.list_grad():
                    g.nd.invoke("setitem_scalar", g, start=0, stop=g.shape[0] if g.shape else 0,
                                squeeze=False, scalar=0.0)

    def __repr__(self) -> str:
        body = "\n".join(f"  {p!r}" for p in self.values())
        return f"ParameterDict(\n{body}\n)"


__all__ = ["DeferredInitializationError", "Parameter", "ParameterDict"]
