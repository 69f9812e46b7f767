"""What dropped results cost or save the frontend later, for realexec.calibrate: a buffer given
back at a later push (`Profile.reclaim`), and an output that takes a kept result (`Profile.take`).

When the op reading a dropped result is still running, the compiled engine gives its buffer back
at a later push (`Profile.reclaim`).

`reclaim(bench, n, loops, pause)` times two loops on running workers (none held), each dropping
the previous result as it issues the next op:
- a chain, `y = y + 1.0`: the op that reads the dropped `y` is still running when the drop comes,
  so the deletion waits, and a later push, finding that op finished, gives the buffer back
  (`NativeEngine._run_frees`);
- the same op on a fixed input, `y = x + 1.0`: the dropped result's op finished a period ago, so
  the drop gives its buffer back at once, inside the drop (`Profile.free`).
The model prices both drops at `free`, so the chain's extra time per op is what a push pays to
give a buffer back.

The arrays are sized so that an op outlasts the frontend's Python after its push but not a whole
period (a shorter op is done before the drop, a longer one makes the chain wait for its worker):
the first of `SIZES` at which nearly every push of a probe chain gave a buffer back. On the
Python engine, whose workers give buffers back (`Profile.release`), it returns 0.

`take(bench, n, loops, pause)`: what an op saves the frontend when its fresh output takes a
result that a run of drops kept (`realexec.cpu.drops`: a list pop, the var whole) instead of a
buffer from the pool (its lock, counts and memory sample, and a new var). The issue costs are
timed with outputs from the pool (`microbench.frontend` keeps them), so the model takes this off
an op whose output it finds kept. Units: seconds, elements.
"""

from __future__ import annotations

from time import perf_counter_ns

from asyncsim.model.issue import DROP_BATCH
from realexec.calibration.steady import busy, central

# float32 elements: ops of ~0.5-5 us here, and two longer ones for a frontend in its slow mode
# (its Python twice as slow for minutes: ops of 5 us were done before most drops, 0.34 of a
# chain's drops waiting, 2-core AMD EPYC VM)
SIZES = (4096, 8192, 16384, 32768, 65536, 131072, 262144)
WAITED = 0.8  # the share of a probe chain's pushes that must give a buffer back, for its size
PROBE = 200  # ops in a probe chain


def _given_back_share(nd, engine, size: int) -> float:
    """The share of a chain's pushes on `size` elements that gave back a buffer whose drop had
    waited (the engine's look at its pending deletions, counted by a wrapper)."""
    x = nd.ones((size,))
    nd.waitall()
    look, gave = engine._run_frees, [0]
    wrapped = engine.__dict__.get("_run_frees")  # another wrapper, kept (else the method)

    def counted(every=False):
        pending = len(engine._frees)
        look(every)
        gave[0] += len(engine._frees) < pending

    engine._run_frees = counted
    try:
        y = x + 1.0
        for _ in range(PROBE):
            y = y + 1.0
    finally:
        if wrapped is None:
            del engine._run_frees  # the method again, with no bound copy kept on the engine
        else:
            engine._run_frees = wrapped
    nd.waitall()
    return gave[0] / PROBE


def reclaim(bench, n: int, loops: int, pause: float = 0.0) -> dict:
    """{"reclaim": seconds a push adds to give back one buffer whose op finished after the
    drop, "size": elements of the ops timed, "waited": the share of a probe chain's pushes that
    gave back a buffer whose drop had waited, "chain", "fixed": seconds per op of the two
    loops}."""
    nd, engine = bench.nd, bench.engine
    if not hasattr(engine, "_frees"):
        return {"reclaim": 0.0, "size": 0, "waited": 0.0, "chain": 0.0, "fixed": 0.0}
    shares = {}
    for size in SIZES:
        shares[size] = _given_back_share(nd, engine, size)
        if shares[size] >= WAITED:
            break
    size = max(shares, key=shares.get) if max(shares.values()) < WAITED else size
    x = nd.ones((size,))
    nd.waitall()

    def period(chained: bool) -> float:
        """Seconds per op of the loop; the result before is dropped at each op."""
        y = x + 1.0
        start = perf_counter_ns()
        for _ in range(n):
            y = (y if chained else x) + 1.0
        seconds = (perf_counter_ns() - start) * 1e-9 / n
        nd.waitall()
        return seconds

    chains, fixeds, extra = [], [], []
    for _ in range(loops):  # alternated: the difference, not the machine's speed, is wanted
        busy(pause)
        chains.append(period(chained=True))
        fixeds.append(period(chained=False))
        extra.append(chains[-1] - fixeds[-1])
    return {"reclaim": max(0.0, central(extra)), "size": size, "waited": shares[size],
            "chain": central(chains), "fixed": central(fixeds)}


def take(bench, n: int, loops: int, pause: float = 0.0) -> dict:
    """{"take": seconds an issue saves when its output takes a kept result, "kept", "pool":
    seconds per issue of `x + 1.0` on 8 elements, workers held, each output a result the last
    run of drops kept, or one from the pool}. Each timed burst is a run's worth (`DROP_BATCH`)
    right after an untimed one of its own (the run dropped: kept, or given back by a blocker
    to the pool, whose free buffers are then of its shape); the two alternate, and the
    difference of their central times is the saving (0 on an engine that keeps none)."""
    nd = bench.nd
    if getattr(bench.backend, "_drops", None) is None:  # the Python engine keeps none
        return {"take": 0.0, "kept": 0.0, "pool": 0.0}
    x = nd.ones((8,))
    nd.waitall()

    def burst(kept: bool) -> float:
        made = [x + 1.0 for _ in range(DROP_BATCH)]
        nd.waitall()
        del made  # a full run of done results: kept
        if not kept:
            nd.waitall()  # a blocker gives them back to the pool
        bench.hold((x,), 2e-3)
        out = []
        start = perf_counter_ns()
        for _ in range(DROP_BATCH):
            out.append(x + 1.0)
        seconds = (perf_counter_ns() - start) * 1e-9 / DROP_BATCH
        nd.waitall()
        return seconds

    kept, pool = [], []
    for _ in range(loops):
        busy(pause)
        for _ in range(max(1, n // DROP_BATCH)):  # alternated, as in `reclaim`
            kept.append(burst(True))
            pool.append(burst(False))
    saving = central(pool) - central(kept)
    return {"take": max(0.0, saving), "kept": central(kept), "pool": central(pool)}
