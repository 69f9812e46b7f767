"""Gluon's Block and HybridBlock, Sequential and HybridSequential.

A Block registers the blocks and Parameters assigned to its attributes, names itself as MXNet
does (`dense0`, `hybridnet1`), and computes in `forward(x)`. A HybridBlock computes in
`hybrid_forward(F, x, *args, **params)`, where `F` is the `nd` of its input and `params` its own
parameters' arrays on that input's device; a layer first infers unknown parameter shapes from
the input (`infer_shape`), which is MXNet's deferred initialisation.

`hybridize()` makes the next call trace `hybrid_forward` once into a graph (`asyncsim.nd.jit`:
the Python runs then, with symbols) and every later call issue that graph as ONE op: one push,
one issue cost, its kernels back to back on a worker. Inside `autograd.record()` the graph's
ops are issued one by one instead, so that autograd can record them (the graph is reused; the
Python of `hybrid_forward` does not run again), as are the ops of a graph that updates running
statistics (BatchNorm in training mode). A graph is traced per input shape, dtype, device and
training mode.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, defaultdict

from asyncsim.gluon.parameter import Parameter, ParameterDict
from asyncsim.nd import autograd, jit

_counters: defaultdict = defaultdict(itertools.count)


class Block:
    """A piece of a network: child blocks, own parameters, `forward`."""

    def __init__(self, prefix: str | None = None, params=None):
        object.__setattr__(self, "_children", OrderedDict())
        object.__setattr__(self, "_reg_params", OrderedDict())
        base = type(self).__name__.lower()
        object.__setattr__(self, "_name", prefix or f"{base}{next(_counters[base])}")

    def __setattr__(self, name, value):
        if isinstance(value, Block):
            self._children[name] = value
        elif isinstance(value, Parameter):
            self._reg_params[name] = value
        object.__setattr__(self, name, value)

    @property
    def name(self) -> str:
        return self._name

    @property
    def prefix(self) -> str:
        return self._name + "_"

    @property
    def params(self) -> ParameterDict:
        """This block's own parameters (not its children's), by full name."""
        return ParameterDict((p.name, p) for p in self._reg_params.values())

    def param(self, attr: str, shape, init=None, grad_req="write") -> Parameter:
        """A parameter of this block named `<block>_<attr>` (what `self.params.get` makes)."""
        return Parameter(f"{self._name}_{attr}", shape=shape, init=init, grad_req=grad_req)

    def register_child(self, block, name: str | None = None) -> None:
        self._children[name or str(len(self._children))] = block

    def collect_params(self, select: str | None = None) -> ParameterDict:
        """Every parameter of this block and its children, by full name."""
        out = ParameterDict()
        for p in self._reg_params.values():
            if select is None or _matches(select, p.name):
                out[p.name] = p
        for child in self._children.values():
            out.update(child.collect_params(select))
        return out

    def initialize(self, init=None, ctx=None, verbose=False, force_reinit=False) -> None:
        self.collect_params().initialize(init, ctx, verbose, force_reinit)

    def hybridize(self, active: bool = True) -> None:
        for child in self._children.values():
            child.hybridize(active)

    def __call__(self, *args):
        if args and hasattr(args[0], "nd") and not args[0].nd._symbolic:
            # the block call's own Python, for the model
            args[0].nd.note("block", type(self).__name__)
        return self.forward(*args)

    def forward(self, *args):
        raise NotImplementedError(f"{type(self).__name__} must define forward(x)")

    def __repr__(self) -> str:
        if not self._children:
            return f"{type(self).__name__}({self._describe()})"
        body = "\n".join(f"  ({k}): " + repr(c).replace("\n", "\n  ")
                         for k, c in self._children.items())
        return f"{type(self).__name__}(\n{body}\n)"

    def _describe(self) -> str:
        return ""


def _matches(select: str, name: str) -> bool:
    import re

    return re.fullmatch(select, name) is not None


class HybridBlock(Block):
    """A block whose computation can be traced once and replayed as one op."""

    def __init__(self, prefix: str | None = None, params=None):
        super().__init__(prefix, params)
        object.__setattr__(self, "_active", False)
        object.__setattr__(self, "_graphs", {})

    def hybridize(self, active: bool = True) -> None:
        object.__setattr__(self, "_active", bool(active))
        self._graphs.clear()
        super().hybridize(active)

    def infer_shape(self, *args) -> None:
        """Fill this block's unknown parameter shapes from its inputs (layers override)."""

    def hybrid_forward(self, F, x, *args, **params):
        raise NotImplementedError(f"{type(self).__name__} must define hybrid_forward(F, x)")

    def forward(self, x, *args):
        return self(x, *args)

    def __call__(self, x, *args):
        if x.nd._symbolic:  # a child of a block being traced: errors name it too
            tracer = x.nd._backend
            tracer.blocks.append(self._name)
            try:
                return self._call(x.nd, x, args, self._symbols(x, args))
            finally:
                tracer.blocks.pop()
        if not self._active:
            x.nd.note("block", type(self).__name__)  # the block call's own Python, for the model
            return self._call(x.nd, x, args, self._arrays(x, args))
        return self._call_graph(x, args)

    def _call(self, F, x, args, params):
        return self.hybrid_forward(F, x, *args, **params)

    def _arrays(self, x, args) -> dict:
        self.infer_shape(x, *args)
        return {k: p.on(x.nd, x.ctx) for k, p in self._reg_params.items()}

    def _symbols(self, x, args) -> dict:
        """Inside a trace: this block's parameters made for real on the traced input's `nd`, and
        the symbols standing for them."""
        tracer = x.nd._backend
        self.infer_shape(x, *args)
        return {k: tracer.symbol(p.on(tracer.real_nd, x.ctx), p.name, key=p)
                for k, p in self._reg_params.items()}

    def _call_graph(self, x, args):
        # training mode is part of the key: it changes the ops (BatchNorm's statistics)
        key = (tuple(a.shape for a in (x, *args)), x.dtype, x.ctx, id(x.nd),
               autograd.is_training())
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._graphs[key] = jit.trace(
                lambda F, *xs: self._call(F, xs[0], xs[1:], self._symbols(xs[0], xs[1:])),
                self._name,
                [x, *args])
        graph, keys = entry
        inputs = [x, *args, *[p.on(x.nd, x.ctx) for p in keys]]
        if autograd.is_recording() or graph.writes_in_place:
            return jit.replay(graph, x.nd, inputs)
        return x.nd.invoke("graph", *inputs, graph=graph)


class Sequential(Block):
    """Blocks applied one after another."""

    def add(self, *blocks) -> None:
        for b in blocks:
            self.register_child(b)

    def forward(self, x):
        for block in self._children.values():
            x = block(x)
        return x

    def __getitem__(self, key):
        children = list(self._children.values())
        if isinstance(key, slice):
            net = type(self)()
            net.add(*children[key])
            return net
        return children[key]

    def __len__(self) -> int:
        return len(self._children)


class HybridSequential(HybridBlock):
    """Hybrid blocks applied one after another; hybridized as one graph."""

    add = Sequential.add
    __getitem__ = Sequential.__getitem__
    __len__ = Sequential.__len__

    def hybrid_forward(self, F, x):
        for block in self._children.values():
            x = block(x)
        return x


__all__ = ["Block", "HybridBlock", "HybridSequential", "Sequential"]
