"""The prices of light results (`realexec.engine.light`, `engine="native-light"`), for
realexec.calibrate: what the model's `asyncsim.model.light` charges the frontend.

- `light`: seconds per light push with the drop of the result before it, `y = x + 1.0` on an
  (8,) float32 array whose last write is done (lent to the compiled state): the period of a loop
  of `n` of them, the workers free (each result's op is done when the next push deletes it, as
  in a loop whose worker keeps up), timed right after an untimed loop of its own;
- `light_flush`: a drop made while another is held: the deletion of that one, which the next
  push makes in a call of its own before its own (a drop itself is a list's append), in rounds
  of `DROP_BATCH` results made, waited for, dropped one after another, then one push: the
  round's time less a push's (`light`, of the same loop), over its `DROP_BATCH - 1` deletions.

Why not behind held workers, as `realexec.calibration.microbench.frontend` times t1: there every
result's op waits, so each drop goes onto the late list and each push takes a buffer nobody
gave back, which a loop never does: the held loop ran 2.2-2.8 us a push where the same loop with
its worker draining ran 1.7-2.3 (2-core AMD EPYC VM). A drop with no push after it (before a
blocker) is priced with nothing; the blocker's look at it is inside t3.

Every other price of the engine (t1 of the other ops, the shipped drops, the round trip, the
host) is the shipped engine's, timed by the rest of the calibration on `engine="native"`: a
light engine takes that path for every other op. Times are seconds, `central` of `loops` rounds
with busy pauses between them.
"""

from __future__ import annotations

from time import perf_counter_ns

from asyncsim.model.issue import DROP_BATCH
from realexec.calibration.steady import busy, central
from realexec.sessions import session


def light_prices(workers: int, n: int, loops: int, pause: float) -> dict:
    """{"light", "light_flush"} seconds, and each one's spread over the rounds."""
    with session(workers=workers, engine="native-light") as nd:
        x = nd.ones((8,))
        (x + 1.0).wait_to_read()  # x lent to the state from here on

        def loop() -> float:
            """Seconds per `y = x + 1.0` of a loop (the second of two, back to back)."""
            for _pass in range(2):
                start = perf_counter_ns()
                for _ in range(n):
                    y = x + 1.0  # noqa: F841 -- the last result is dropped by the next push
                seconds = (perf_counter_ns() - start) * 1e-9 / n
            nd.waitall()
            return seconds

        def flushing() -> float:
            """Seconds per round: `DROP_BATCH` done light results dropped one after another,
            then the push that deletes all but the last."""
            total, rounds = 0, max(1, n // DROP_BATCH)
            for _ in range(rounds):
                kept = [x + 1.0 for _ in range(DROP_BATCH)]
                nd.waitall()
                start = perf_counter_ns()
                while kept:
                    kept.pop()
                y = x + 1.0  # noqa: F841 -- its push makes the deletions
                total += perf_counter_ns() - start
            nd.waitall()
            return total * 1e-9 / rounds

        samples: dict = {"light": [], "light_flush": []}
        for _ in range(loops):
            busy(pause)
            samples["light"].append(loop())
            flushing()  # untimed: the path hot, as for the others
            samples["light_flush"].append(
                max(0.0, flushing() - samples["light"][-1]) / (DROP_BATCH - 1))
    prices = {name: central(values) for name, values in samples.items()}
    prices["spread"] = {name: [min(values), max(values)] for name, values in samples.items()}
    return prices
