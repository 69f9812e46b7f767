"""Every CPU scenario of the chapters runs on an engine with light results
(`realexec.session(engine="native-light")`) at its quick sizes: the same ops as on the shipped
engine (one exec span each, by name), and the values a scenario returns equal to the shipped
engine's."""

from __future__ import annotations

import contextlib
import io
from collections import Counter

import numpy as np
import pytest

import realexec
from asyncsim.lab import scenarios


def _run(name: str, engine: str):
    scenario = scenarios.get(name)
    out = {}

    def workload(nd, **params):
        out["value"] = scenario.workload(nd, **params)
        out["world"] = nd._backend._world

    workload.__name__ = scenario.workload.__name__
    with contextlib.redirect_stdout(io.StringIO()):
        trace = realexec.run(workload, engine=engine, workers=2, seed=0,
                             **scenario.kwargs(quick=True))
    return trace, out


@pytest.mark.parametrize("name", scenarios.names("cpu"))
def test_a_scenario_runs_alike_with_light_results(name):
    shipped, plain = _run(name, "native")
    trace, light = _run(name, "native-light")
    ops = Counter(s.name for s in trace.spans if s.kind == "exec")
    assert ops == Counter(s.name for s in shipped.spans if s.kind == "exec")
    assert light["world"] is not None and plain["world"] is None
    if isinstance(plain["value"], tuple):
        for got, want in zip(light["value"], plain["value"], strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5)
