"""What the frontend pays beyond the issue costs calibration times one kind at a time, workers held.

    python benchmarks/frontend_costs.py [--rounds R]

1. Kinds in turn: `realexec.calibration.issuing.mixed_issue`, the 2, 5 and 10 kinds of small op
   issued in turn against each kind in a loop of its own, and the `Profile.mix` fitted to them.
2. Products of 100x100 matrices, 100 a loop, on two workers: chained (`y = nd.dot(y, x)`) and
   independent (`nd.dot(x, x)`), with the workers running and with both held by a gate op until
   the loop is issued. Per op: the frontend's period (the loop's time) and the median issue
   span (the push alone); and the pushes that looked at the pending deletions, with the time
   of a look (`NativeEngine._run_frees`, timed by a wrapper, which adds ~0.1 us): a chained
   push with a running worker gives back the previous `y`'s buffer whenever an op finished
   since the last look.
3. Pushes while the frontend runs ahead of a held worker: `y = o + 1` on (1, 8) and a dense
   layer's `relu(dot(x, w) + b)`, each dropping the previous result, on one worker held by a
   gate op (the deletions wait), against the same loop with the worker running.

Medians over R rounds, each case in turn within a round; ratios and times taken side by side in
one run, never asserted: this machine's speed moves. Units: microseconds.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import realexec
from realexec.calibration import issuing, microbench
from realexec.frontend import machine
from realexec.sessions import frozen_gc

US = 1e6


def mixing(rounds: int) -> None:
    with realexec.session(workers=2) as nd:
        bench = microbench._Bench(nd, 2)
        ratios = [issuing.mixed_issue(bench, 300, 3, 0.05)["ratios"] for _ in range(rounds)]
    print("1. kinds issued in turn against each kind alone (mixed / separate)")
    for k in ratios[0]:
        values = [r[k] for r in ratios]
        print(f"   {k:2d} kinds   median {statistics.median(values):.2f}x   "
              f"range {min(values):.2f}-{max(values):.2f}x")
    fits = [issuing.fit_mix(r) for r in ratios]
    print(f"   Profile.mix fitted: {min(fits):.2f}-{max(fits):.2f}")


def _hold(nd, arrays, workers: int) -> threading.Event:
    """Occupy every worker with a gate op; the first writes `arrays` (so no op reading them is
    ready). Set the returned event to let them go."""
    engine, gate = nd._backend.engine, threading.Event()
    for k in range(workers):
        writes = tuple(nd._backend.vars[a.var] for a in arrays) if k == 0 else (engine.new_var(),)
        engine.push(gate.wait, (), writes)
    return gate


def _timed_frees(engine) -> list:
    """Time every call of the engine's `_run_frees` from now on (seconds, appended to the
    returned list): the pending deletions given back on the push path."""
    calls, run = [], engine._run_frees

    def timed(every=False):
        start = time.perf_counter()
        run(every)
        calls.append(time.perf_counter() - start)

    engine._run_frees = timed
    return calls


def _loop(nd, body, n: int, held_arrays, workers: int, frees=None) -> tuple:
    """(seconds per op of the loop, median issue span, `_run_frees` calls during the loop and
    their median seconds) of `n` calls of `body`, the workers held meanwhile when
    `held_arrays` is not None; `frees`: the list `_timed_frees` fills."""
    engine = nd._backend.engine
    gate = None if held_arrays is None else _hold(nd, held_arrays, workers)
    since = len(engine.log)
    looked = len(frees) if frees is not None else 0
    start = time.perf_counter()
    body(n)
    period = (time.perf_counter() - start) / n
    looks = frees[looked:] if frees is not None else []
    if gate is not None:
        gate.set()
    nd.waitall()
    spans = [(b - a) * 1e-9 for _, kind, _, _, a, b in engine.log[since:] if kind == "issue"]
    return period, statistics.median(spans[-n:]), len(looks), statistics.median(looks or [0.0])


def products(rounds: int) -> None:
    results: dict = {}
    with realexec.session(workers=2) as nd:
        x = nd.random.uniform(0, 0.02, shape=(100, 100))
        nd.waitall()

        def chained(n):
            y = x
            for _ in range(n):
                y = nd.dot(y, x)

        def independent(n):
            kept = [nd.dot(x, x) for _ in range(n)]
            del kept

        for body in (chained, independent):  # untimed: code and buffers warm
            _loop(nd, body, 100, None, 2)
        frees = _timed_frees(nd._backend.engine)
        for _ in range(rounds):
            for name, body in (("chained", chained), ("independent", independent)):
                for state, held in (("running", None), ("held", (x,))):
                    results.setdefault((name, state), []).append(
                        _loop(nd, body, 100, held, 2, frees))
    print("\n2. products of 100x100 matrices, two workers, per op: frontend period, push span;"
          " looks at pending deletions during the loop (of 100 pushes), median us a look")
    for (name, state), values in results.items():
        period, span, looks, look = (statistics.median(v[i] for v in values) for i in range(4))
        print(f"   {name:12s} workers {state:8s} period {period * US:6.1f} us   span "
              f"{span * US:5.1f} us   looks {looks:4.0f}   {look * US:5.2f} us a look")


def running_ahead(rounds: int) -> None:
    results: dict = {}
    with realexec.session(workers=1) as nd:
        x, w, b = nd.ones((1, 16)), nd.ones((16, 8)), nd.zeros((8,))
        o = nd.ones((1, 8))
        nd.waitall()

        def add_one(n):
            for _ in range(n):
                y = o + 1  # noqa: F841 -- each drops the one before

        def dense(n):
            for _ in range(n):
                z = nd.relu(nd.dot(x, w) + b)  # noqa: F841

        for body in (add_one, dense):
            _loop(nd, body, 600, None, 1)
        for _ in range(rounds):
            for name, body in (("y = o + 1", add_one), ("relu(dot + b)", dense)):
                for state, held in (("running", None), ("held", (o, x))):
                    results.setdefault((name, state), []).append(
                        _loop(nd, body, 600, held, 1)[0])
    print("\n3. one worker, each result dropped: frontend period per op")
    for (name, state), values in results.items():
        print(f"   {name:14s} worker {state:8s} {statistics.median(values) * US:6.2f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every case")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with frozen_gc():
        mixing(max(1, args.rounds // 2))
        products(args.rounds)
        running_ahead(args.rounds)


if __name__ == "__main__":
    main()
