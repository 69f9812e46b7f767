"""The chapters' GPU experiments on the real engine, against the model and the chapters' story.

Every GPU scenario runs with its quick parameters through `realexec.run` (under the simulator in
CI) and must declare the regions of its predicted trace and put every op on the lane the model
puts it on. The overlap experiments of 8.3 are checked for the order the chapter describes: the
copy of y[i] starts after y[i]'s product ends, each stream runs its ops in issue order, and every
op of a region ends before the region's waitall returns. Whether spans actually overlap in time
is asserted only on a real GPU (marker `gpu`): the simulator runs one kernel at a time.
"""

import contextlib
import io
import re
from itertools import pairwise

import pytest

import asyncsim
import realexec
from asyncsim.lab.scenarios import get, names
from asyncsim.nd.program import Op
from realexec.gpu import kernels as gpu

if not gpu.available():
    pytest.skip(gpu.device_error(0), allow_module_level=True)

pytestmark = [pytest.mark.cudasim, pytest.mark.usefixtures("quick_simulator_barriers")]

# 8.4/8.5's training on GPUs is left out: the simulator runs a GPU thread as a Python thread,
# and a LeNet or ResNet-18 batch is minutes of that. Their engine path is tested on CPU devices
# (test_data_parallel.py) and their GPU kernels under the simulator (test_nn_kernels_gpu.py).
TRAINING = {n for n in names() if get(n).workload.__module__.endswith("data_parallel")}
GPU_SCENARIOS = [n for n in names() if get(n).num_gpus and n not in TRAINING]
WORKERS = 2


def measure(name, **overrides):
    sc = get(name)
    with contextlib.redirect_stdout(io.StringIO()):  # the 8.4 demo prints its arrays
        return realexec.run(sc.workload, workers=WORKERS, **sc.kwargs(quick=True, **overrides))


def op_lanes(trace):
    """op id -> (lane, kind) of its exec/copy span, CPU workers folded into 'cpu'."""
    return {s.op_id: (re.sub(r"^cpu/w\d+$", "cpu", s.lane), s.kind)
            for s in trace.spans if s.kind in ("exec", "copy")}


def test_all_seven_gpu_scenarios_are_covered():
    """The registry's GPU scenarios are the seven of the chapters."""
    assert sorted(GPU_SCENARIOS) == sorted([
        "cpu_gpu_parallel", "compute_copy_overlap", "torch_warmup", "torch_dependency",
        "torch_sync_vs_async", "cpu_gpu_minibatches", "multi_gpu_helpers"])


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.two_gpus) if get(n).num_gpus > 1 else n
    for n in GPU_SCENARIOS])
def test_gpu_scenario_runs_with_the_models_regions_and_lanes(name):
    """Measured and predicted traces have the scenario's regions, one span per op, and each op
    on the same lane (CPU worker, gpu{i}/compute or gpu{i}/copy) with the same kind."""
    sc = get(name)
    meas = measure(name)
    with contextlib.redirect_stdout(io.StringIO()):
        pred = asyncsim.predict(sc.workload, asyncsim.Profile.ideal(workers=WORKERS, gpus=2),
                                **sc.quick)
    assert set(meas.regions) == set(pred.regions) == set(sc.regions)
    assert op_lanes(meas) == op_lanes(pred)
    assert len([s for s in meas.spans if s.kind in ("exec", "copy")]) == len(op_lanes(pred))
    for i in range(sc.num_gpus):
        assert f"gpu{i}" in meas.devices


def region(trace, label):
    (span,) = [(a, b) for lab, a, b in trace.marks if lab == label]
    return span


def in_region(trace, label, lane_prefix):
    start, end = region(trace, label)
    return [s for s in trace.spans if s.lane.startswith(lane_prefix) and s.kind != "issue"
            and start <= s.start and s.end <= end]


