"""Streaming ops right after a product, on the engine: how much slower, op by op, and for how long.

    python benchmarks/after_gemm.py [--rounds R]

1. The chain calibration times (`realexec.calibration.aftergemm`): a 1024x512x2048 product (or a
   `* 1.0` of its result), then relu, `+ 1.0`, relu, `+ 1.0` on the (1024, 2048) result, waited
   for at the end; each follower's median exec time behind the product over the same behind the
   `* 1.0`, and the factor calibration derives (`Profile.after_gemm`).
2. How long it lasts: the product waited for, then the frontend busy for a gap (0, 2, 10, 50 ms),
   then `+ 1.0` and a relu; their times against the same after a `* 1.0` and the same gap. The
   model stretches the streaming ops that start within `asyncsim.model.places.AFTER_GEMM_S` of a
   product on their worker.
3. A dense layer's chains, in turn: the product, then `+ b` (a bias over the rows) and relu in
   either order, or the calibration's relu, `+ 1.0`, relu, `+ 1.0`, or `+ b`, relu, relu; each
   op's median exec time by its place in its chain: where the same op runs slower than
   elsewhere, which `after_gemm` (one factor behind every product) does not describe
   (`notes/ACCURACY.md`).
The chains without a product run first, after a pause (`aftergemm.PAUSE_S`) that puts every
product before out of reach (`aftergemm.followers`, which calibration runs too).

Medians over R rounds of 20 chains each way; ratios taken side by side in one run, with the
machine, never asserted. Units: milliseconds.
"""

from __future__ import annotations

import argparse
import statistics

import realexec
from asyncsim.model.places import AFTER_GEMM_S
from realexec.calibration.aftergemm import (
    COLS,
    FOLLOWERS,
    INNER,
    ROWS,
    after_gemm,
    arrays,
    followers,
)
from realexec.calibration.microbench import _Bench
from realexec.frontend import machine

GAPS = (0.0, 0.002, 0.01, 0.05)
CHAINS = 20
LAYER_CHAINS = {"calibration's": ("relu", "+1", "relu", "+1"), "bias, relu": ("+b", "relu"),
                "relu, bias": ("relu", "+b"), "bias, relu, relu": ("+b", "relu", "relu")}


def layer_chains(nd, bench, rounds: int) -> dict:
    """(chain, place) -> exec seconds of that op, over `rounds` x CHAINS turns of every chain."""
    x, w, _ = arrays(nd)
    b = nd.zeros((COLS,))
    nd.waitall()
    times: dict = {}
    for _ in range(rounds * CHAINS):
        for label, ops in LAYER_CHAINS.items():
            since = bench.mark()
            h = nd.dot(x, w, transpose_b=True)
            for op in ops:
                h = nd.relu(h) if op == "relu" else h + (1.0 if op == "+1" else b)
            h.wait_to_read()
            spans = [b_ - a for _, nm, a, b_ in bench.spans(since, "exec") if nm != "dot"]
            for place, seconds in enumerate(spans):
                times.setdefault((label, place), []).append(seconds)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    chain: dict[int, list[float]] = {}
    factors = []
    lasting: dict[tuple[float, str], list[float]] = {}
    with realexec.session() as nd:
        bench = _Bench(nd, nd._backend.engine.workers)
        operands = arrays(nd)
        for _ in range(args.rounds):
            alone, after = (followers(bench, operands, p, CHAINS) for p in (False, True))
            for i in range(len(FOLLOWERS)):
                ratio = (statistics.median(r[i] for r in after)
                         / statistics.median(r[i] for r in alone))
                chain.setdefault(i, []).append(ratio)
            factors.append(after_gemm(bench, CHAINS)["after_gemm"])
            for gap in GAPS:
                alone, after = (followers(bench, operands, p, CHAINS, gap, ("add_scalar", "relu"))
                                for p in (False, True))
                for i, name in enumerate(("add_scalar", "relu")):
                    lasting.setdefault((gap, name), []).append(
                        statistics.median(r[i] for r in after)
                        / statistics.median(r[i] for r in alone))
        layers = layer_chains(nd, bench, args.rounds)
    print(f"\n1. the followers behind a {ROWS}x{INNER}x{COLS} product against behind a * 1.0 "
          f"(median over {args.rounds} rounds, range)")
    for i, name in enumerate(FOLLOWERS):
        print(f"   {i + 1}. {name:<11s} {statistics.median(chain[i]):.2f}x   "
              f"{min(chain[i]):.2f}-{max(chain[i]):.2f}x")
    print(f"   calibration's factor (Profile.after_gemm): {statistics.median(factors):.2f}   "
          f"{min(factors):.2f}-{max(factors):.2f}")
    print(f"\n2. with the frontend busy between the product and them (the model: "
          f"{AFTER_GEMM_S * 1e3:.0f} ms)")
    for gap in GAPS:
        print(f"   {gap * 1e3:4.0f} ms   " + "   ".join(
            f"{name} {statistics.median(lasting[(gap, name)]):.2f}x" for name in
            ("add_scalar", "relu")))
    print("\n3. a dense layer's chains in turn behind the product: each op's median ms by place")
    for label, ops in LAYER_CHAINS.items():
        print(f"   {label:<17s} " + "   ".join(
            f"{op} {statistics.median(layers[(label, k)]) * 1e3:.3f}"
            for k, op in enumerate(ops)))


if __name__ == "__main__":
    main()
