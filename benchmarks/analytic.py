"""How fast is the vectorised pipeline solver? `python benchmarks/analytic.py [N]`

Times `asyncsim.model.analytic.pipeline` on N ops (default 10 million) with random exponential
costs, without blockers and with a blocker after about 1 op in 100 (and after every op), against a
plain `np.cumsum` of the same length: the floor for any O(n) numpy answer. Each time is the best
of a few repeats, measured side by side in this run. For scale it also times the op-by-op Python
loop on 10**5 ops and extrapolates it to N.
"""

import sys
import time

import numpy as np

from asyncsim.model.analytic import pipeline


def best_of(repeats, function):
    function()  # first call pays for page faults of fresh arrays; do not count it
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def python_loop(t1, t2, t3, sync):
    frontend_time = lane_free = 0.0
    for issue, run, blocked in zip(t1, t2, sync, strict=True):
        issue_end = frontend_time + issue
        lane_free = max(lane_free, issue_end) + run
        frontend_time = issue_end
        if blocked:
            frontend_time = max(frontend_time, lane_free) + t3
    return max(frontend_time, lane_free) + t3


def main(n=10**7, repeats=3):
    rng = np.random.default_rng(0)
    t1 = rng.exponential(10e-6, n)
    t2 = rng.exponential(10e-6, n)
    t3 = 20e-6
    cases = {
        "no blockers": None,
        "blocker every ~100 ops": rng.random(n) < 0.01,
        "blocker after every op": np.ones(n, dtype=bool),
    }
    cumsum = best_of(repeats, lambda: np.cumsum(t1))
    print(f"n = {n:,} ops; np.cumsum: {cumsum * 1e3:.1f} ms")
    for label, sync in cases.items():
        seconds = best_of(repeats, lambda sync=sync: pipeline(t1, t2, t3, sync))
        print(f"pipeline, {label:24s} {seconds * 1e3:8.1f} ms  = {seconds / cumsum:5.1f} x cumsum")

    small = 10**5
    sync = (rng.random(small) < 0.01).tolist()
    loop = best_of(1, lambda: python_loop(t1[:small].tolist(), t2[:small].tolist(), t3, sync))
    print(f"Python loop, {small:,} ops: {loop * 1e3:.1f} ms, about {loop * n / small:.1f} s for n")


if __name__ == "__main__":
    main(int(float(sys.argv[1])) if len(sys.argv) > 1 else 10**7)
