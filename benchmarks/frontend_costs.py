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
   since the last look; of that look, the pool's release of the buffer (`Pool.release`,
   timed by a wrapper too).
3. Pushes while the frontend runs ahead of a held worker: `y = o + 1` on (1, 8) and a dense
   layer's `relu(dot(x, w) + b)`, each dropping the previous result, on one worker held by a
   gate op (the deletions wait), against the same loop with the worker running.
4. Python on one core while the other core works (Linux only): a loop of dict stores pinned to
   one core, alone and while a thread pinned to the other core multiplies 1500x1500 matrices
   (single-threaded BLAS) or copies 16 MiB. Whether the machine itself slows the frontend when
   a worker computes beside it: where it does not, what sections 2 and 3 show beyond the looks
   is the engine's own cost.
5. The same core after products (Linux only): interpreter work and the compiled relu on 8 MiB,
   timed right after ~20 ms of single-threaded products on the core they run on, against right
   after ~20 ms of interpreter work. Calibration times every kernel after others of its kind;
   in a training loop the elementwise ops and the frontend follow products.

Medians over R rounds, each case in turn within a round; ratios and times taken side by side in
one run, never asserted: this machine's speed moves. Units: microseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import numpy as np
import threadpoolctl

import realexec
from realexec.calibration import issuing, microbench
from realexec.cpu import kernels as cpu_kernels
from realexec.frontend import machine
from realexec.sessions import frozen_gc

US = 1e6
BEFORE_S = 0.02  # section 5: seconds of products (or interpreter work) before each timing


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


def _timed_frees(backend) -> tuple[list, list]:
    """Time every call of the engine's `_run_frees` from now on, and every release of a CPU
    buffer made inside one (seconds, appended to the two returned lists): the pending
    deletions given back on the push path, and the pool's part of that."""
    engine = backend.engine
    calls, releases, run, release = [], [], engine._run_frees, backend._release_cpu
    inside = [False]

    def timed(every=False):
        inside[0] = True
        start = time.perf_counter()
        run(every)
        calls.append(time.perf_counter() - start)
        inside[0] = False

    def timed_release(array):
        start = time.perf_counter()
        release(array)
        if inside[0]:
            releases.append(time.perf_counter() - start)

    engine._run_frees = timed
    backend._release_cpu = timed_release  # `free` reads it at each drop
    return calls, releases


def _loop(nd, body, n: int, held_arrays, workers: int, frees=None) -> tuple:
    """(seconds per op of the loop, median issue span, `_run_frees` calls during the loop and
    their median seconds) of `n` calls of `body`, the workers held meanwhile when
    `held_arrays` is not None; `frees`: the list `_timed_frees` fills."""
    engine = nd._backend.engine
    gate = None if held_arrays is None else _hold(nd, held_arrays, workers)
    engine.flush()
    since = len(engine.log)
    calls, releases = frees if frees is not None else ([], [])
    looked, released = len(calls), len(releases)
    start = time.perf_counter()
    body(n)
    period = (time.perf_counter() - start) / n
    looks, given = calls[looked:], releases[released:]
    if gate is not None:
        gate.set()
    nd.waitall()
    engine.flush()
    spans = [(b - a) * 1e-9 for _, kind, _, _, a, b in engine.log[since:] if kind == "issue"]
    return (period, statistics.median(spans[-n:]), len(looks), statistics.median(looks or [0.0]),
            statistics.median(given or [0.0]))


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
        frees = _timed_frees(nd._backend)
        for _ in range(rounds):
            for name, body in (("chained", chained), ("independent", independent)):
                for state, held in (("running", None), ("held", (x,))):
                    results.setdefault((name, state), []).append(
                        _loop(nd, body, 100, held, 2, frees))
    print("\n2. products of 100x100 matrices, two workers, per op: frontend period, push span;"
          " looks at pending deletions during the loop (of 100 pushes), median us a look, and"
          " of it the pool's release")
    for (name, state), values in results.items():
        period, span, looks, look, release = (statistics.median(v[i] for v in values)
                                              for i in range(5))
        print(f"   {name:12s} workers {state:8s} period {period * US:6.1f} us   span "
              f"{span * US:5.1f} us   looks {looks:4.0f}   {look * US:5.2f} us a look   "
              f"release {release * US:4.2f} us")


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


