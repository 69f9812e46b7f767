"""The prices of light results (`realexec.engine.light`, `engine="native-light"`), for
realexec.calibrate: what the model's `asyncsim.model.light` charges the frontend.

- `light`: seconds per light push, `x + 1.0` on an (8,) float32 array whose last write is done
  (lent to the compiled state, as a loop's input is), the results kept: the period of a loop of
  `n` pushes behind held workers, as `realexec.calibration.microbench.frontend` times t1;
- `light_free`: what dropping each result adds to that loop (`y = x + 1.0` over and over: each
  drop is held for the next push, whose call deletes it), the loop with drops less the loop
  that keeps its results, timed in turn;
- `light_flush`: a drop made while another is held (that one deleted in a call of its own), in
  rounds of `DROP_BATCH` results made, waited for, then dropped one after another.

Every other price of the engine (t1 of the other ops, the shipped drops, the round trip, the
host) is the shipped engine's, timed by the rest of the calibration on `engine="native"`: a
light engine takes that path for every other op. A light engine's own general path does a
look more per op (the light push's tests, its `free`'s var look-up): 0.1-0.2 us, not priced.
Times are seconds, `central` of `loops` rounds with busy pauses between them.
"""

from __future__ import annotations

from time import perf_counter_ns

from asyncsim.model.issue import DROP_BATCH
from realexec.calibration.microbench import _Bench
from realexec.calibration.steady import busy, central
from realexec.sessions import session


def light_prices(workers: int, n: int, loops: int, pause: float) -> dict:
    """{"light", "light_free", "light_flush"} seconds, and each one's spread over the rounds."""
    with session(workers=workers, engine="native-light") as nd:
        bench = _Bench(nd, workers)
        x, held = nd.ones((8,)), nd.ones((8,))
        (x + 1.0).wait_to_read()  # x lent to the state from here on
        hold_s = max(0.02, 120e-6 * n)
        calls = [lambda: x + 1.0] * n

        def dropping() -> float:
            """Seconds per `y = x + 1.0` of a loop behind held workers (the second of two)."""
            bench.hold((held,), hold_s)
            for _pass in range(2):
                start = perf_counter_ns()
                for _ in range(n):
                    y = x + 1.0  # noqa: F841 -- the last result is dropped by the next push
                seconds = (perf_counter_ns() - start) * 1e-9 / n
            nd.waitall()
            return seconds

        def flushing() -> float:
            """Seconds per drop of a done light result, each made while another is held."""
            total = 0
            for _ in range(max(1, n // DROP_BATCH)):
                kept = [x + 1.0 for _ in range(DROP_BATCH)]
                nd.waitall()
                start = perf_counter_ns()
                while kept:
                    kept.pop()
                total += perf_counter_ns() - start
            nd.waitall()
            return total * 1e-9 / (max(1, n // DROP_BATCH) * DROP_BATCH)

        samples: dict = {"light": [], "light_free": [], "light_flush": []}
        for _ in range(loops):
            busy(pause)
            kept = bench.issue_period((held,), calls, hold_s)
            samples["light"].append(kept)
            samples["light_free"].append(dropping() - kept)
            flushing()  # untimed: the path hot, as for the others
            samples["light_flush"].append(flushing())
    prices = {name: max(0.0, central(values)) for name, values in samples.items()}
    prices["spread"] = {name: [min(values), max(values)] for name, values in samples.items()}
    return prices
