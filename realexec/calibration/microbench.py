"""The microbenchmarks behind `realexec.calibrate`: small synthetic workloads on the real engine.

Each function takes a `_Bench` (an `nd` of `realexec.session` and its engine) and returns plain
numbers in seconds, bytes and bytes (or flops) per second. None of them runs a scenario of
`asyncsim.lab.scenarios`: those are what the resulting Profile predicts. What they measure:

- `frontend`: the frontend's seconds per op (`t1`, and a cost per op name; "broadcast": `a + b`
  with shapes that differ, which takes the frontend's general path), from the period of a loop
  that issues ops while every worker is held by a sleeping op, so no worker competes for the GIL
  or a core, each timed loop right after an untimed one of its kind; `free`, the extra period
  when each result is dropped at once.
- `roundtrip`: a tiny op issued then waited for, over and over: the wake-up after completion
  (`t3` = wait end - exec end), and `dispatch`, what the rest of the round trip costs beyond
  t1 + exec + t3 (an idle worker waking up, the call into the blocker).
- `blockers`: the frontend's own work in asnumpy (a copy), print (formatting) and item, beyond
  t3, over array sizes.
- `worker_overhead`: a backlog of tiny ops drained by one worker: the gap between consecutive
  exec spans, Python work outside the kernel that holds the GIL (`gil`).
- `kernel_times`: exec spans of one op at a time (a low quantile of repeats), over sizes, in
  sweeps spread over seconds, for the per-op cost fits.

Per-op costs (`frontend`, `roundtrip`, `worker_overhead`, and `blocked`, `wake` in
`realexec.calibration.host`) and the kernel sweeps are measured in rounds with busy pauses between
them and summarised by `central` (`realexec.calibration.steady` says why).

`realexec.calibration.host` has the ones about the host: kernels that run at once, a busy
frontend, a fresh engine, cold blockers and a blocked frontend. Times come from the engine's own
log (`time.perf_counter_ns`), as in a measured Trace. `steady.BackgroundLoad` says how busy
other processes kept the cores meanwhile (a noisy measurement).
"""

from __future__ import annotations

import time
from time import perf_counter_ns

import numpy as np

from asyncsim.model.issue import DROP_BATCH, DROP_BYTES
from realexec.calibration.steady import busy, central

_HOLD = "calibrate-hold"
ROUND_TRIP = 8  # elements of the round trip's op


class _Bench:
    """An `nd` over a live engine, with helpers to hold workers and read the engine's log."""

    def __init__(self, nd, workers: int):
        self.nd = nd
        self.backend = nd._backend
        self.engine = self.backend.engine
        self.workers = workers

    def mark(self) -> int:
        self.flush()
        return len(self.engine.log)

    def flush(self) -> None:
        """The compiled engine reads its ops' spans out of its table when asked."""
        self.engine.flush()

    def spans(self, since: int, kind: str | None = None, name: str | None = None) -> list:
        """(lane, name, start_s, end_s) of log entries after `since`, in start order."""
        self.flush()
        rows = [(lane, nm, a * 1e-9, b * 1e-9) for lane, k, nm, _, a, b in self.engine.log[since:]
                if (kind is None or k == kind) and (name is None or nm == name)]
        rows.sort(key=lambda r: r[2])
        return rows

    def hold(self, arrays=(), seconds: float = 0.05, all_workers: bool = True,
             others: float | None = None) -> None:
        """Occupy workers with sleeping ops (no GIL, no core); the first also writes `arrays`,
        so every op reading them waits; the others sleep `others` seconds (default: as long)."""
        first = tuple(self.backend.vars[a.var] for a in arrays)
        count = self.workers if all_workers else 1
        for k in range(count):
            writes = first if k == 0 else (self.engine.new_var(_HOLD),)
            pause = seconds if k == 0 or others is None else others
            self.engine.push(time.sleep, (), writes, "cpu", _HOLD, (pause,))

    def issue_period(self, arrays, calls, seconds: float, seed: bool = True) -> float:
        """Seconds per call of `calls` (each issues an op, kept), every worker held meanwhile
        by `hold(arrays, seconds)`, so no op issued is ready; then waits for all of it.

        As a loop of these calls runs in a workload, its path hot (2-core AMD EPYC VM,
        `add_scalar`, us an op): the same calls run untimed behind the same hold first, as the
        frontend slept through the wait before and the loop right after a sleep ran 0.3-0.4
        slower (4.57-4.64 against 4.22-4.26); and before the hold they run twice (their ops
        done and dropped), so that the pool's free buffers on top are of their own shapes, as
        a loop's are. One of another shape in the same size class costs a view of it built
        per op: 5.54 against 4.59, which a calibration that cycles through kinds paid on every
        kind (`seed=False`: the pool as the loops before left it, as ops of several kinds in
        turn find it). `seconds` must cover both loops behind the hold."""
        if seed:
            made = [make() for make in calls * 2]
            self.nd.waitall()
            del made
        self.hold(arrays, seconds)
        kept = []
        for make in calls:
            kept.append(make())
        start = perf_counter_ns()
        for make in calls:
            kept.append(make())
        seconds = (perf_counter_ns() - start) * 1e-9 / len(calls)
        self.nd.waitall()
        return seconds


