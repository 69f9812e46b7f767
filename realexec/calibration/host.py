"""Microbenchmarks of the host's effects on the real engine, for `realexec.calibrate`: kernels
that run at once, a busy frontend, a fresh engine's first op, blockers whose code is cold, and
what a frontend asleep in a blocker costs the workers it waits for. Like
`realexec.calibration.microbench` (whose `_Bench` they take, where they take one), none of them
runs a scenario of `asyncsim.lab.scenarios`.

- `concurrency`: the same op on W workers at once against one at a time (memory bandwidth shared
  by the workers; compute-bound ops as a check); `busy_frontend`: the frontend's issue period
  while W workers run kernels, against one with them asleep.

- `fresh`: fresh sessions, each after `pause` seconds of every core kept busy and a
  `gc.collect()` (as benchmarks/accuracy.py prepares a measured run: the spin and the collection
  leave the frontend's code and data out of the caches, which costs a first op and a first print
  tens of microseconds more than a collection alone). In each, the first op's round trip
  (`nd.ones((8,))`, then `wait_to_read`) against the same round trip done again once the engine
  is warm: `startup`, the difference (the frontend's push path and the workers' threads never
  ran; caches are cold). Then the first print (`print(x)`, written to a StringIO), asnumpy and
  item of that session, each on an array of one of `sizes`: the chapters call a blocker like
  these once per region, not in a loop, so its code is cold when it runs, as here (a first
  print of a small array costs several times a repeated one). Then `first_kind`: the first
  issue of each of FIRST_KINDS (a binary op, an activation, a reduction: kinds the session has
  not issued) beyond the faster of its next two (`central` over kinds and sessions; a first
  `x * x` took 26 us more, a relu, sum or product 9-11 us, in sessions like these on the 2-core
  AMD EPYC VM: a program's first op of a kind runs its frontend code cold, where `startup`
  covers only its first op). Then each of the blockers `again`, AGAIN
  times, each after a few ops: what a later blocker of the kind costs in the same program (a print
  of a small array after a dense layer's ops took 72-80 us here, the session's first 170-260,
  one repeated back to back 50-70; 2-core AMD EPYC VM); later prints also of PRINTED's small
  arrays. A print's point is the bytes of the values it formats (`printed_bytes`): repeated back
  to back, one of 2 float32 values took 26 us, 16 values 44, 64 values 120, 1000 values 1.6 ms,
  and one of 2**12 to 2**21 values 31 us (summarised: 6 shown; same VM).
- `blocked`: a backlog of `n` small ops (`x + 1.0` on `size` elements: a kernel of a microsecond
  or two, the kind of op whose per-op costs add up) drained by one worker while the others are
  held, once with the frontend asleep in a blocker on the last of them and once with it asleep
  in `time.sleep` (no blocker) until they are done. The worker that finishes an op tests the
  sleeping blocker's condition (a blocker woken after every op to test its own, as the engine
  once did, cost 2.5 us per op here). `recheck`: the difference of the per-op periods (`central`
  over rounds that alternate the two).
- `wake`: what waking a sleeping thread costs the thread that wakes it: a put into the engine's
  kind of queue (`queue.SimpleQueue`) with a thread asleep in its get, against one with nobody
  waiting. No engine: the cost is the operating system's (on a virtual machine, an interrupt to
  the other virtual CPU).
- the GIL's hand-over to a sleeping thread is measured in `realexec.calibration.gil`.

Units: seconds. Times come from the engine's own log, as in a measured Trace.
"""

from __future__ import annotations

import gc
import io
import threading
import time
from queue import SimpleQueue
from time import perf_counter_ns

import numpy as np

from asyncsim.model.cost import printed_bytes
from realexec.calibration.microbench import _Bench
from realexec.calibration.steady import busy, central


