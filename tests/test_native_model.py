"""The model of compiled workers (`Profile.native`, asyncsim.model.host): ops of `ops.COMPILED`
that do not broadcast hold no GIL and pay no worker Python; every other op still does."""

from __future__ import annotations

import numpy as np
import pytest
from test_host import blocking_loop  # the same blocker-per-op loop as the host's tests

from asyncsim import Profile, predict
from asyncsim.model.profile import Cost
from asyncsim.nd.ops import COMPILED


def _profile(**kv) -> Profile:
    base = dict(name="host", t1=1e-6, t3=2e-6, workers=2, cores=8, gil=20e-6, handover=30e-6,
                costs={"cpu:*": Cost(latency=2e-6, bandwidth=4e9)})
    base.update(kv)
    return Profile(**base)


def two_chains(nd, n=30, side=40):
    xs = [nd.ones((side, side)), nd.ones((side, side))]
    nd.waitall()
    with nd.benchmark("chains"):
        for _ in range(n):
            xs = [x * 1.0001 for x in xs]
        nd.waitall()


def repeated(step, shape=(8, 8), other=None):
    """A workload: m = step(nd, m, b) ten times in region "loop", m (and b, of shape `other`)
    made by `array` (a host copy, not compiled): no other compiled op anywhere in it."""
    def workload(nd, n=10):
        m = nd.array(np.ones(shape, np.float32))
        b = nd.array(np.ones(other, np.float32)) if other else None
        nd.waitall()
        with nd.benchmark("loop"):
            for _ in range(n):
                m = step(nd, m, b)
            nd.waitall()

    return workload


sigmoids = repeated(lambda nd, m, b: nd.sigmoid(m))
dots = repeated(lambda nd, m, b: nd.dot(m, m))
biases = repeated(lambda nd, m, b: m + b, other=(8,))
# (2, 1, 4) against (2, 4, 4): not a bias's repetition, so the strided kernel, in Python
broadcasts = repeated(lambda nd, m, b: m + b, shape=(2, 4, 4), other=(2, 1, 4))


def test_compiled_chains_skip_the_gil_and_its_python():
    python = predict(two_chains, _profile()).regions["chains"]
    native = predict(two_chains, _profile(native=1)).regions["chains"]
    # each of the 60 ops saved at least its 20 us of Python, shared by two workers
    assert native < python - 60 * 20e-6 / 2


@pytest.mark.parametrize("workload", [biases, dots], ids=["bias add", "product"])
def test_bias_adds_and_products_run_compiled(workload):
    """x + b with b a dense layer's bias broadcasts as a block, and a 2-d `dot` goes through
    BLAS: the compiled worker runs both, with no worker Python."""
    python = predict(workload, _profile()).regions["loop"]
    native = predict(workload, _profile(native=1)).regions["loop"]
    assert native < python - 10 * 20e-6


@pytest.mark.parametrize("workload", [sigmoids, broadcasts], ids=["sigmoid", "strided"])
def test_other_ops_pay_as_before(workload):
    """Other ops (a sigmoid) and broadcasting ones come back to Python: the flag changes nothing
    for them."""
    python = predict(workload, _profile()).regions["loop"]
    native = predict(workload, _profile(native=1)).regions["loop"]
    assert native == pytest.approx(python, rel=1e-12)


def test_the_flag_is_a_profile_field_and_the_set_matches_the_worker():
    from realexec.cpu import worker

    assert _profile(native=1).native == 1 and _profile().native == 0
    assert worker.native_op("add_scalar", {"scalar": 1.0}, [(2,)]) is not None
    assert all(worker.native_op(name, {"scalar": 1.0, "value": 0.0}, [(2,), (2,)]) is not None
               for name in COMPILED - {"dot"})
    # a product runs compiled through numpy's BLAS where it is the ILP64 OpenBLAS numpy ships
    gemm = worker.native_op("dot", {}, [(2, 3), (3, 4)])
    assert (gemm is not None) == (worker.GEMM_ADDRESSES is not None)
    assert worker.native_op("add", {}, [(2, 3, 2), (2, 1, 2)]) is None  # strided: Python
    assert worker.native_op("add", {}, [(2, 2), (2,)])[0] == worker.BLOCK  # a bias: compiled


def test_a_spinning_idle_worker_takes_its_next_op_without_a_wake_up():
    """A compiled worker idle for less than idle_spin is still spinning: no dispatch, no wake;
    past it, it sleeps and the wake-up comes back."""
    t1, t2, t3, d, n = 1e-5, 1e-4, 2e-5, 3e-5, 5
    base = dict(name="spin", t1=t1, t3=t3, workers=1, cores=8, dispatch=d, native=1,
                costs={"cpu:*": Cost(latency=t2)})
    spinning = predict(blocking_loop, Profile(**base, idle_spin=1e-3), n=n).regions["loop"]
    asleep = predict(blocking_loop, Profile(**base, idle_spin=1e-6), n=n).regions["loop"]
    assert spinning == pytest.approx(n * (t1 + t2 + t3), rel=1e-9)
    assert asleep == pytest.approx(n * (t1 + d + t2 + t3), rel=1e-9)
