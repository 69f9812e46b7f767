"""`realexec.calibration.steady.Gate`: steps of calibration and runs of benchmarks/accuracy.py are
taken in the machine's usual state, never in a slow spell it can see, and the spells met are
counted. The probe is replaced by a list of speeds (seconds of `speed_probe`), so nothing here
is timed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from realexec.calibration import steady
from realexec.calibration.steady import SLOW, Gate

USUAL, SPELL = 1.0, 1.5  # a probe's seconds in the usual state and in a slow spell


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch):
    monkeypatch.setattr(steady, "LOOK_PAUSE", 0.0)  # `busy(0)` returns at once


class Script:
    """A probe that answers from `speeds` (then USUAL), and a step; both write to one log."""

    def __init__(self, speeds):
        self.speeds, self.log = list(speeds), []

    def probe(self) -> float:
        value = self.speeds.pop(0) if self.speeds else USUAL
        self.log.append(("look", value))
        return value

    def step(self, tag):
        self.log.append(("take", tag))
        return len([e for e in self.log if e[0] == "take"])


_speeds = st.lists(st.sampled_from([USUAL, 1.05, 0.95, SPELL, 1.6]), max_size=40)


@settings(max_examples=300, deadline=None)
@given(speeds=_speeds, retries=st.integers(0, 3), patience=st.integers(1, 6),
       reference=st.sampled_from([None, USUAL]))
def test_a_step_is_taken_in_the_usual_state_and_again_after_a_spell(speeds, retries, patience,
                                                                     reference):
    """Read back from the log: a take follows a look within SLOW of the fastest look so far
    (or `patience` looks, the gate's limit, all slow); a take followed by a slow look is taken
    again, up to `retries` times; the last take is what `run` returns; the slow looks after a
    take and before one are counted."""
    script = Script(speeds)
    gate = Gate(reference, probe=script.probe, patience=patience)
    result = gate.run(script.step, "x", retries=retries)

    fastest = reference
    looks_before, takes, slow_after, waited = [], 0, 0, 0
    for k, (kind, value) in enumerate(script.log):
        if kind == "take":
            takes += 1
            usual = [v for v in looks_before if v]
            # the look right before: usual, or the gate ran out of patience on slow ones
            assert looks_before[-1] or len(looks_before) == patience
            waited += len(looks_before) - len(usual)
            looks_before = []
            after = script.log[k + 1]
            assert after[0] == "look"
            continue
        fastest = value if fastest is None else min(fastest, value)
        ok = value / fastest <= SLOW
        if k and script.log[k - 1][0] == "take":
            slow_after += not ok
            if ok or takes == retries + 1:
                assert k == len(script.log) - 1  # the gate stopped here
        else:
            looks_before.append(ok)
    assert 1 <= takes <= retries + 1
    assert result == takes
    assert gate.slow == slow_after
    assert gate.waited == waited


def test_a_spell_seen_before_a_step_is_waited_out():
    script = Script([SPELL, SPELL, USUAL, USUAL])
    gate = Gate(USUAL, probe=script.probe)
    gate.run(script.step, "x")
    assert [e[0] for e in script.log] == ["look", "look", "look", "take", "look"]
    assert (gate.waited, gate.slow) == (2, 0)


def test_a_spell_that_began_during_a_step_takes_it_again():
    script = Script([USUAL, SPELL, USUAL, USUAL])
    gate = Gate(USUAL, probe=script.probe)
    assert gate.run(script.step, "x") == 2
    assert (gate.waited, gate.slow) == (0, 1)


def test_a_machine_that_stays_slow_is_measured_as_it_is():
    """Out of patience, the gate lets the step run; out of retries, it keeps the last take."""
    script = Script([SPELL] * 20)
    gate = Gate(USUAL, probe=script.probe, patience=3)
    assert gate.run(script.step, "x", retries=1) == 2
    assert gate.summary() == {"fastest": USUAL, "slow": 2, "waited": 6, "behind": 2}


def test_without_a_reference_the_fastest_look_is_the_usual_state():
    """A gate that starts in a spell learns the usual speed once the machine shows it: the
    spell's looks are then slow against it."""
    gate = Gate(probe=Script([SPELL, USUAL, SPELL]).probe)
    assert gate.look() == 1.0  # the only speed seen so far
    assert gate.look() == 1.0 and gate.fastest == USUAL
    assert gate.look() == SPELL / USUAL > SLOW


def test_the_product_probe_grows_with_the_product_and_leaves_the_blas_limit_as_it_was():
    """`product_probe` times its product on one BLAS thread and gives the process its BLAS
    threads back; a larger product takes longer."""
    import threadpoolctl

    before = [p["num_threads"] for p in threadpoolctl.threadpool_info()
              if p["user_api"] == "blas"]
    small, large = steady.product_probe(3, 64), steady.product_probe(3, 256)
    assert 0.0 < small < large
    after = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    assert after == before


def test_steps_taken_before_the_usual_state_showed_are_counted_behind():
    """A gate that starts in a slow phase passes its first steps against the slow speed it has
    seen; once the machine shows its usual speed, those steps are `behind` (calibration takes
    itself again then), and the steps after them are not."""
    script = Script([SPELL, SPELL, SPELL, SPELL, USUAL, USUAL, USUAL, USUAL])
    gate = Gate(probe=script.probe)
    gate.run(script.step, "early")  # looks SPELL, SPELL: the only speed seen
    assert gate.behind() == 0
    gate.run(script.step, "still slow")  # SPELL, SPELL
    gate.run(script.step, "usual")  # USUAL: the fastest now; the two before are behind it
    assert gate.behind() == 2
    assert gate.summary()["behind"] == 2


@settings(max_examples=200, deadline=None)
@given(speeds=_speeds, steps=st.integers(1, 5))
def test_with_a_known_reference_only_steps_out_of_patience_are_behind(speeds, steps):
    """Given the usual state, a take starts after a look within SLOW of it unless the gate ran
    out of patience: `behind` counts exactly those."""
    script = Script(speeds)
    gate = Gate(USUAL * 0.95, probe=script.probe, patience=3)
    for k in range(steps):
        gate.run(script.step, k)
    starts = []
    for k, (kind, _) in enumerate(script.log):
        if kind == "take":
            starts.append(script.log[k - 1][1])
    fastest = min([USUAL * 0.95] + [v for kind, v in script.log if kind == "look"])
    assert gate.behind() == sum(v / fastest > SLOW for v in starts)
