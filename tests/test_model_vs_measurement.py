"""The model against the real engine on three of the chapters' experiments, at small sizes: the
sync-vs-async loop, the memory experiment (with and without a blocker per batch, and with
max_inflight), and run()'s independent products against a chain of the same products.

The profile comes from `realexec.calibrate(quick=True)` -- microbenchmarks only, none of these
workloads. Each take of a measurement is a warm-up run and then the median of three runs with
Python's garbage collector paused, timed from the workload's first event, in the state the
calibration saw (`realexec.calibration.steady.Gate`), as benchmarks/accuracy.py does. A
calibration or take during which other processes kept 0.2 cores busy is taken again, and so is a
take outside the tolerance (up to three takes; a failure prints them all): on a shared machine a
neighbour is the largest error there is, and not every neighbour shows. On this project's 2-core
VM, while other machines took 10-35% of its cores' time, the 512x512 loop measured 2.5-2.8x its
prediction in takes whose speed probe (DRAM-bound) was at calibration's speed, and 1.0-1.2x in
others minutes apart: its 1 MB arrays live in the cache those machines share. And while they
took 20-55% (steal, `BackgroundLoad.stolen`), takes of one workload a second apart measured
1.3-4x each other: when every take misses under such steal, the test is skipped and says so (a
take's time scaled by the share of the cores it kept was no closer: the quick calibration, under
the same steal, had priced the ops at their undisturbed cost).

Tolerances, and why: totals within a factor of two of the measurement, peak memory within 50%.
These workloads take a few milliseconds on two noisy cores shared with other jobs; at that scale
thread wake-ups (15-50 us here) and the GIL's hand-overs -- modelled, but as fixed latencies
where the real ones scatter -- are a good part of the time and move a run by tens of percent
from one run to the next, and the quick calibration sees only small sizes. A factor of two still
catches a model that lost a term or a unit (benchmarks/accuracy.py holds the full calibration to
10% median and 25% maximum at the book's sizes). The orderings the chapters teach must hold
exactly, on both sides: the loop without a blocker per op is not slower than the one with; the
memory peak without a blocker is above the one with a blocker per batch, and max_inflight=k
lands between the two; the model predicts independent products not slower than a chain of them,
and the engine runs them at the same time (whether that is faster is the host's business).
"""

from __future__ import annotations

import contextlib
import gc
import io
import itertools
from typing import NamedTuple

import pytest

import asyncsim
import realexec
from asyncsim.lab import scenarios
from realexec.calibration.steady import BackgroundLoad, Gate

TOTAL = 2.0  # a factor
PEAK = 0.5  # relative
NOISE = 1.1  # a measured ordering may be off by this factor when the two sides are equal
LOAD = 0.2  # cores other processes may keep busy during a calibration or a measurement
PATIENCE = 10  # looks (about 0.3 s each) a take waits for the calibration's state
TAKES = 3  # takes of a measurement at most
STOLEN = 0.15  # the share of the cores' time other machines took in a last miss that skips


@pytest.fixture(scope="module")
def profile(quick_profile):
    """The run's quick calibration (tests/conftest.py: taken again, up to three times, if other
    processes kept LOAD cores busy)."""
    return quick_profile


@pytest.fixture(scope="module")
def gate(profile):
    """Measures in the state the calibration saw, learning it across the module's tests."""
    return Gate.of(profile, patience=PATIENCE)


class Take(NamedTuple):
    """One take of a measurement: the trace, and the share of the cores' time other machines
    took meanwhile (`BackgroundLoad.stolen`)."""
    trace: asyncsim.Trace
    stolen: float


def _measure(gate, workload, workers, close=None, **params) -> list[Take]:
    """Takes of a warm-up run and then three, each take's run with the median total, from its
    first event; taken in the state the calibration saw (`gate`, as
    benchmarks/accuracy.py does: again if a slow spell began during it). Another take follows,
    up to `TAKES`, while other processes kept the cores busy or the take is not `close` (a
    test's tolerance) to the prediction; the last take is the measurement, and every take is
    in the failure's message. When every take missed and other machines took over `STOLEN` of
    the cores during the last, the test is skipped, saying so."""
    takes = []
    for _ in range(TAKES):
        load = BackgroundLoad()
        traces = gate.run(_runs, workload, workers, **params)
        trace = sorted(traces, key=lambda t: t.duration)[1].from_first_event()
        takes.append(Take(trace, load.stolen()))
        if load.cores() < LOAD and (close is None or close(takes[-1])):
            return takes
    if takes[-1].stolen > STOLEN:
        pytest.skip(f"other machines took {', '.join(f'{t.stolen:.0%}' for t in takes)} of "
                    f"this machine's cores during the takes: the comparison needs the cores "
                    f"the calibration had")
    return takes


def _seen(takes) -> list:
    """What a failure says of the takes: each one's regions in ms, and the share stolen."""
    return [({k: round(v * 1e3, 2) for k, v in t.trace.regions.items()}, round(t.stolen, 2))
            for t in takes]


def _best_regions(workload, workers, **params) -> dict[str, float]:
    """Each region's fastest of three runs (after a warm-up): two regions of ~4 ms that cost
    the same ordered themselves by up to 1.13x in one median run under CI's load."""
    traces = _runs(workload, workers, **params)
    return {label: min(t.regions[label] for t in traces) for label in traces[0].regions}


def _runs(workload, workers, **params):
    traces = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            realexec.run(workload, workers=workers, **params)
            for _ in range(3):
                gc.collect()
                traces.append(realexec.run(workload, workers=workers, **params))
    finally:
        if enabled:
            gc.enable()
    return traces


