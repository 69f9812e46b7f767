"""The GPU's host side in the model (`gpu_issue`, `gpu_wait`, the "gpu->host" readback link) and
the GPU part of calibration that measures them, run under the CUDA simulator (its numbers mean
nothing; the tests check what is measured and how the profile uses it)."""

import math

import pytest

from asyncsim import Profile, predict
from asyncsim.model.profile import READBACK, Cost, ProfileError
from asyncsim.nd import ops
from realexec.calibration.gpu import QUICK_GPU, host_costs, with_gpu
from realexec.gpu import kernels as gpu

pytestmark = pytest.mark.cudasim

T1, T3, LANE = 1e-5, 2e-5, 1e-4


def _profile(**kv) -> Profile:
    base = dict(name="gpu-host", t1=T1, t3=T3, workers=1, gpus=1,
                costs={"cpu:*": Cost(latency=LANE), "gpu:*": Cost(latency=LANE)},
                links={k: Cost(latency=LANE) for k in ("cpu->gpu", "gpu->cpu", "gpu->gpu")})
    base.update(kv)
    return Profile(**base)


def round_trip(nd):
    x = nd.ones((4,), ctx=nd.gpu(0))
    with nd.benchmark("trip"):
        y = x + 1
        y.wait_to_read()
    with nd.benchmark("late read"):
        y.asnumpy()  # nothing pending: no wait for the GPU


def cpu_trip(nd):
    x = nd.ones((4,))
    with nd.benchmark("trip"):
        y = x + 1
        y.wait_to_read()


def test_gpu_issue_is_added_to_ops_on_a_gpu_only():
    """gpu_issue lengthens the issue span of an op on a GPU by exactly its value, and leaves
    an op on the CPU alone."""
    plain, slower = _profile(), _profile(gpu_issue=7e-6)
    for workload, extra in ((round_trip, 7e-6), (cpu_trip, 0.0)):
        spans = [predict(workload, p).spans_of("frontend", "issue") for p in (plain, slower)]
        added = [b.duration - a.duration for a, b in zip(*spans, strict=True)]
        assert all(math.isclose(d, extra, abs_tol=1e-12) for d in added)


def test_gpu_wait_is_paid_by_a_blocker_that_waited_for_gpu_work():
    """A wait_to_read that waited for a GPU op pays gpu_wait on top of t3; a later asnumpy of
    the same (finished) array does not, and neither does a blocker on CPU work."""
    wait = 3e-5
    plain, slower = predict(round_trip, _profile()), predict(round_trip, _profile(gpu_wait=wait))
    assert math.isclose(slower.regions["trip"] - plain.regions["trip"], wait, rel_tol=1e-9)
    assert math.isclose(slower.regions["late read"], plain.regions["late read"], rel_tol=1e-12)
    cpu = [predict(cpu_trip, _profile(gpu_wait=w)).regions["trip"] for w in (0.0, wait)]
    assert cpu[0] == cpu[1]


def test_gpu_settle_is_paid_by_every_waitall_of_a_gpu_program():
    """In a program that uses a GPU each waitall pays gpu_settle (the engine synchronises every
    stream), waiting or not; a CPU-only program's waitall does not."""
    def waitalls(nd, gpu=True):
        x = nd.ones((4,), ctx=nd.gpu(0) if gpu else nd.cpu())
        with nd.benchmark("first"):
            y = x + 1
            nd.waitall()
        with nd.benchmark("again"):
            nd.waitall()
        return y

    settle = 4e-5
    for gpu_on, extra in ((True, settle), (False, 0.0)):
        plain, slower = (predict(waitalls, _profile(gpu_settle=s), gpu=gpu_on)
                         for s in (0.0, settle))
        for label in ("first", "again"):
            assert math.isclose(slower.regions[label] - plain.regions[label], extra,
                                abs_tol=1e-12), (gpu_on, label)


def test_readback_link_prices_asnumpy_of_gpu_data():
    """With a "gpu->host" link, asnumpy of a GPU array costs t3 + the link's time on its bytes
    (16 here) instead of the frontend's own copy; the presets have no such link."""
    link = Cost(latency=5e-5, bandwidth=16 / 1e-5)
    own_copy = Cost(latency=1e-6)
    with_link = _profile(links={**_profile().links, READBACK: link},
                         costs={**_profile().costs, "frontend:asnumpy": own_copy})
    without = _profile(costs={**_profile().costs, "frontend:asnumpy": own_copy})
    assert math.isclose(predict(round_trip, with_link).regions["late read"], T3 + 6e-5)
    assert math.isclose(predict(round_trip, without).regions["late read"], T3 + 1e-6)
    for name in ("ideal", "book", "book-zh"):
        assert READBACK not in Profile.preset(name).links