def op_makers(nd) -> tuple[dict, tuple]:
    """kind -> a call that issues one small op of that kind (the kinds `frontend` prices), and
    the arrays (x, m, row) those calls read."""
    x = nd.ones((8,))
    m = nd.ones((4, 4))
    row = nd.ones((4,))
    makers = {
        "add_scalar": lambda: x + 1.0,
        "add": lambda: x + x,
        "broadcast": lambda: m + row,
        "relu": lambda: nd.relu(x),
        "ones": lambda: nd.ones((8,)),
        "normal": lambda: nd.random.normal(shape=(8,)),
        "dot": lambda: nd.dot(m, m),
        "sum": lambda: x.sum(),
        "copy": lambda: x.copy(),
        "slice": lambda: m[0:2],
    }
    return makers, (x, m, row)


def issue_probe(bench: _Bench, ops: int = 200, rounds: int = 3):
    """A probe (no arguments, seconds) of the interpreter's speed of the moment, for a
    `steady.Gate` over calibration's frontend steps: seconds per issued `x + 1.0` with every
    worker held, as `frontend` prices t1, the median of `rounds` loops of `ops`.

    `speed_probe` (memory-bound, compiled) misses the interpreter's slow states: calibrations
    on the 2-core AMD EPYC VM priced t1 at 7.4-12.7 us against 4.8-5.5 in the others (8 of 27)
    while their speed probes read within 1.16x of usual; looked at side by side for 150 s, the
    issue's period and the speed probe's were slow in the same looks with correlation 0.57."""
    x = bench.nd.ones((8,))
    calls = [lambda: x + 1.0] * ops
    hold_s = max(0.01, 60e-6 * ops)  # both loops behind the hold, at 5x the usual price

    def probe() -> float:
        periods = [bench.issue_period((x,), calls, hold_s, seed=k == 0) for k in range(rounds)]
        return float(np.median(periods))

    return probe


