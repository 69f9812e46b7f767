"""Autograd: a tape written at issue time, a backward pass issued as ordinary ops.

Inside `with autograd.record():` every op whose inputs need a gradient (arrays that called
`attach_grad()`, or results of such ops) leaves a node on its result: the op's name, its input
arrays and attrs. Holding the inputs is what keeps the activations of a forward pass alive until
backward, as a framework must, so a trace's memory curve shows them. `y.backward()` walks the
nodes from `y` in reverse issue order and issues each op's gradient (`OpDef.grad`, defined beside
the op in `asyncsim.nd.ops`) through the same `nd`: the recorder sees ordinary ops, the engine
runs them asynchronously, and `backward()` returns as soon as they are issued (MXNet's
behaviour). The sum of a leaf's gradients is written into its `.grad` buffer in place (an
`assign` op), so a Trainer holding that buffer sees the new values in dependency order. The
nodes are dropped after backward (MXNet's retain_graph=False), which frees what they held.

The recording flag is process-wide, not per thread (one frontend thread issues ops, as in the
chapters). `is_training()` is true inside `record()` (train_mode=True) and tells layers such as
BatchNorm which statistics to use.
"""

from __future__ import annotations

import contextlib

from asyncsim.nd.ops import OPS


class AutogradError(RuntimeError):
    """A backward pass that cannot run: nothing recorded, or an op without a gradient."""


class _State:
    __slots__ = ("recording", "training", "phase", "active")

    def __init__(self):
        self.recording = False
        self.training = False
        # "backward" while backward() issues gradient ops ("kvstore" while a Trainer sums and
        # updates): the frontend marks those ops (attrs["phase"]) so that a profile can price
        # their issue apart, as MXNet pushes them from C++, not from Python (`phase()`)
        self.phase = None
        # recording or in a phase: the frontend's fast path reads this one flag per op
        self.active = False

    def settle(self) -> None:
        self.active = self.recording or self.phase is not None


STATE = _State()


@contextlib.contextmanager
def _scope(recording: bool, training: bool):
    before = STATE.recording, STATE.training
    STATE.recording, STATE.training = recording, training
    STATE.settle()
    try:
        yield
    finally:
        STATE.recording, STATE.training = before
        STATE.settle()


def record(train_mode: bool = True):
    """Record the ops issued inside the block for a later `backward()`."""
    return _scope(True, train_mode)


def pause(train_mode: bool = False):
    """Issue ops inside the block without recording them (e.g. an evaluation inside training)."""
    return _scope(False, train_mode)


def train_mode():
    return _scope(STATE.recording, True)


def predict_mode():
    return _scope(STATE.recording, False)


@contextlib.contextmanager
def phase(name: str):
    """Mark the ops issued inside the block as issued by `name` ("backward", "kvstore")."""
    before, STATE.phase = STATE.phase, name
    STATE.settle()
    try:
        yield
    finally:
        STATE.phase = before
        STATE.settle()


def is_recording() -> bool:
    return STATE.recording


def is_training() -> bool:
    return STATE.training


def needs_grad(a) -> bool:
    """Whether `a` is a leaf with a gradient buffer or the recorded result of one."""
    return a._node is not None or a._grad is not None


def note(result, name: str, inputs: tuple, attrs: dict) -> None:
    """Called by the frontend for every op issued while recording: leave a node on `result`
    when an input needs a gradient. An in-place write into such an array would change what the
    tape saved, so it is refused, naming the op."""
    for a in inputs:
        if a._node is not None or a._grad is not None:
            break
    else:
        return
    if any(a is result for a in inputs):  # `in` would compare values
        raise AutogradError(f"{name}: in-place operations on arrays that autograd records are not "
                            f"supported; write `a = a + b` instead of `a += b` or `a[:] = ...`")
    result._node = (name, inputs, attrs)


def _topological(head) -> list:
    """The recorded arrays that `head` depends on, each after its inputs (iterative DFS).

    An array is marked when it is expanded, not when it is pushed: marked at the push, an
    array that two others read (a = f(x); b = g(a); h = a + b) could be finished before the
    other reader and then get its gradient before that reader's part has been added."""
    order, expanded_ids, stack = [], set(), [(head, False)]
    while stack:
        arr, expanded = stack.pop()
        if expanded:
            order.append(arr)
            continue
        if id(arr) in expanded_ids:
            continue
        expanded_ids.add(id(arr))
        stack.append((arr, True))
        for x in arr._node[1]:
            if x._node is not None and id(x) not in expanded_ids:
                stack.append((x, False))
    return order


def backward(head, head_grad=None, retain_graph: bool = False) -> None:
    """Issue the gradient ops of everything recorded between the leaves and `head`, and write
    each leaf's gradient into its `.grad` (of a non-scalar head: the gradient of its sum)."""
    F = head.nd
    if head._node is None:
        raise AutogradError(
            "backward: this array was not recorded; compute it inside `with autograd.record():` "
            "from arrays that called attach_grad() (or a Block's parameters)")
    if head_grad is not None and head_grad.shape != head.shape:
        raise AutogradError(f"backward: head_grad has shape {head_grad.shape}, the array "
                            f"{head.shape}")
    order = _topological(head)
    with phase("backward"):
        _issue_gradients(F, head, head_grad, order)
    if not retain_graph:
        for arr in order:
            arr._node = None


def _issue_gradients(F, head, head_grad, order) -> None:
    leaves: dict[int, object] = {}
    with _scope(False, STATE.training):
        grads = {id(head): head_grad if head_grad is not None
                 else F.ones(head.shape, ctx=head.context, dtype=head.dtype)}
        for arr in reversed(order):
            g = grads.pop(id(arr), None)
            if g is None:
                continue
            name, inputs, attrs = arr._node
            rule = OPS[name].grad
            if rule is None:
                raise AutogradError(f"backward: op {name!r} has no gradient")
            for x, gx in zip(inputs, rule(F, inputs, arr, g, attrs), strict=True):
                if gx is None or not needs_grad(x):
                    continue
                if x._node is None:
                    leaves[id(x)] = x
                prev = grads.get(id(x))
                grads[id(x)] = gx if prev is None else prev + gx
        for key, leaf in leaves.items():
            g = grads[key]
            if g.dtype != leaf.dtype:
                g = F.invoke("cast", g, dtype=leaf.dtype)
            F.invoke("assign", leaf._grad, g, out=leaf._grad)


__all__ = ["AutogradError", "backward", "is_recording", "is_training", "pause", "predict_mode",
           "record", "train_mode"]
