"""Compiling before timing (`realexec.cpu.warm`): after the warm-up a session's ops compile
nothing more, the second process that shares a cold compile can import this realexec and do its
part, and a part that does not exist is refused by name."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from numba.core.dispatcher import Dispatcher

import realexec
from realexec.cpu import warm

MODULES = ("realexec.cpu.loops", "realexec.cpu.kernels", "realexec.cpu.conv", "realexec.cpu.pool",
           "realexec.cpu.nn", "realexec.cpu.tensor_extra", "realexec.cpu.worker",
           "realexec.engine.table", "realexec.engine.layout", "realexec.engine.placement")


def _signatures() -> dict[str, int]:
    """Compiled signatures of every numba function of the CPU device and the op table."""
    found = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if isinstance(value, Dispatcher):
                found[f"{name}.{attr}"] = len(value.signatures)
    return found


def test_after_the_warm_up_a_sessions_ops_compile_nothing():
    """The loops the warm-up runs are the ones ops use: a first op of each kind, float32 and
    float64, adds no compiled signature (a compile inside a timed op would be a spike)."""
    warm.warm_all(("float32", "float64"))
    before = _signatures()
    with realexec.session(workers=1) as nd:
        for dtype in ("float32", "float64"):
            x = nd.array(np.arange(12, dtype=dtype).reshape(3, 4))
            row = nd.array(np.ones(4, dtype))
            img = nd.array(np.ones((2, 1, 6, 6), dtype))
            w = nd.array(np.ones((3, 1, 3, 3), dtype))
            outs = [x + x, x * 2.0, x + row, nd.relu(x), x.sum(), nd.dot(x, x.reshape((4, 3))),
                    x.copy(),
                    nd.softmax(x), nd.Convolution(data=img, weight=w, kernel=(3, 3), num_filter=3,
                                                  no_bias=True),
                    nd.Pooling(data=img, pool_type="max", kernel=(2, 2), stride=(2, 2)),
                    nd.random.normal(shape=(4,), dtype=dtype)]
            for out in outs:
                out.wait_to_read()
    after = _signatures()
    grew = {name: (before[name], n) for name, n in after.items() if n != before.get(name, 0)}
    assert not grew, f"compiled after the warm-up: {grew}"


def test_the_second_process_imports_this_realexec_and_does_its_part():
    """The process that compiles the training kernels beside a cold warm-up starts, finds this
    very package, and ends well (with a warm cache it only loads them)."""
    helper = warm._compile_elsewhere(("float32",))
    assert helper is not None
    assert helper.wait(timeout=300) == 0


def test_an_unknown_part_is_refused_by_name():
    with pytest.raises(ValueError, match="part must be one of.*'training'"):
        warm.warmup(("float32",), "convolutions")