def frontend(bench: _Bench, n: int, repeats: int, pause: float = 0.0) -> dict:
    """Seconds per issued op for each op kind (held workers), and per dropped last handle:
    "free", a small result whose op is done (the engine gives it back with a run of others);
    "free pending", one whose op is still running (its deletion waits); "free large", a result
    too large for a run whose op is done (given back alone, at once): `drops`."""
    nd = bench.nd
    makers, (x, m, row) = op_makers(nd)
    large = nd.ones((2 * DROP_BYTES // 4,))  # float32: twice what a run of drops may hold
    nd.waitall()
    hold_s = max(0.02, 120e-6 * n)  # two loops of n calls behind each hold

    def period(make) -> float:
        return bench.issue_period((x, m, row), [make] * n, hold_s)

    def drops(source, pending: bool) -> float:
        """Seconds per dropped last handle of `source + 1`'s result, in rounds of a run's
        worth (`DROP_BATCH`) made and then dropped, only the drops timed: as a loop drops its
        results, right after making them (a drop of a result made long before, its objects out
        of the caches, cost 1.0-1.3 us where a loop's cost 0.5-0.8, 2-core AMD EPYC VM). Ops
        done (a short wait, spun, before the drops) or still pending (held behind a short
        hold: the deletions wait)."""
        total, rounds = 0, max(1, n // DROP_BATCH)
        for _ in range(rounds):
            if pending:
                bench.hold((source,), 2e-3)
            kept = [source + 1.0 for _ in range(DROP_BATCH)]
            if not pending:
                nd.waitall()
            start = perf_counter_ns()
            while kept:
                kept.pop()
            total += perf_counter_ns() - start
            if pending:
                nd.waitall()
        return total * 1e-9 / (rounds * DROP_BATCH)

    # round robin over the kinds, so that a burst of load from elsewhere hits them alike; each
    # timed loop follows an untimed loop of its own kind behind the same hold, as the model's
    # prices assume (a loop of one kind, its path hot; `Profile.mix` adds what mixing kinds
    # costs). A loop right after loops of the other kinds ran 0.7-1.2 us an op slower at the
    # lowest, over all of its 300 ops (add_scalar, 2-core AMD EPYC VM); so did the first loop
    # after a pause (6.9-7.1 us against 5.9, 2-core Intel VM)
    frees = {"free": (x, False), "free pending": (x, True), "free large": (large, False)}
    samples: dict = {name: [] for name in [*makers, *frees]}
    for _ in range(repeats):
        busy(pause)
        for name, make in makers.items():
            samples[name].append(period(make))
        for name, (source, pending) in frees.items():
            drops(source, pending)  # untimed: the path hot, as for the issues
            samples[name].append(drops(source, pending))
    # not a low quantile (the machine at its fastest), which made every prediction of many
    # small ops short: see `central`
    issue = {name: central(samples[name]) for name in makers}
    prices = {kind: central(samples[kind]) for kind in frees}
    return {"issue": issue, "free": prices["free"], "frees": prices,
            "spread": {name: [float(np.min(v)), float(np.max(v))] for name, v in samples.items()}}


def roundtrip(bench: _Bench, n: int, repeats: int, pause: float = 0.0) -> dict:
    """Issue a tiny op (`x + 1.0` on ROUND_TRIP elements) and wait for it, n times:
    per-iteration seconds split into the parts."""
    nd = bench.nd
    x = nd.ones((ROUND_TRIP,))
    nd.waitall()
    periods, execs, wakes, lags = [], [], [], []
    for _ in range(repeats):
        busy(pause)
        since = bench.mark()
        start = perf_counter_ns()
        for _ in range(n):
            y = x + 1.0
            y.wait_to_read()
        periods.append((perf_counter_ns() - start) * 1e-9 / n)
        ex = bench.spans(since, "exec", "add_scalar")
        waits = bench.spans(since, "wait", "wait_to_read")
        issues = bench.spans(since, "issue", "add_scalar")
        for (_, _, a, b), (_, _, w_start, w_end), (_, _, _, i_end) in zip(ex, waits, issues,
                                                                          strict=False):
            execs.append(b - a)
            # what the blocker costs once its wait is over (the model's t3): from the op's end,
            # or from the call if the op had ended before it (the frontend's Python between
            # the push and the call is the issue's, t1, not the blocker's)
            wakes.append(w_end - max(b, w_start))
            lags.append(a - i_end)
    return {"period": central(periods), "exec": float(np.median(execs)),
            "t3": central(wakes), "lag": central(lags)}


def long_wake(bench: _Bench, n: int, seconds: float = 0.01) -> float:
    """The wake-up after a wait long enough for the blocker to fall asleep (past its spin)."""
    nd = bench.nd
    x = nd.ones((8,))
    nd.waitall()
    wakes = []
    for _ in range(n):
        since = bench.mark()
        bench.hold((x,), seconds, all_workers=False)
        x.wait_to_read()
        (_, _, _, held), = bench.spans(since, "exec", _HOLD)
        (_, _, _, woke), = bench.spans(since, "wait", "wait_to_read")
        wakes.append(woke - held)
    return float(np.median(wakes))


def blockers(bench: _Bench, sizes, repeats: int) -> dict:
    """Frontend seconds of a whole blocker call on a ready array of each size (its Python work
    outside the wait span included, such as `NDArray.__repr__`'s own): kind -> [(nbytes,
    seconds)]."""
    nd = bench.nd
    out: dict = {"wait_to_read": [], "asnumpy": [], "print": [], "item": []}

    def call_time(call) -> float:
        samples = []
        for _ in range(repeats):
            start = perf_counter_ns()
            call()
            samples.append((perf_counter_ns() - start) * 1e-9)
        return float(np.median(samples))

    for n in sizes:
        x = nd.ones((n,))
        nd.waitall()
        for kind, call in (("wait_to_read", x.wait_to_read), ("asnumpy", x.asnumpy),
                           ("print", lambda: repr(x))):  # noqa: B023 -- called at once
            out[kind].append((4 * n, call_time(call)))
    s = nd.ones((1,))
    nd.waitall()
    out["item"].append((4, call_time(s.item)))
    out["wait_to_read"].append((4, call_time(s.wait_to_read)))
    return out


def worker_overhead(bench: _Bench, n: int, repeats: int, pause: float = 0.0) -> dict:
    """A backlog of n tiny ops run by one worker (the others held): the central gap between
    its exec spans for independent ops, for a chain, and for a chain whose intermediate results
    the frontend has dropped (so the worker releases a buffer after each op)."""
    nd = bench.nd
    x = nd.ones((8,))
    nd.waitall()

    def independent():
        return [x + 1.0 for _ in range(n)]

    def chain(keep=True):
        kept, y = [], x
        for _ in range(n):
            y = y + 1.0
            if keep:
                kept.append(y)
        return kept or [y]

    cases = {"independent": independent, "chain": chain,
             "chain_dropped": lambda: chain(keep=False)}
    gaps: dict = {name: [] for name in cases}
    # rounds alternate the cases: `release` and the cost of readying a successor are their
    # differences, which a change of the machine's speed between cases would swamp
    for _ in range(repeats):
        busy(pause)
        for name, issue in cases.items():
            since = bench.mark()
            hold_s = max(0.005, 20e-6 * n)
            bench.hold((x,), hold_s, others=hold_s + 60e-6 * n)
            kept = issue()
            kept[-1].wait_to_read()
            del kept
            spans = bench.spans(since, "exec", "add_scalar")
            for lane in {s[0] for s in spans}:
                mine = [s for s in spans if s[0] == lane]
                gaps[name] += [b[2] - a[3] for a, b in zip(mine, mine[1:], strict=False)]
            nd.waitall()
    return {name: central(values) for name, values in gaps.items()}


def kernel_times(bench: _Bench, make, sizes, repeats: int, name: str, rounds: int = 1,
                 pause: float = 0.0) -> list[float]:
    """Exec seconds of `make(size)` (an op called `name`), one op at a time per size: a low
    quantile of the repeats in each of `rounds` sweeps over the sizes (`pause` seconds apart),
    then `central` of the rounds (a sweep takes a fraction of a second, one speed of the
    machine). Each op wakes a sleeping worker, and on this kind of machine every
    other wake-up may land the worker on the core where the frontend spins in its blocker, which
    stretches a short op's span several times (a cost of the round trip, which `roundtrip`
    prices); load from elsewhere, too, only ever adds time."""
    nd = bench.nd
    makers = []
    for size in sizes:
        make_one = make(size)
        make_one().wait_to_read()  # first touch of the output buffer, out of the timing
        makers.append(make_one)
    per_round = []
    for k in range(rounds):
        if k:
            busy(pause)
        row = []
        for make_one in makers:
            since = bench.mark()
            for _ in range(repeats):
                make_one().wait_to_read()
            spans = bench.spans(since, "exec", name)
            row.append(float(np.quantile([b - a for _, _, a, b in spans], 0.25)))
            nd.waitall()
        per_round.append(row)
    return [central(column) for column in zip(*per_round, strict=True)]
