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


# inputs made by `array` (a host copy, not compiled): no compiled op anywhere in these two
def sigmoids(nd, n=10):
    m = nd.array(np.ones((8, 8), np.float32))
    nd.waitall()
    with nd.benchmark("sigmoids"):
        for _ in range(n):
            m = nd.sigmoid(m)
        nd.waitall()


def dots(nd, n=10):
    m = nd.array(np.ones((8, 8), np.float32))
    nd.waitall()
    with nd.benchmark("dots"):
        for _ in range(n):
            m = nd.dot(m, m)
        nd.waitall()


def broadcasts(nd, n=10):
    # (2, 1, 4) against (2, 4, 4): not a bias's repetition, so the strided kernel, in Python
    m, row = (nd.array(np.ones((2, 4, 4), np.float32)), nd.array(np.ones((2, 1, 4), np.float32)))
    nd.waitall()
    with nd.benchmark("broadcasts"):
        for _ in range(n):
            m = m + row
        nd.waitall()


def test_compiled_chains_skip_the_gil_and_its_python():
    python = predict(two_chains, _profile()).regions["chains"]
    native = predict(two_chains, _profile(native=1)).regions["chains"]
    # each of the 60 ops saved at least its 20 us of Python, shared by two workers
    assert native < python - 60 * 20e-6 / 2


def biases(nd, n=10):
    m, row = nd.array(np.ones((8, 8), np.float32)), nd.array(np.ones(8, np.float32))
    nd.waitall()
    with nd.benchmark("biases"):
        for _ in range(n):
            m = m + row
        nd.waitall()


def test_a_bias_add_runs_compiled():
    """x + b with b a dense layer's bias broadcasts as a block: the compiled worker runs it."""
    python = predict(biases, _profile()).regions["biases"]
    native = predict(biases, _profile(native=1)).regions["biases"]
    assert native < python - 10 * 20e-6


def test_products_run_compiled_too():
    """A product (2-d `dot`) is run by the compiled worker through BLAS: no worker Python."""
    python = predict(dots, _profile()).regions["dots"]
    native = predict(dots, _profile(native=1)).regions["dots"]
    assert native < python - 10 * 20e-6


@pytest.mark.parametrize("workload, region", [(sigmoids, "sigmoids"),
                                              (broadcasts, "broadcasts")])
def test_other_ops_pay_as_before(workload, region):
    """Other ops (a sigmoid) and broadcasting ones come back to Python: the flag changes nothing
    for them."""
    python = predict(workload, _profile()).regions[region]
    native = predict(workload, _profile(native=1)).regions[region]
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