def producers(workload, **params):
    """copy op id -> id of the op whose result it copies, from the recorded program."""
    ops = [i for i in asyncsim.record(workload, **params).instrs if isinstance(i, Op)]
    writer = {}
    pairs = {}
    for op in ops:
        if op.name == "copyto":
            pairs[op.id] = writer[op.reads[0]]
        writer[op.out] = op.id
    return pairs


def test_copies_follow_their_products_in_compute_copy_overlap():
    """8.3.2 overlapped: the copy of y[i] starts after y[i]'s product ends, products run in issue
    order on gpu0/compute, copies in issue order on gpu0/copy, all before the waitall returns."""
    sc = get("compute_copy_overlap")
    meas = measure("compute_copy_overlap", n=3)
    label = "Run and copy in parallel."
    dots = in_region(meas, label, "gpu0/compute")
    copies = in_region(meas, label, "gpu0/copy")
    assert [s.name for s in dots] == ["dot"] * 3 and [s.name for s in copies] == ["copyto"] * 3
    ends = {s.op_id: s.end for s in meas.spans if s.name == "dot"}
    source = producers(sc.workload, **sc.kwargs(quick=True, n=3))
    for copy in copies:
        assert copy.start >= ends[source[copy.op_id]]
    for lane in (dots, copies):
        assert [s.op_id for s in lane] == sorted(s.op_id for s in lane)
        assert all(a.end <= b.start for a, b in pairwise(lane))


def test_cpu_and_gpu_products_run_on_their_own_lanes_in_cpu_gpu_parallel():
    """8.3.1 together: the CPU's products on CPU workers, the GPU's in order on gpu0/compute, and
    all of them inside the region that ends with the waitall."""
    meas = measure("cpu_gpu_parallel")
    label = "Run on both CPU and GPU in parallel."
    n = get("cpu_gpu_parallel").quick["n"]
    cpu, gpu0 = in_region(meas, label, "cpu/"), in_region(meas, label, "gpu0/compute")
    assert len(cpu) == len(gpu0) == n
    assert {s.name for s in cpu + gpu0} == {"dot"}
    assert max(s.op_id for s in cpu) < min(s.op_id for s in gpu0)  # issued CPU first
    assert all(a.end <= b.start for a, b in pairwise(gpu0))


def test_torch_loop_with_a_synchronize_per_step_runs_one_op_at_a_time():
    """The PyTorch-chapter loop: with waitall after each `y = x + 1`, each op has run before the
    next is issued; both regions hold their n ops on gpu0/compute."""
    meas = measure("torch_sync_vs_async")
    n = get("torch_sync_vs_async").quick["n"]
    for label in ("synchronous", "asynchronous"):
        assert len(in_region(meas, label, "gpu0/compute")) == n
    ops = in_region(meas, "synchronous", "gpu0/compute")
    issues = {s.op_id: s for s in meas.spans_of("frontend", "issue")}
    for a, b in pairwise(ops):
        assert a.end <= issues[b.op_id].start


def _overlap(a, b) -> bool:
    return a.start < b.end and b.start < a.end


@pytest.mark.gpu
def test_real_gpu_overlaps_copies_with_the_next_product():
    """On a real GPU, with pinned buffers and a copy stream, y[i]'s copy overlaps a later
    product: the chapter's 8.3.2 overlap done right."""
    meas = measure("compute_copy_overlap", n=10, gpu_size=2000)
    label = "Run and copy in parallel."
    dots = in_region(meas, label, "gpu0/compute")
    copies = in_region(meas, label, "gpu0/copy")
    assert any(_overlap(c, d) for c in copies for d in dots)


@pytest.mark.gpu
def test_real_gpu_runs_cpu_and_gpu_products_at_once():
    """On a real GPU, the CPU's products and the GPU's overlap in time (8.3.1)."""
    meas = measure("cpu_gpu_parallel", n=10, cpu_size=500, gpu_size=2000)
    label = "Run on both CPU and GPU in parallel."
    cpu, gpu0 = in_region(meas, label, "cpu/"), in_region(meas, label, "gpu0/compute")
    assert any(_overlap(c, g) for c in cpu for g in gpu0)
