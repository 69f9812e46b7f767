"""`realexec.calibration.steady.Gate`: steps of calibration and runs of benchmarks/accuracy.py are
taken in the machine's usual state, never in a slow spell it can see, and the spells met are
counted. The probe is replaced by a list of speeds (seconds of `speed_probe`), so nothing here
is timed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from realexec.calibration import steady
from realexec.calibration.steady import HELD, SLOW, Gate, Gates

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
    """Read back from the log: the usual state is the lowest median of HELD looks in a row; a
    take follows a look within SLOW of it, or `patience` slow looks, after which the fastest
    state held in them is the usual one; a take followed by a slow look is taken again, up to
    `retries` times; the last take is what `run` returns; the slow looks after a take and
    before one, and the waits out of patience, are counted."""
    script = Script(speeds)
    gate = Gate(reference, probe=script.probe, patience=patience)
    result = gate.run(script.step, "x", retries=retries)

    fastest, recent = reference, []
    looks_before, held_before, takes, slow_after, waited, moved = [], [], 0, 0, 0, 0
    for k, (kind, value) in enumerate(script.log):
        if kind == "take":
            takes += 1
            # the look right before: usual, or the gate ran out of patience on slow ones
            assert looks_before[-1] or len(looks_before) == patience
            waited += looks_before.count(False)
            looks_before, held_before = [], []
            assert script.log[k + 1][0] == "look"
            continue
        recent = (recent + [value])[-HELD:]
        held = sorted(recent)[len(recent) // 2]
        fastest = held if fastest is None else min(fastest, held)
        ok = value / fastest <= SLOW
        if k and script.log[k - 1][0] == "take":
            slow_after += not ok
            if ok or takes == retries + 1:
                assert k == len(script.log) - 1  # the gate stopped here
        else:
            looks_before.append(ok)
            held_before.append(held)
            if len(looks_before) == patience and not any(looks_before):
                moved += 1
                fastest = min(held_before)
    assert 1 <= takes <= retries + 1
    assert result == takes
    assert (gate.slow, gate.waited, gate.moved) == (slow_after, waited, moved)
    assert gate.fastest == fastest


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


def test_a_machine_that_stays_slow_is_measured_as_it_is_and_its_state_becomes_usual():
    """Out of patience, the gate lets the step run and takes the state the machine stayed in as
    the usual one: the step is not taken again for it, and the next step does not wait."""
    script = Script([SPELL] * 20)
    gate = Gate(USUAL, probe=script.probe, patience=3)
    assert gate.run(script.step, "x", retries=1) == 1
    assert gate.summary() == {"fastest": SPELL, "slow": 0, "waited": 3, "moved": 1, "behind": 0}
    gate.run(script.step, "y")
    assert (gate.waited, gate.moved) == (3, 1)


def test_the_usual_state_is_one_held_over_most_looks_not_a_blip():
    """A gate that starts in a spell learns the usual speed once the machine shows it in most
    of its last looks; a fast look alone does not lower it, so it is not waited for."""
    gate = Gate(probe=Script([SPELL, USUAL, SPELL, USUAL, USUAL, SPELL]).probe)
    assert gate.look() == 1.0  # the only speed seen so far
    assert gate.look() == USUAL / SPELL and gate.fastest == SPELL  # a blip
    assert gate.look() == 1.0
    assert gate.look() == USUAL / SPELL and gate.fastest == SPELL
    assert gate.look() == 1.0 and gate.fastest == USUAL  # three of five: the usual state
    assert gate.look() == SPELL / USUAL > SLOW


def test_a_blip_in_a_slow_phase_does_not_make_every_step_wait():
    """The machine of the gate's docstring: slow, with fast looks alone or in pairs. Each step
    starts at once, where a gate lowered by each blip ran every step out of patience."""
    speeds = ([SPELL] * 4 + [USUAL] + [SPELL] * 3 + [USUAL] * 2) * 10
    script = Script(speeds)
    gate = Gate(probe=script.probe, patience=3)
    for k in range(10):
        gate.run(script.step, k)
    assert (gate.waited, gate.moved, gate.fastest) == (0, 0, SPELL)


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


def test_the_issue_probe_times_an_issue_with_the_workers_held_and_leaves_nothing_behind():
    """`microbench.issue_probe` prices one `x + 1.0` as the frontend issues it (microseconds,
    a longer loop no dearer per op) and leaves the engine idle, its pool as it was."""
    import realexec
    from realexec.calibration import microbench

    with realexec.session(workers=2) as nd:
        bench = microbench._Bench(nd, 2)
        short, long = microbench.issue_probe(bench, 50), microbench.issue_probe(bench, 400)
        short(), long()  # the pool's buffers for both sizes of loop
        nd.waitall()
        live = nd._backend.pools["cpu"].live_bytes
        seconds = [short(), long()]
        assert all(1e-7 < s < 1e-3 for s in seconds)
        assert seconds[1] < 3 * seconds[0]  # per op, not per loop
        nd.waitall()
        assert nd._backend.pools["cpu"].live_bytes == live


def test_steps_taken_before_the_usual_state_showed_are_counted_behind():
    """A gate that starts in a slow phase passes its first steps against the slow speed it has
    seen; once the machine shows its usual speed, those steps are `behind` (calibration takes
    itself again then), and the steps after them are not."""
    script = Script([SPELL, SPELL, SPELL, SPELL, USUAL, USUAL, USUAL, USUAL])
    gate = Gate(probe=script.probe)
    gate.run(script.step, "early")  # looks SPELL, SPELL: the only speed seen
    assert gate.behind() == 0
    gate.run(script.step, "still slow")  # SPELL, SPELL
    gate.run(script.step, "usual")  # USUAL, USUAL: not yet most of the last looks
    assert gate.behind() == 0
    gate.run(script.step, "held")  # USUAL: the fastest now; the two first are behind it
    assert gate.behind() == 2
    assert gate.summary()["behind"] == 2


@settings(max_examples=200, deadline=None)
@given(speeds=_speeds, steps=st.integers(1, 5))
def test_with_a_known_reference_only_steps_out_of_patience_are_behind(speeds, steps):
    """Given the usual state, `behind` counts the takes whose look before was over SLOW of the
    usual state the gate ended with (out of patience before it moved, or before it fell)."""
    script = Script(speeds)
    gate = Gate(USUAL * 0.95, probe=script.probe, patience=3)
    for k in range(steps):
        gate.run(script.step, k)
    starts = []
    for k, (kind, _) in enumerate(script.log):
        if kind == "take":
            starts.append(script.log[k - 1][1])
    assert gate.behind() == sum(v / gate.fastest > SLOW for v in starts)


def _gates(speeds, products, reference=USUAL):
    """Gates on two scripted probes; one log, each look tagged by its probe."""
    log = []

    def probe(tag, values):
        def look() -> float:
            value = values.pop(0) if values else USUAL
            log.append((tag, value))
            return value
        return look

    gates = Gates(Gate(reference, probe=probe("speed", list(speeds))),
                  Gate(reference, probe=probe("product", list(products))))
    return gates, log


def test_a_step_gated_on_products_waits_for_both_probes():
    """The speed probe reads usual throughout; the products' probe in a spell holds the step
    back until it ends (the state the speed probe does not see)."""
    gates, log = _gates([], [SPELL, SPELL, USUAL])
    gates.run(lambda: log.append(("take", None)))
    takes = [k for k, e in enumerate(log) if e[0] == "take"]
    assert len(takes) == 1
    before = [e for e in log[:takes[0]] if e[0] == "product"]
    assert [v for _, v in before] == [SPELL, SPELL, USUAL]
    assert (gates.gates[0].waited, gates.gates[1].waited) == (0, 2)


@pytest.mark.parametrize("spell_in", ["speed", "product"])
def test_a_spell_either_probe_finds_after_a_step_takes_it_again(spell_in):
    """Each probe looks after the take (both count), and either one's spell retakes it."""
    after = [USUAL, SPELL]  # the look before the take, then the one after
    gates, log = _gates(after if spell_in == "speed" else [],
                        after if spell_in == "product" else [])
    taken = []
    assert gates.run(lambda: taken.append(1) or len(taken)) == 2
    assert [g.slow for g in gates.gates] == ([1, 0] if spell_in == "speed" else [0, 1])
    assert sum(e[0] == "product" for e in log) == sum(e[0] == "speed" for e in log) == 4


@settings(max_examples=100, deadline=None)
@given(speeds=_speeds, products=_speeds)
def test_gates_are_behind_when_either_gate_is(speeds, products):
    gates, _ = _gates(speeds, products, reference=None)
    for _ in range(3):
        gates.run(lambda: None, retries=1)
    assert gates.behind() == max(g.behind() for g in gates.gates)
    assert gates.look() == max(g._last / g.fastest for g in gates.gates)


def test_gates_of_a_profile_start_from_its_probes():
    class Calibrated:
        meta = {"measurements": {"speed_probe": [0.012, 0.011], "product_probe": [0.004, 0.003]}}

    class Preset:
        meta: dict = {}

    speed, products = Gates.of(Calibrated).gates
    assert (speed.fastest, products.fastest) == (0.011, 0.003)
    assert products.probe is steady.product_probe
    assert [g.fastest for g in Gates.of(Preset).gates] == [None, None]