def _predict(workload, profile, max_inflight=None, **params):
    with contextlib.redirect_stdout(io.StringIO()):
        return asyncsim.predict(workload, profile, max_inflight=max_inflight, **params)


def _close(predicted: float, measured: float, tolerance: float) -> bool:
    return abs(predicted - measured) <= tolerance * measured


def _within(predicted: float, measured: float, factor: float) -> bool:
    return measured / factor <= predicted <= measured * factor


def test_sync_vs_async_loop(profile, gate):
    """The 2000x2000 loop of 8.2.3 at 512x512: the total within a factor of two. And on 12.2's
    tiny (1, 2) x, on both sides the loop with one waitall is not slower than the one with a
    wait_to_read per op. (At 512x512 the orders are not asserted: on this 2-core VM the async
    loop measured up to 1.3x the sync one even with one worker, its outputs each a fresh 1 MB
    buffer where the sync loop reuses one that is still in the cache.)"""
    loop = scenarios.get("sync_vs_async").workload
    params = dict(n=40, shape=(512, 512))
    pred = _predict(loop, profile, **params)
    takes = _measure(gate, loop, profile.workers,
                     lambda m: _within(pred.duration, m.trace.duration, TOTAL), **params)
    assert _within(pred.duration, takes[-1].trace.duration, TOTAL), (pred.regions,
                                                                         _seen(takes))
    tiny = dict(n=200, shape=(1, 2))
    pred = _predict(loop, profile, **tiny)
    assert pred.regions["asynchronous."] <= pred.regions["synchronous."]
    best = _best_regions(loop, profile.workers, **tiny)
    assert best["asynchronous."] <= NOISE * best["synchronous."], best


MLP = dict(num_batches=20, batch_size=256, num_inputs=256, num_hiddens=(512, 256))
OPS_PER_BATCH = 18  # data (2), forward (8), loss (3), and a few scalar ops around them


def test_memory_with_and_without_a_blocker(profile, gate):
    """12.2.4 at a small size: totals within a factor of two, peak memory within 50%; on both
    sides the peak without a blocker is above the peak with one, and max_inflight of three
    batches' ops lands between them."""
    barrier = scenarios.get("memory_barrier").workload
    free_run = scenarios.get("memory_no_barrier").workload
    cap = 3 * OPS_PER_BATCH
    peaks = {}
    for name, workload, inflight in (("barrier", barrier, None), ("none", free_run, None),
                                     ("capped", free_run, cap)):
        pred = _predict(workload, profile, max_inflight=inflight, **MLP)

        def close(m, pred=pred):
            return (_within(pred.duration, m.trace.duration, TOTAL)
                    and _close(pred.peak_bytes(), m.trace.peak_bytes(), PEAK))

        takes = _measure(gate, workload, profile.workers, close, max_inflight=inflight, **MLP)
        meas = takes[-1].trace
        assert _within(pred.duration, meas.duration, TOTAL), (name, pred.regions, _seen(takes))
        assert _close(pred.peak_bytes(), meas.peak_bytes(), PEAK), name
        peaks[name] = (pred.peak_bytes(), meas.peak_bytes())
    for side in (0, 1):
        assert peaks["barrier"][side] < peaks["capped"][side] < peaks["none"][side], peaks


def _products_in(trace, label):
    """The exec spans of the products run inside region `label`."""
    (start, end), = [(a, b) for name, a, b in trace.marks if name == label]
    return [s for s in trace.spans_of(kind="exec") if s.name == "dot" and start <= s.start < end]


def _overlap(spans) -> bool:
    """Whether two of `spans` ran at the same time."""
    spans = sorted(spans, key=lambda s: s.start)
    return any(b.start < a.end for a, b in itertools.pairwise(spans))


def test_ten_independent_products(profile, gate):
    """8.3 exercise 1 at 256x256: the total within a factor of two; the model predicts ten
    independent products not slower than ten chained ones; and the engine ran some of the
    independent products at the same time, on two workers (in one run of three at least: where
    the OS runs a woken worker is the OS's business, though the engine steers it), and none of
    the chained ones (in every run).

    The measured times of the two regions are not compared: whether two products at once are
    faster than one after the other is the host's business, not the engine's. On CI's 2-core VM
    the fastest of three independent regions took 1.17x the fastest chained one (2.69 against
    2.30 ms), where on this project's 2-core VM two bare threads doing these products at once took
    0.67-2.08x the time of one thread doing all of them."""
    products = scenarios.get("independent_products").workload
    params = dict(n=10, size=256)
    pred = _predict(products, profile, **params)
    takes = _measure(gate, products, profile.workers,
                     lambda m: _within(pred.duration, m.trace.duration, TOTAL), **params)
    assert _within(pred.duration, takes[-1].trace.duration, TOTAL), (pred.regions,
                                                                         _seen(takes))
    assert pred.regions["independent products"] <= pred.regions["dependent products"]
    runs = [t.from_first_event() for t in _runs(products, profile.workers, **params)]
    independent = [_products_in(t, "independent products") for t in runs]
    chained = [_products_in(t, "dependent products") for t in runs]
    assert all(len(i) == len(c) == params["n"] for i, c in zip(independent, chained, strict=True))
    if profile.workers > 1:
        assert any(_overlap(i) and len({s.lane for s in i}) > 1 for i in independent), independent
    assert not any(_overlap(c) for c in chained), chained
