"""The model starts no more CPU worker processes than the program has ops: workers beyond that
would never get an op, so leaving them out changes no span, and `--set workers=1000000000`
predicts at once instead of starting a billion processes.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from asyncsim.lab import scenarios
from asyncsim.model import simulate as simulate_module
from asyncsim.model.profile import Profile
from asyncsim.model.simulate import simulate


def test_a_billion_workers_predict_promptly():
    """predict with workers=10**9 finishes (in a subprocess: before, it never did) and gives
    the trace of workers = the program's op count."""
    script = textwrap.dedent("""
        from asyncsim.lab import scenarios
        from asyncsim.model.profile import Profile
        from asyncsim.model.simulate import simulate

        program = scenarios.get("independent_products").record(quick=True)
        ops = len(program.ops)
        many = simulate(program, Profile.preset("book").replace(workers=10**9))
        enough = simulate(program, Profile.preset("book").replace(workers=ops))
        print(many.spans == enough.spans, many.duration == enough.duration)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]


@pytest.mark.parametrize("preset", ["ideal", "book"])
@pytest.mark.parametrize("name", ["independent_products", "small_ops", "memory_no_barrier"])
def test_workers_beyond_the_op_count_change_no_span(monkeypatch, preset, name):
    """With more workers than ops, the model that starts every worker and the one that starts
    only as many as there are ops give the same trace (idle workers queue up and each op takes
    the first in line, so the extra ones never run)."""
    program = scenarios.get(name).record(quick=True)
    profile = Profile.preset(preset).replace(workers=len(program.ops) + 3)
    capped = simulate(program, profile)
    monkeypatch.setattr(simulate_module, "_worker_processes", lambda program, profile:
                        profile.workers)
    every = simulate(program, profile)
    assert capped.spans == every.spans
    assert capped.memory == every.memory