def concurrency(bench: _Bench, make, count: int, name: str, rounds: int = 5) -> tuple:
    """(one at a time, W at once): median exec seconds of `make()` ops, `count` per worker, in
    alternating rounds; the pair from the round with the median ratio (load from elsewhere
    hitting one half of a round moves its ratio, not the median round's).

    W at once: the ops are queued while every worker sleeps in a held op, so each worker finds
    work when it returns and none waits to be woken.

    Both halves keep their outputs, so each op writes a buffer of its own in both, the same
    buffers in the same order, and running at once is the only difference. One at a time used
    to drop each output, so its ops took turns on two warm buffers while the W at once wrote
    `count * W` others, cold: what cold outputs cost counted as crowding. `x + 1` on 16 MiB
    arrays, two workers (2-core Xeon VM), three rounds each way: 0.93-1.18 ms alone against
    1.54-1.89 ms together as it was (a crowd of 0.6-0.7), 1.40-1.66 against 1.45-1.71 with the
    outputs kept in both (0.03-0.05); the model prices cold outputs apart
    (`asyncsim.model.caches`), so it paid for them twice."""
    nd = bench.nd
    pairs = []
    for _ in range(rounds):
        result = {}
        for together in (False, True):
            since = bench.mark()
            kept = []
            if together:
                bench.hold((), 0.005)
            for _ in range(count * bench.workers):
                y = make()
                kept.append(y)
                if not together:
                    y.wait_to_read()
            nd.waitall()
            del kept, y
            spans = bench.spans(since, "exec", name)
            result[together] = float(np.median([b - a for _, _, a, b in spans]))
        pairs.append((result[False], result[True]))
    pairs.sort(key=lambda pair: pair[1] / pair[0])
    return pairs[len(pairs) // 2]


def busy_frontend(bench: _Bench, n: int, repeats: int, size: int) -> tuple[float, float]:
    """Issue period of tiny ops (kept pending) with workers asleep vs all W running kernels."""
    nd = bench.nd
    out = []
    for running in (False, True):
        samples = []
        for _ in range(repeats):
            if running:
                bench.hold((), 0.002)  # workers find the long ops queued when they return
                longs = [nd.random.normal(shape=(size,)) for _ in range(bench.workers)]
                x = longs[0][0:8]  # reads a running op's output: queued until it is done
                time.sleep(4e-3)  # let the workers start
            else:
                x = nd.ones((8,))
                nd.waitall()
                bench.hold((x,), max(0.02, 60e-6 * n))
            kept = []
            start = perf_counter_ns()
            for _ in range(n):
                kept.append(x + 1.0)
            samples.append((perf_counter_ns() - start) * 1e-9 / n)
            nd.waitall()
            del kept, x
            if running:
                del longs
        out.append(float(np.median(samples)))
    return out[0], out[1]



AGAIN = 4  # later calls of each blocker kind timed per fresh session
PRINTED = (2, 16, 64)  # elements of the small arrays printed again, every value formatted


def fresh(workers: int, sizes, rounds: int, warm: int = 5, pause: float = 0.0) -> dict:
    """{"startup": seconds, "first": [...], "warm": [...], "blockers": {kind: [(nbytes, s)]},
    "again": {kind: [(nbytes, s)]}}."""
    from realexec.sessions import session

    firsts, warms, kinds = [], [], []
    cold: dict = {"print": [], "asnumpy": [], "item": []}
    later: dict = {"print": [], "asnumpy": [], "item": []}
    shown = io.StringIO()
    for _ in range(rounds):
        for n in sizes:
            busy(pause)
            gc.collect()
            with session(workers=workers, engine="native") as nd:
                start = perf_counter_ns()
                nd.ones((8,)).wait_to_read()
                firsts.append((perf_counter_ns() - start) * 1e-9)
                again = []
                for _ in range(warm):
                    start = perf_counter_ns()
                    nd.ones((8,)).wait_to_read()
                    again.append((perf_counter_ns() - start) * 1e-9)
                warms.append(float(np.median(again)))
                x, one = nd.ones((n,)), nd.ones((1,))
                nd.waitall()
                for kind, call in (("print", lambda: print(x, file=shown)),  # noqa: B023
                                   ("asnumpy", x.asnumpy), ("item", one.item)):
                    start = perf_counter_ns()
                    call()
                    seconds = (perf_counter_ns() - start) * 1e-9
                    cold[kind].append((_priced_bytes(kind, n), seconds))
                kinds += _first_kinds(nd, one)
                # the same blockers again, each after a few ops (done, so that only the call is
                # timed): a program's later prints, once its first has brought the code in (the
                # second costs more than the ones after it: AGAIN of them, the median kept);
                # prints also of PRINTED's small arrays, whose every value numpy formats
                for kind, m in [(k, m) for _ in range(AGAIN) for k in later
                                for m in ((n, *PRINTED) if k == "print" else (n,))]:
                    base = x if m == n else nd.ones((m,))
                    y, s = nd.relu(base * 2.0 + 1.0), one * 2.0 + 1.0
                    nd.waitall()
                    call = {"print": lambda: print(y, file=shown),  # noqa: B023
                            "asnumpy": y.asnumpy, "item": s.item}[kind]
                    start = perf_counter_ns()
                    call()
                    seconds = (perf_counter_ns() - start) * 1e-9
                    later[kind].append((_priced_bytes(kind, m), seconds))
    blockers = {kind: _medians(points) for kind, points in cold.items()}
    startup = max(0.0, float(np.median(np.array(firsts) - np.array(warms))))
    return {"startup": startup, "first": firsts, "warm": warms, "blockers": blockers,
            "again": {kind: _medians(points) for kind, points in later.items()},
            "first_kind": max(0.0, central(kinds)), "first_kinds": kinds}


# op kinds a fresh session has not issued when `_first_kinds` runs (the later blockers' ops come
# after it): a binary op, an activation, a reduction
FIRST_KINDS = (lambda nd, a: a * a, lambda nd, a: nd.relu(a), lambda nd, a: a.sum())


def _first_kinds(nd, a) -> list[float]:
    """Seconds each of FIRST_KINDS' first issue takes beyond the faster of its next two."""
    extra, kept = [], []
    for make in FIRST_KINDS:
        times = []
        for _ in range(3):
            start = perf_counter_ns()
            kept.append(make(nd, a))
            times.append((perf_counter_ns() - start) * 1e-9)
        extra.append(times[0] - min(times[1:]))
    nd.waitall()
    return extra


def _priced_bytes(kind: str, n: int) -> int:
    """The bytes a blocker of `kind` on `n` float32 elements is priced by: item's one element,
    the values a print formats (`printed_bytes`), asnumpy's whole copy."""
    if kind == "item":
        return 4
    return printed_bytes((n,), 4 * n) if kind == "print" else 4 * n


def _medians(points) -> list:
    """(nbytes, median seconds) per distinct nbytes."""
    by: dict = {}
    for nbytes, seconds in points:
        by.setdefault(nbytes, []).append(seconds)
    return [(nbytes, float(np.median(v))) for nbytes, v in sorted(by.items())]


def blocked(bench, n: int, rounds: int, size: int, pause: float = 0.0) -> dict:
    """Per-op period of a backlog drained by all workers, the frontend asleep in a blocker on it
    or asleep in time.sleep; {"asleep": s, "none": s, "recheck": s} (medians over rounds)."""
    nd = bench.nd
    x = nd.ones((size,))
    nd.waitall()
    hold_s = 0.004 + 10e-6 * n  # longer than the issue loop and the blocker's spin
    periods: dict = {"asleep": [], "none": []}
    for _ in range(rounds):
        busy(pause)
        for mode in periods:
            since = bench.mark()
            bench.hold((x,), hold_s)
            kept = [x + 1.0 for _ in range(n)]
            if mode == "none":
                time.sleep(hold_s + 30e-6 * n)
            kept[-1].wait_to_read()
            spans = bench.spans(since, "exec", "add_scalar")
            periods[mode].append((spans[-1][3] - spans[0][2]) / len(spans))
            del kept
            nd.waitall()
    asleep, alone = (central(periods[m]) for m in ("asleep", "none"))
    differences = np.array(periods["asleep"]) - np.array(periods["none"])
    return {"asleep": asleep, "none": alone, "recheck": max(0.0, central(differences))}


def wake(rounds: int, idle: float = 5e-4, bursts: int = 1, pause: float = 0.0) -> dict:
    """Seconds a `SimpleQueue.put` takes when it wakes a thread asleep in `get` (after `idle`
    seconds asleep, about as long as a worker idles between ops), and when nobody waits;
    {"woke": s, "alone": s, "wake": the difference}: `central` of `rounds` puts of each kind,
    taken in `bursts` with `pause` seconds between them."""
    woken: SimpleQueue = SimpleQueue()
    alone: SimpleQueue = SimpleQueue()

    def sleeper():
        while woken.get() is not None:
            pass

    thread = threading.Thread(target=sleeper, daemon=True, name="calibrate-wake")
    thread.start()
    try:
        puts, plain = [], []
        for k in range(rounds):
            if k % max(1, rounds // bursts) == 0:
                busy(pause)
            time.sleep(idle)
            start = perf_counter_ns()
            woken.put(1)
            puts.append(perf_counter_ns() - start)
            start = perf_counter_ns()
            alone.put(1)
            plain.append(perf_counter_ns() - start)
    finally:
        woken.put(None)
        thread.join()
    woke_s, alone_s = central(puts) * 1e-9, central(plain) * 1e-9
    return {"woke": woke_s, "alone": alone_s, "wake": max(0.0, woke_s - alone_s)}
