"""What a Gluon block's first calls cost the frontend beyond a later call, for
`realexec.calibrate`: the deferred initialisation of its parameters, and the trace of its first
call after `hybridize()`.

- `first_calls(bench, rounds, pause)`: in each round a fresh two-layer perceptron (`small_mlp`)
  is called three times, then hybridized and called three times, every call on one example with
  the workers held (as the issue costs are timed, so no op's kernel competes with the frontend).
  The first call makes the four parameters (their initialisers' and gradients' ops are issued
  then); the first call after `hybridize()` runs `hybrid_forward` on symbols, writes the graph
  and issues it. Each is compared with the median of the calls after it, and the ops it issued
  beyond them are counted by name, so that `calibrate` can take their issue prices off and keep
  only the Python no op carries: "frontend:init" per parameter made, "frontend:trace" per op
  traced (the `program.Call`s that `Parameter` and `asyncsim.nd.jit.trace` note).

Measured on the 2-core AMD EPYC VM with a script: a `HybridNet` of 8.1.3 took 330 us for its
first call against 60-70 us later (its deferred initialisation), and 305 us for its first call
after `hybridize()` against 50-60 us later. Times are seconds.
"""

from __future__ import annotations

from collections import Counter
from time import perf_counter_ns

import numpy as np

from realexec.calibration.issuing import _hold_all
from realexec.calibration.steady import busy, central
from realexec.calibration.training import small_mlp

AGAIN = 2  # later calls each first call is compared with


def first_calls(bench, rounds: int, pause: float) -> dict:
    """{"init": {"extra": s, "params": n, "ops": {name: count}}, "trace": {"extra": s,
    "traced": n, "ops": {name: count}}}: each first call's seconds beyond the median later call
    (`central` over rounds), the parameters it made or the ops it traced, and the ops it issued
    beyond a later call (counts per call)."""
    nd = bench.nd
    x = nd.ones((1, 16))
    nd.waitall()
    extras: dict = {"init": [], "trace": []}
    counts: dict = {"init": Counter(), "trace": Counter()}
    sizes: dict = {}
    for _ in range(rounds):
        busy(pause)
        net = small_mlp()
        for phase in ("init", "trace"):
            if phase == "trace":
                net.hybridize()
            times, issued = [], []
            release = _hold_all(bench, (x,))
            try:
                for _ in range(1 + AGAIN):
                    since = bench.mark()
                    start = perf_counter_ns()
                    net(x)
                    times.append((perf_counter_ns() - start) * 1e-9)
                    bench.flush()
                    issued.append(Counter(entry[2] for entry in bench.engine.log[since:]
                                          if entry[1] == "issue"))
            finally:
                release.set()
            nd.waitall()
            extras[phase].append(times[0] - float(np.median(times[1:])))
            counts[phase] += issued[0] - issued[1]
        sizes["init"] = len(net.collect_params())
        sizes["trace"] = sum(len(graph.ops) for graph, _ in net._graphs.values())
    return {"init": {"extra": central(extras["init"]), "params": sizes["init"],
                     "ops": {k: v / rounds for k, v in counts["init"].items()}},
            "trace": {"extra": central(extras["trace"]), "traced": sizes["trace"],
                      "ops": {k: v / rounds for k, v in counts["trace"].items()}}}