def test_profile_files_keep_the_gpu_host_side(tmp_path):
    """gpu_issue, gpu_wait and the readback link survive a JSON round trip; an unknown link
    names the accepted ones, the readback among them."""
    profile = _profile(gpu_issue=1e-6, gpu_wait=2e-6,
                       links={**_profile().links, READBACK: Cost(latency=3e-6)})
    profile.save(tmp_path / "p.json")
    loaded = Profile.load(tmp_path / "p.json")
    assert (loaded.gpu_issue, loaded.gpu_wait) == (1e-6, 2e-6)
    assert loaded.links[READBACK] == profile.links[READBACK]
    with pytest.raises(ProfileError, match="gpu->host"):
        Profile.from_dict({**profile.to_dict(), "links": {"cpu->tpu": {"latency": 1.0}}})


@pytest.fixture(scope="module")
def calibrated(quick_simulator_barriers):
    """A CPU profile with the GPU part measured by with_gpu (quick sizes, the simulator)."""
    if not gpu.available():
        pytest.skip(gpu.device_error(0))
    return with_gpu(_profile(gpus=0, links={}), quick=True)


@pytest.mark.simulator
def test_gpu_calibration_measures_kernels_links_and_the_host_side(calibrated):
    """The GPU part fits a cost for every GPU op group and dot, both host-device links,
    gpu->gpu and the readback, and records the host-side numbers; gpu_issue and gpu_wait are
    non-negative and follow their definitions (host_costs)."""
    for key in ("gpu:*", "gpu:create", "gpu:elementwise", "gpu:add", "gpu:copy", "gpu:reduce",
                "gpu:dot", "gpu:normal", "gpu:uniform"):
        assert calibrated.costs[key].time(1024, 1e6) > 0, key
    assert set(calibrated.links) == {"cpu->gpu", "gpu->cpu", "gpu->gpu", READBACK}
    host = calibrated.meta["gpu"]["host"]
    assert host["roundtrip"] > 0 and host["issue_gpu_op"] > 0
    assert calibrated.gpu_issue == max(0.0, host["issue_gpu_op"] - T1)
    priced = (T1 + calibrated.gpu_issue + calibrated.costs["gpu:elementwise"].time(64, 0.0)
              + calibrated.blocker("wait_to_read"))
    assert math.isclose(calibrated.gpu_wait, max(0.0, host["roundtrip"] - priced))
    assert host_costs(calibrated, host) == {"gpu_issue": calibrated.gpu_issue,
                                            "gpu_wait": calibrated.gpu_wait,
                                            "gpu_settle": calibrated.gpu_settle}
    assert calibrated.gpu_settle >= 0


@pytest.mark.simulator
def test_with_gpu_adds_the_gpu_to_a_cpu_profile(calibrated):
    """with_gpu keeps the CPU part, adds the GPU costs, counts the devices, and the result
    predicts a GPU workload."""
    cpu = _profile(gpus=0, links={})
    assert calibrated.costs["cpu:*"] == cpu.costs["cpu:*"] and calibrated.t1 == cpu.t1
    assert calibrated.gpus >= 1 and "gpu:dot" in calibrated.costs
    assert predict(round_trip, calibrated).duration > 0


@pytest.mark.simulator
def test_gpu_calibration_prices_each_convolution_geometry(calibrated):
    """The training ops are timed on the GPU as on the CPU (`training.cases`): the convolutions
    get "gpu:" costs of their own, not "gpu:*", and every geometry calibrated has its three
    directions priced apart, from a positive backlog period kept in meta. (The quick settings
    time no memory-bound training op: the simulator runs their reductions at seconds a
    launch.)"""
    measured = calibrated.meta["gpu"]["ops"]
    for batch, channels, side, filters, k, stride, pad in QUICK_GPU.conv_shapes:
        attrs = {"kernel": (k, k), "stride": (stride, stride), "pad": (pad, pad)}
        geometry = ops.geometry("conv2d", ((batch, channels, side, side),
                                           (filters, channels, k, k)), attrs)
        for name in ("conv2d", "conv2d_grad_data", "conv2d_grad_weight"):
            assert f"gpu:{name}" in calibrated.costs, name
            assert f"gpu:{name}@{geometry}" in calibrated.costs, (name, geometry)
            (_, _, seconds), = measured[name]["geometries"].values()
            assert seconds > 0