def _python_loop(n: int = 200_000) -> float:
    """Seconds per iteration of a loop of dict stores: interpreter work, as the frontend's."""
    start = time.perf_counter()
    d: dict = {}
    for i in range(n):
        d[i & 1023] = i + 1
    return (time.perf_counter() - start) / n


def beside(rounds: int) -> None:
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        print("\n4. (skipped: needs two cores and Linux's sched_setaffinity)")
        return
    first, second = sorted(os.sched_getaffinity(0))[:2]
    everywhere = os.sched_getaffinity(0)
    stop = threading.Event()

    def products():
        os.sched_setaffinity(0, {second})
        a = np.ones((1500, 1500), np.float32)
        while not stop.is_set():
            np.dot(a, a)  # ~35 ms without the GIL: the loop beside it runs on

    def copies():
        os.sched_setaffinity(0, {second})
        a = np.ones(1 << 22, np.float32)
        b = np.empty_like(a)
        while not stop.is_set():
            np.copyto(b, a)

    ratios: dict = {"1500x1500 products": [], "16 MiB copies": []}
    os.sched_setaffinity(0, {first})
    try:
        with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):  # one core's BLAS
            for _ in range(rounds):
                alone = statistics.median(_python_loop() for _ in range(5))
                for label, work in (("1500x1500 products", products), ("16 MiB copies", copies)):
                    stop.clear()
                    thread = threading.Thread(target=work)
                    thread.start()
                    time.sleep(0.05)
                    ratios[label].append(statistics.median(_python_loop() for _ in range(5))
                                         / alone)
                    stop.set()
                    thread.join()
    finally:
        os.sched_setaffinity(0, everywhere)
    print(f"\n4. a Python loop on core {first} while core {second} works, against it alone "
          f"(slowdown; median and range over the rounds)")
    for label, values in ratios.items():
        print(f"   {label:20s} {statistics.median(values):.2f}x   range "
              f"{min(values):.2f}-{max(values):.2f}x")


def after_products(rounds: int) -> None:
    """Section 5: on one core, interpreter work and an elementwise kernel timed right after
    `BEFORE_S` of products on that core, against right after as long of interpreter work."""
    if not hasattr(os, "sched_setaffinity"):
        print("\n5. (skipped: needs Linux's sched_setaffinity)")
        return
    everywhere = os.sched_getaffinity(0)
    a = np.ones((1024, 512), np.float32)
    w = np.ones((2048, 512), np.float32)
    h = np.empty((1024, 2048), np.float32)
    x = np.ones(1 << 21, np.float32)  # 8 MiB, as the MLP's activations
    y = np.empty_like(x)
    relu = cpu_kernels.KERNELS["relu"]

    def before(kind):
        end = time.perf_counter() + BEFORE_S
        while time.perf_counter() < end:
            if kind == "products":
                np.dot(a, w.T, out=h)
            else:
                _python_loop(2_000)

    def kernel():
        start = time.perf_counter()
        relu((x,), y, {})
        return time.perf_counter() - start

    cases = {"interpreter loop": lambda: _python_loop(20_000), "relu on 8 MiB": kernel}
    ratios: dict = {label: [] for label in cases}
    os.sched_setaffinity(0, {min(everywhere)})
    try:
        with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
            kernel()
            for _ in range(rounds):
                for label, case in cases.items():
                    times = {}
                    for kind in ("python", "products"):
                        samples = []
                        for _ in range(7):
                            before(kind)
                            samples.append(case())
                        times[kind] = statistics.median(samples)
                    ratios[label].append(times["products"] / times["python"])
    finally:
        os.sched_setaffinity(0, everywhere)
    print(f"\n5. on one core, right after {BEFORE_S * 1e3:.0f} ms of products (1024x512 by "
          f"512x2048, one BLAS thread) against right after as long of interpreter work "
          f"(slowdown; median and range)")
    for label, values in ratios.items():
        print(f"   {label:20s} {statistics.median(values):.2f}x   range "
              f"{min(values):.2f}-{max(values):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every case")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with frozen_gc():
        mixing(max(1, args.rounds // 2))
        products(args.rounds)
        running_ahead(args.rounds)
        beside(args.rounds)
        after_products(args.rounds)


if __name__ == "__main__":
    main()
