"""Which compiled worker runs an op that another op's completion makes ready
(`asyncsim.model.wakes.WakeQueue`): the worker that completed it, which loops back to the queue at
once, while the engine still wakes a sleeping worker when none spins (it finds nothing). So a
chain of ops queued behind a product runs on the product's worker, as the engine runs it, and
`Profile.after_gemm` (per worker) applies to each of them."""

from __future__ import annotations

import pytest

from asyncsim import Profile, predict
from asyncsim.model.profile import Cost

DOT_S, RELU_S, WAKE_S = 1e-3, 10e-6, 5e-6


def chain(nd, k=10):
    """A product and `k` relus after it, all issued before the product ends."""
    a = nd.ones((64, 64))
    nd.waitall()
    with nd.benchmark("chain"):
        h = nd.dot(a, a)
        for _ in range(k):
            h = nd.relu(h)
        nd.waitall()


def _profile(**kv) -> Profile:
    nbytes = 2 * 64 * 64 * 4  # a relu reads and writes 16 KiB
    base = dict(name="choice", t1=1e-6, t3=2e-6, workers=2, cores=8, native=1, wake=WAKE_S,
                costs={"cpu:*": Cost(bandwidth=nbytes / RELU_S),
                       "cpu:dot": Cost(peak=2 * 64**3 / DOT_S)})
    base.update(kv)
    return Profile(**base)


@pytest.mark.parametrize("idle_spin", [0.0, 50e-6, 1.0])
def test_a_chain_behind_a_product_runs_on_the_products_worker(idle_spin):
    trace = predict(chain, _profile(idle_spin=idle_spin))
    lanes = {s.name: set() for s in trace.spans_of(kind="exec")}
    for s in trace.spans_of(kind="exec"):
        lanes[s.name].add(s.lane)
    assert len(lanes["dot"]) == 1
    assert lanes["relu"] == lanes["dot"]


def test_each_release_wakes_a_sleeper_when_none_spins():
    """Workers that never spin: each of the ten releases costs its worker a wake-up (the
    sleeper woken finds nothing), on the chain's critical path."""
    paid = predict(chain, _profile(idle_spin=0.0)).regions["chain"]
    free = predict(chain, _profile(idle_spin=0.0, wake=0.0)).regions["chain"]
    # (the frontend's push of the product wakes one too, while the product runs: off the path)
    assert paid - free == pytest.approx(10 * WAKE_S, rel=1e-6)


def test_a_spinning_worker_is_not_woken():
    """Workers that spin for a second: nobody is asleep, no release pays a wake-up."""
    paid = predict(chain, _profile(idle_spin=1.0)).regions["chain"]
    free = predict(chain, _profile(idle_spin=1.0, wake=0.0)).regions["chain"]
    assert paid == pytest.approx(free, rel=1e-12)


def test_a_woken_sleeper_spins_and_is_not_woken_again_at_once():
    """Workers that spin 50 us: the first release wakes the sleeper, which spins 50 us, so the
    releases of the next 50 us wake nobody: fewer wake-ups than releases."""
    paid = predict(chain, _profile(idle_spin=50e-6)).regions["chain"]
    free = predict(chain, _profile(idle_spin=50e-6, wake=0.0)).regions["chain"]
    wakes = (paid - free) / WAKE_S
    assert 1 <= round(wakes) < 10
