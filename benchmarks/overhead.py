"""Overhead of realexec's engine, measured side by side with numpy in one run, with the machine.

    python benchmarks/overhead.py [--rounds 3] [--quick]

Each figure is the median over rounds; in every round the numpy baseline and the engine run back
to back, and the printed ratio is the engine's share of the baseline's speed (1.0 = as fast).

1. push: frontend microseconds per `y = x + 1` on a (1, 2) array, on each engine: "native-light"
   (the default: small results live in the engine's compiled state), "native" (every result a
   Python var) and "python" (Python workers). "issue span" is the backend's own
   push path (reserve the output, push, record); "nd per op" is the whole frontend per op,
   including the shared `asyncsim.nd.frontend.ND` (its cost alone is the null-backend line) and, in
   async mode, the GIL shared with the worker that runs the ops; "+ drain" adds the final
   waitall, so it also counts the Python work the worker does per op (a frontend that pushes
   tiny ops keeps the GIL, so the worker mostly runs them after the loop); "engine.push" pushes
   no-op callables queued behind a held op, 1000 at a time (the engine's bookkeeping alone).
   Then the pushes of a training loop's other ops on the compiled engine, with the worker
   draining: an activation as an `nd` function, a product with a transposed weight, a bias add
   and a dense layer (`nd.FullyConnected`: the product and the bias add), on arrays of a few
   elements.
2. y = x + 1 on 2000x2000 against np.copyto of the same bytes: with a wait_to_read each
   iteration (t1 + t2 + t3 each time), and pipelined (max_inflight=2, one waitall at the end).
3. dot 2000x2000 (one worker, BLAS with every core) against np.dot.
4. ten independent 1000x1000 products, 2 workers against 1: with BLAS threads = cores // workers
   (the engine's rule) and with BLAS single-threaded (the engine's own parallelism); next to the
   same products on plain Python threads, which is what the machine itself can give.
5. blocker wake-up: from the end of an op's exec span to the end of the wait_to_read that waited
   for it (the frontend running again), on each engine: spinning first, and asleep at once (the
   Python engine's plain Condition).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time

import numpy as np

import realexec
from asyncsim.nd.frontend import ND
from realexec.cpu import kernels as cpu
from realexec.engine.lanes import default_workers
from realexec.frontend import ENGINES, EngineBackend, machine
from realexec.sessions import frozen_gc

US = 1e6


def best_of(fn, reps: int) -> float:
    """Median seconds of `fn()` over reps calls (after one untimed call)."""
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class NullBackend:
    def check_device(self, device):
        pass

    def issue(self, op, out_var, host):
        pass

    def free(self, var):
        pass

    def sync(self, kind, var):
        return None


def nd_per_op(nd, n: int, drain: bool = False, x=None) -> float:
    if x is None:
        x = nd.ones((1, 2))
        x.wait_to_read()
    start = time.perf_counter()
    for _ in range(n):
        y = x + 1
    if drain:
        nd.waitall()
    elapsed = time.perf_counter() - start
    del y
    return elapsed / n


# ops the frontend issues through its general path (`ND._op`), and an activation through the fast
# one: a training loop's pushes, on arrays small enough that the kernel costs nothing
KINDS = {"nd.relu(x)": lambda nd, x, m, w, b: nd.relu(x),
         "nd.dot(m, w.T)": lambda nd, x, m, w, b: nd.dot(m, w, transpose_b=True),
         "x + b, a bias add": lambda nd, x, m, w, b: x + b,
         "nd.FullyConnected(m, w, b)": lambda nd, x, m, w, b: nd.FullyConnected(m, w, b)}


def kind_per_op(nd, call, n: int) -> float:
    """Seconds per `call(nd, x, m, w, b)` (x (2, 3), m (2, 4), w (3, 4), b (3,)), the worker
    draining: the loop and the final waitall."""
    x, m, w, b = nd.ones((2, 3)), nd.ones((2, 4)), nd.ones((3, 4)), nd.ones((3,))
    nd.waitall()
    start = time.perf_counter()
    for _ in range(n):
        y = call(nd, x, m, w, b)
    nd.waitall()
    elapsed = time.perf_counter() - start
    del y
    return elapsed / n


def push_overhead(n: int) -> dict:
    a = np.ones((1, 2), np.float32)
    start = time.perf_counter()
    for _ in range(n):
        b = a + 1  # noqa: F841 -- numpy's own op, the yardstick
    out = {"numpy y = x + 1": (time.perf_counter() - start) / n,
           "null backend (ND alone)": nd_per_op(ND(NullBackend()), n)}
    for engine in ("native-light", "native", "python"):
        for mode in ("async", "sync"):
            with realexec.session(workers=1, mode=mode, engine=engine) as nd:
                out[f"{engine}: nd per op, {mode}"] = nd_per_op(nd, n)
                nd.waitall()
                issues = [s.duration for s in nd._backend.trace().spans_of("frontend", "issue")]
                out[f"{engine}: issue span, {mode}"] = statistics.median(issues)
                if mode == "async":
                    out[f"{engine}: nd per op, async + drain"] = nd_per_op(nd, n, drain=True)
                if mode == "async" and engine == "native-light":  # (the default engine)
                    for kind, call in KINDS.items():
                        kind_per_op(nd, call, n // 10)  # the kernels compiled, the pool warm
                        out[f"{engine}: {kind}, async + drain"] = kind_per_op(nd, call, n)
        # as in a session, the objects that exist now stay out of the GC's full collections
        with frozen_gc(), ENGINES[engine](workers=1) as eng:
            held, target = eng.new_var(), eng.new_var()
            batch, elapsed = 1000, 0.0
            for _ in range(max(1, n // batch)):
                # batches of 1000 behind a held op: bookkeeping alone, with a bounded backlog
                gate = threading.Event()
                eng.push(gate.wait, (), (held,))
                start = time.perf_counter()
                for _ in range(batch):
                    eng.push(_nothing, (held,), (target,))
                elapsed += time.perf_counter() - start
                gate.set()
                eng.wait_all()
            out[f"{engine}: engine.push, queued"] = elapsed / (max(1, n // batch) * batch)
    return out


def _nothing():
    return None


def loop(nd, n=20, shape=(2000, 2000)):
    x = nd.ones(shape)
    x.wait_to_read()
    with nd.benchmark("loop"):
        for _ in range(n):
            y = x + 1
            y.wait_to_read()


def pipelined(nd, n=20, shape=(2000, 2000)):
    x = nd.ones(shape)
    x.wait_to_read()
    with nd.benchmark("loop"):
        for _ in range(n):
            y = x + 1
        nd.waitall()
    del y


def add_bandwidth(n: int) -> dict:
    a = np.ones((2000, 2000), np.float32)
    b = np.empty_like(a)
    copy = best_of(lambda: np.copyto(b, a), n)
    add = best_of(lambda: np.add(a, 1, out=b), n)
    realexec.run(loop, workers=1, n=2)  # the pool's cache now holds warm buffers
    trace = realexec.run(loop, workers=1, n=n)
    per_iter = trace.regions["loop"] / n
    kernel = statistics.median(s.duration for s in trace.spans_of(kind="exec")
                               if s.name == "add_scalar")
    # no wait per iteration: max_inflight=2 keeps the frontend at most two ops ahead, so the
    # engine's own costs overlap the kernels and at most four buffers cycle through the pool
    flow = realexec.run(pipelined, workers=1, max_inflight=2, n=n)
    return {"np.copyto": copy, "np.add(out=)": add, "engine iteration": per_iter,
            "engine exec span": kernel, "engine pipelined": flow.regions["loop"] / n}


def dots(nd, n=3, size=2000):
    a = nd.ones((size, size))
    nd.dot(a, a).wait_to_read()  # untimed, as numpy's first call: the pool now holds its output
    with nd.benchmark("dot"):
        for _ in range(n):
            nd.dot(a, a).wait_to_read()


def dot_speed(n: int) -> dict:
    a = np.ones((2000, 2000), np.float32)
    cpu.set_blas_threads(default_workers())
    numpy = best_of(lambda: np.dot(a, a), n)
    trace = realexec.run(dots, workers=1, n=n)
    return {"np.dot": numpy, "engine dot iteration": trace.regions["dot"] / n}


def products(nd, blas_threads=None):
    if blas_threads is not None:
        cpu.set_blas_threads(blas_threads)  # the session restores its own setting afterwards
    xs = [nd.random.uniform(shape=(1000, 1000)) for _ in range(10)]
    nd.waitall()
    with nd.benchmark("products"):
        ys = [nd.dot(x, x) for x in xs]
        nd.waitall()
    del ys


def numpy_threads(threads: int, blas_threads: int) -> float:
    """Seconds for ten 1000x1000 products spread over plain Python threads: what this machine
    gives without any engine."""
    cpu.set_blas_threads(blas_threads)
    xs = [np.random.default_rng(i).random((1000, 1000), np.float32) for i in range(10)]

    def work(part):
        for x in part:
            np.dot(x, x)

    pool = [threading.Thread(target=work, args=(xs[i::threads],)) for i in range(threads)]
    start = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - start


def parallel_products() -> dict:
    out = {f"numpy, {t} plain thread(s), BLAS 1": numpy_threads(t, 1) for t in (1, 2)}
    for label, threads in (("BLAS cores // workers", None), ("BLAS 1 thread", 1)):
        for workers in (1, 2):
            trace = realexec.run(products, workers=workers, blas_threads=threads)
            out[f"{label}, {workers} worker(s)"] = trace.regions["products"]
    return out


@contextlib.contextmanager
def engine_nd(engine: str = "python", **engine_args):
    backend = EngineBackend(ENGINES[engine](**engine_args))
    try:
        yield ND(backend)
    finally:
        backend.close()


# (engine, spin_s, label): the compiled engine's blocker spins in compiled code, then sleeps on
# a futex (spin 0: at once); the Python engine's spins with `Progress`, or waits on a Condition
WAITS = (("native", 2e-3, "native: spin then sleep"), ("native", 0.0, "native: sleep only"),
         ("python", 2e-3, "python: spin then sleep"), ("python", 0.0, "python: plain Condition"))


def wake_latency(n: int) -> dict:
    out = {}
    for engine, spin, label in WAITS:
        with engine_nd(engine, workers=1, spin_s=spin) as nd:
            x = nd.ones((1000, 1000))
            x.wait_to_read()
            for _ in range(n):
                y = x + 1
                y.wait_to_read()
            trace = nd._backend.trace()
        execs = {s.op_id: s for s in trace.spans_of(kind="exec")}
        issues = trace.spans_of("frontend", "issue")
        waits = [s for s in trace.spans_of("frontend", "wait")][1:]
        gaps = [w.end - execs[i.op_id].end for i, w in zip(issues[1:], waits, strict=True)]
        out[label] = statistics.median(gaps)
    return out


def median_rows(rounds: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    args = parser.parse_args()
    scale = 0.2 if args.quick else 1.0
    rounds = max(1, args.rounds)
    print(f"machine: {machine()}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"workers by default: {default_workers()}; rounds: {rounds}; "
          f"load average before: {load:.2f} (other processes skew every figure)\n")
    with realexec.session():
        pass  # compile the kernels before anything is timed

    push = median_rows([push_overhead(int(20000 * scale)) for _ in range(rounds)])
    print("1. push overhead, microseconds per op on a (1, 2) array")
    for k, v in push.items():
        print(f"   {k:<36s} {v * US:8.2f} us")
    for engine in ("native-light", "native", "python"):
        for row in ("async + drain", "sync"):
            ratio = push[f"{engine}: nd per op, {row}"] / push["numpy y = x + 1"]
            label = f"{engine}: {row} / numpy's op"
            print(f"   {label:<40s} {ratio:4.1f}x")

    add = median_rows([add_bandwidth(max(5, int(40 * scale))) for _ in range(rounds)])
    print("\n2. y = x + 1 on 2000x2000 (target: >= 0.80 of np.copyto)")
    for k, v in add.items():
        print(f"   {k:<28s} {v * 1e3:8.3f} ms")
    engine_iter = add["engine iteration"]
    print(f"   ratio np.copyto / engine iteration   {add['np.copyto'] / engine_iter:.2f}")
    print(f"   ratio np.add / engine iteration      {add['np.add(out=)'] / engine_iter:.2f}")
    flow = add["engine pipelined"]
    print(f"   ratio np.copyto / engine pipelined   {add['np.copyto'] / flow:.2f}")

    dot = median_rows([dot_speed(max(2, int(5 * scale))) for _ in range(rounds)])
    print("\n3. dot 2000x2000 (target: >= 0.95 of numpy)")
    for k, v in dot.items():
        print(f"   {k:<28s} {v * 1e3:8.2f} ms")
    ratio = dot["np.dot"] / dot["engine dot iteration"]
    print(f"   ratio np.dot / engine                {ratio:.2f}")

    par = median_rows([parallel_products() for _ in range(rounds)])
    print("\n4. ten independent 1000x1000 products (target: 2 workers >= 1.6x faster than 1)")
    for k, v in par.items():
        print(f"   {k:<36s} {v * 1e3:8.2f} ms")
    for label in ("BLAS cores // workers", "BLAS 1 thread"):
        speedup = par[f"{label}, 1 worker(s)"] / par[f"{label}, 2 worker(s)"]
        print(f"   speedup 2 vs 1 worker, {label:<22s} {speedup:.2f}x")
    machine_speedup = par["numpy, 1 plain thread(s), BLAS 1"] / par[
        "numpy, 2 plain thread(s), BLAS 1"]
    print(f"   speedup 2 vs 1 plain numpy threads (the machine's own) {machine_speedup:.2f}x")

    wake = median_rows([wake_latency(max(50, int(300 * scale))) for _ in range(rounds)])
    print("\n5. blocker wake-up latency, op end -> frontend running (target: < 10 us)")
    for k, v in wake.items():
        print(f"   {k:<28s} {v * US:8.2f} us")
    for engine in ("native", "python"):
        spin, sleep = (wake[label] for e, _, label in WAITS if e == engine)
        print(f"   {engine}: sleeping / spinning          {sleep / spin:.1f}x")


if __name__ == "__main__":
    main()
