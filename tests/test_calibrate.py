"""realexec.calibrate: microbenchmarks -> a valid Profile of this machine, its JSON round trip, its
cache (a second call does not measure again), and the non-negative fits behind its costs.

Calibration runs once per session with quick settings (small sizes, a few seconds), of the CPU
only (`gpu=False`), so these hold on a machine with a GPU too; test_gpu_host_costs.py has the
GPU part."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncsim
from asyncsim import Profile, autograd, gluon
from asyncsim.model.profile import Cost
from asyncsim.nd.ops import OPS
from realexec.calibration import steady
from realexec.calibration.steady import central
from realexec.engine.lanes import default_workers

# the module: the package's `realexec.calibrate` attribute is the function
cal = importlib.import_module("realexec.calibration.calibrate")


def every_op(nd):
    """One of each op the frontend has, on the CPU, and each blocker."""
    x = nd.random.uniform(shape=(4, 4))
    w = nd.random.normal(shape=(4, 4))
    y = nd.ones((4, 4)) + nd.zeros((4, 4)) + nd.full((4, 4), 2.0) + nd.array(np.eye(4))
    y = (y - x) * w / (x + 1)
    y = 1 - y / 2 + 3 * y - y * 2 + 1 / (y + 5) - 1
    y = nd.relu(nd.dot(y, x)).copy()
    y[0] = 1.0
    y[1:3] = x[0]
    total = y.sum() + y.mean() + y.norm()
    training_ops(nd)
    total.item()
    y.asnumpy()
    repr(y)  # what print(y) waits for
    y.wait_to_read()
    nd.waitall()


def training_ops(nd):
    """One of each op that training adds: through autograd (the gradients), the MXNet
    functions, `invoke` for the rest, and a hybridized block (the graph op)."""
    images = nd.random.uniform(shape=(2, 3, 6, 6))
    weight, bias = nd.random.normal(shape=(4, 3, 3, 3)), nd.zeros((4,))
    gamma, beta = nd.ones((4,)), nd.zeros((4,))
    mean, var = nd.zeros((4,)), nd.ones((4,))
    label = nd.array([0, 1])
    for a in (images, weight, gamma, beta):
        a.attach_grad()
    with autograd.record():
        maps = nd.Convolution(images, weight, bias, kernel=(3, 3), num_filter=4)
        normed = nd.BatchNorm(maps, gamma, beta, mean, var)
        pooled = nd.Pooling(nd.relu(normed), kernel=(2, 2), stride=(2, 2), pool_type="avg")
        logits = nd.sum(pooled, axis=(2, 3))
        loss = nd.softmax_cross_entropy(logits, label) + nd.softmax(logits).sum(axis=1)
        loss = loss + nd.log_softmax(nd.sigmoid(logits) + nd.tanh(logits)).sum(axis=1)
    loss.backward()
    nd.invoke("batch_norm_infer", maps, gamma, beta, mean, var, eps=1e-5)
    nd.argmax(logits, axis=1)
    nd.equal(logits, logits)
    logits.astype("float64")
    nd.invoke("assign", bias, gamma)
    nd.sgd_update(weight, weight.grad, lr=0.1)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(3))
    net.initialize()
    net.hybridize()
    x = nd.ones((1, 4))
    net(x)
    net(x)  # traced at the first call, one graph op from the second


def test_quick_calibration_gives_a_valid_profile(quick_profile):
    """Every value is a non-negative number, the host's values are set, every op and blocker of
    the frontend can be priced, and meta says where, when and how it was measured."""
    p = quick_profile
    assert p.workers == default_workers() and p.cores == default_workers() and p.gpus == 0
    assert 0 < p.t1 < 1e-3 and 0 < p.t3 < 1e-3
    for value in (p.free, p.dispatch, p.gil, p.release, p.spin, p.switch):
        assert 0 <= value < 0.1
    program = asyncsim.record(every_op)
    assert {op.name for op in program.ops} == set(OPS) - {"copyto"}
    for op in program.ops:
        assert 0 <= p.cost(op) < 1.0 and 0 < p.issue(op) < 1e-3
    for kind in ("asnumpy", "print", "item"):
        assert p.blocker(kind, 64) >= p.t3
    meta = p.meta
    assert meta["workers"] == p.workers and meta["quick"] is True
    assert {"machine", "date", "versions", "settings", "platform", "measurements"} <= set(meta)
    assert set(meta["versions"]) == {"python", "numpy", "numba", "simpy"}
    assert "cores" in meta["machine"]
    assert meta["measurements"]["background load"] >= 0.0
    assert p.after_gemm == meta["measurements"]["after_gemm"]["after_gemm"] >= 1.0
    assert p.t3_asleep == meta["measurements"]["t3_after_sleep"] > 0.0


# the ops training adds that calibration times and issues: each has a cost of its own
TRAINING_OPS = ("conv2d", "conv2d_grad_data", "conv2d_grad_weight", "pool2d", "pool2d_grad",
                "softmax", "log_softmax", "softmax_grad", "log_softmax_grad", "softmax_ce",
                "softmax_ce_grad", "batch_norm", "batch_norm_grad", "batch_norm_grad_gamma",
                "batch_norm_infer", "bn_update", "sum_axis", "argmax", "broadcast_to",
                "relu_grad", "sigmoid", "tanh", "equal", "sgd_update")


def test_every_op_is_priced_on_the_cpu(quick_profile):
    """A small op of every name in asyncsim.nd.ops.OPS gets a positive price on the CPU, with
    no ProfileError: the ops training adds by "cpu:<op>" costs of their own (and "frontend:<op>"
    issue costs), reshape, cast and assign by "cpu:copy", a hybridized graph by its members'
    sum; "cpu:*" is there for any op without a cost. The ops backward issues are issued at the
    measured "frontend:backward" cost."""
    p = quick_profile
    program = asyncsim.record(every_op)
    assert {op.name for op in program.ops} == set(OPS) - {"copyto"}
    for op in program.ops:
        assert 0 < p.cost(op) < 1.0, op.name
        assert 0 < p.issue(op) < 1e-3, op.name
    for name in TRAINING_OPS:
        assert f"cpu:{name}" in p.costs and f"frontend:{name}" in p.costs, name
    rules = {op.name: p.rule(op)[0] for op in program.ops}
    assert all(rules[name] == f"cpu:{name}" for name in TRAINING_OPS)
    assert {rules[name] for name in ("reshape", "cast", "assign")} == {"cpu:copy"}
    assert rules["graph"] == "graph" and "cpu:*" in p.costs
    assert {"frontend:backward", "frontend:kvstore", "frontend:graph"} <= set(p.costs)
    backward = [op for op in program.ops if op.attrs.get("phase") == "backward"]
    assert backward and all(p.issue_rule(op) is p.costs["frontend:backward"] for op in backward)


def test_a_bigger_training_op_costs_more(quick_profile):
    """The fitted training costs grow with the work: a convolution over four times the images,
    and each memory-bound op on four times the bytes, never cost less (a quick fit of a small
    sweep may be latency alone for one op), and together they cost more."""
    p = quick_profile
    small, large = asyncsim.record(_conv_and_grads, batch=2), asyncsim.record(_conv_and_grads,
                                                                               batch=8)
    timed = [(a, b) for a, b in zip(small.ops, large.ops, strict=True)
             if a.name in TRAINING_OPS]
    assert {a.name for a, _ in timed} == {"conv2d", "conv2d_grad_data", "conv2d_grad_weight",
                                          "tanh", "pool2d", "pool2d_grad"}
    for a, b in timed:
        assert a.nbytes < b.nbytes and p.cost(a) <= p.cost(b), a.name
    assert sum(p.cost(a) for a, _ in timed) < sum(p.cost(b) for _, b in timed)


def _conv_and_grads(nd, batch=2):
    images = nd.random.uniform(shape=(batch, 3, 8, 8))
    weight = nd.random.uniform(shape=(4, 3, 3, 3))
    images.attach_grad()
    with autograd.record():
        out = nd.tanh(nd.Convolution(images, weight, kernel=(3, 3), num_filter=4,
                                     no_bias=True))
        out = nd.Pooling(out, kernel=(2, 2), stride=(2, 2), pool_type="max")
    out.backward()


def test_training_sweeps_leave_out_calls_that_take_too_long():
    """The training ops' sweep keeps each call's bytes and flops as the frontend counts them;
    a memory-bound call slower than `longest` is left out with the larger ones of its kind,
    while the convolutions and products are always timed."""
    from realexec import session
    from realexec.calibration import microbench, training

    with session(workers=1) as nd:
        bench = microbench._Bench(nd, 1)
        calls = training.cases(nd, (2**8,), ((1, 2, 6, 3, 3, 1, 0),), ((4, 8, 6),))
        every = training.kernel_times(bench, calls, repeats=1, rounds=1, pause=0.0)
        none = training.kernel_times(bench, calls, repeats=1, rounds=1, pause=0.0, longest=0.0)
        program = asyncsim.record(lambda nd: [nd.invoke(n, *[nd.ones(a.shape) for a in i], **at)
                                              for n, i, at in calls[:1]])
    assert set(none) == set(training.COMPUTE_BOUND)
    assert set(every) == {name for name, _, _ in calls}
    first = next(op for op in program.ops if op.name == calls[0][0])
    assert every[first.name]["points"][0][:2] == [first.nbytes, first.flops]
    assert all(seconds > 0 for points in every.values() for *_, seconds in points["points"])


def test_each_sweep_and_each_crowding_round_is_taken_on_its_own():
    """A gate takes the training ops' sweeps and the convolutions' crowding rounds one by one
    (`take(fn)` per sweep, per round), not the minute of them as one step: what a take returns
    is what is kept, so a sweep taken again replaces its first try."""
    from realexec import session
    from realexec.calibration import microbench, training

    takes = []

    def take(fn):
        takes.append(fn)
        fn()  # a first try, thrown away as a gate's retake throws it away
        return fn()

    with session(workers=2) as nd:
        bench = microbench._Bench(nd, 2)
        calls = training.cases(nd, (2**8,), ((1, 2, 6, 3, 3, 1, 0),))
        times = training.kernel_times(bench, calls, repeats=1, rounds=3, pause=0.0, take=take)
        assert len(takes) == 3
        pairs = training.crowding(bench, ((1, 2, 6, 3, 3, 1, 0),), rounds=2, take=take)
    assert len(takes) == 5
    assert set(times) == {name for name, _, _ in calls}
    assert all(len(p["points"]) >= 1 for p in times.values())
    assert {label.partition("@")[0] for label in pairs} == {"conv2d", "conv2d_grad"}
    assert all(v["alone"] > 0 and v["together"] > 0 for v in pairs.values())


@pytest.mark.filterwarnings("ignore:calibrate. other processes:UserWarning")  # as above
def test_every_step_waits_for_its_probes(monkeypatch):
    """A gated calibration takes every step through `Gates` over the speed probe; the steps
    taken on the engine's session through the issue probe too (the interpreter's state); those
    that price BLAS (products, convolutions, a graph of them, what runs after them, the places
    of a product's operands, their crowding) through the product probe too. The gates' runs are
    replaced by calls that note which probes gate them, so nothing waits."""
    from realexec.calibration import measure

    gated: dict[str, set] = {}

    def probes(gate):
        return "issue" if gate.probe.__qualname__.startswith("issue_probe") else {
            steady.speed_probe: "speed", steady.product_probe: "product"}[gate.probe]

    def run(self, fn, *args, retries=2, **kwargs):
        kind = "+".join(sorted(probes(g) for g in getattr(self, "gates", (self,))))
        gated.setdefault(fn.__qualname__, set()).add(kind)
        return fn(*args, **kwargs)

    monkeypatch.setattr(steady.Gate, "run", run)
    monkeypatch.setattr(steady.Gates, "run", run)
    raw = measure._measure(2, dataclasses.replace(cal.QUICK, spread=1e-4), progress=False,
                           reference=1.0, product_reference=1.0, issue_reference=1.0)
    blas = {"kernel_times.<locals>.sweep", "graph_step", "after_gemm",
            "_concurrency.<locals>.pairs", "crowding.<locals>.<lambda>"}
    kinds = {name: kinds for name, kinds in gated.items()}
    assert {name for name, k in kinds.items() if k == {"issue+product+speed"}} == blas
    assert kinds["kernel_times"] == {"issue+speed", "issue+product+speed"}  # dot, the others
    assert kinds["other_core"] == {"product+speed"}  # before the session
    assert {"frontend", "roundtrip", "blockers", "phase_times", "mixed_issue"} <= {
        name for name, k in kinds.items() if k == {"issue+speed"}}
    assert kinds["fresh"] == {"speed"}  # engines of its own, before the session
    for name in ("products", "issues"):
        assert set(raw["gate"][name]) == {"fastest", "slow", "waited", "moved", "behind"}
    assert len(raw["issue_probe"]) == 2 and all(0 < s < 1e-3 for s in raw["issue_probe"])


def test_the_round_trips_t3_is_what_the_blocker_adds_once_its_wait_is_over():
    """t3 is what a blocker costs after its op has ended: for a tiny op that ended before the
    frontend called wait_to_read, the call alone, never the frontend's Python between the
    push and the call (that is the issue's, t1): so no more than the wait spans themselves."""
    from realexec import session
    from realexec.calibration import microbench

    with session(workers=1) as nd:
        bench = microbench._Bench(nd, 1)
        since = bench.mark()
        trip = microbench.roundtrip(bench, 50, 2)
        waits = [end - start for _, _, start, end in bench.spans(since, "wait", "wait_to_read")]
    assert 0 < trip["t3"] <= central(waits) + 1e-9


def test_background_load_is_other_processes_cpu_time():
    """BackgroundLoad counts the busy cores of other processes, not this process's own work."""
    load = steady.BackgroundLoad()
    # busy in this process only, for 0.2 s: /proc/stat counts in ticks of 10 ms, so a shorter
    # span reads another process's single tick as a whole core or more
    deadline = time.perf_counter() + 0.2
    total = 0
    while time.perf_counter() < deadline:
        total += 1
    assert 0.0 <= load.cores() < 2.5


def test_background_load_leaves_out_this_processs_children():
    """A child process kept busy for a while (as the helper that compiles the kernels on a fresh
    clone) is this job's own work, once waited for: not other processes' load."""
    load = steady.BackgroundLoad()
    code = "import time\nend = time.perf_counter() + 0.4\nwhile time.perf_counter() < end: pass"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert load.cores() < 0.5


TICKS = st.integers(0, 1000).map(lambda n: n / 100)  # /proc/stat counts 10 ms ticks


@given(busy=TICKS, steal=TICKS, own=TICKS)
def test_time_a_hypervisor_took_is_stolen_not_other_processes_load(busy, steal, own):
    """Steal (a VM's cores running another machine) counts as the share `stolen` of the cores'
    time, never as other processes' cores; this process's own time is left out of the rest."""
    stat, owns, clock = [(100.0, 20.0), (100.0 + busy + own, 20.0 + steal)], [5.0, 5.0 + own], \
        [50.0, 52.0]  # two seconds of wall time
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(steady.BackgroundLoad, "_stat", staticmethod(lambda: stat[0]))
        patch.setattr(steady.BackgroundLoad, "_own", staticmethod(lambda: owns[0]))
        patch.setattr(steady.time, "perf_counter", lambda: clock[0])
        load = steady.BackgroundLoad()
        for later in (stat, owns, clock):
            later.pop(0)
        assert load.cores() == pytest.approx(busy / 2.0)
        ran = busy + own
        assert load.stolen() == pytest.approx(steal / (ran + steal) if ran + steal else 0.0)


def test_the_profile_predicts_a_workload(quick_profile):
    """The calibrated profile drives the simulator: a loop of n ops takes at least n issues
    (on the default engine the loop's results are light, each pushed at `light`)."""
    def loop(nd, n=50):
        x = nd.ones((64,))
        with nd.benchmark("loop"):
            for _ in range(n):
                x = x + 1
            nd.waitall()

    trace = asyncsim.predict(loop, quick_profile, n=50)
    cheapest = min(quick_profile.t1, quick_profile.light or quick_profile.t1)
    assert cheapest > 0 and trace.regions["loop"] >= 50 * cheapest
    assert trace.meta["profile"] == quick_profile.name


def test_save_and_load_give_the_same_profile(quick_profile, tmp_path):
    """A calibrated profile written to JSON reads back equal, field by field."""
    path = tmp_path / "here.json"
    quick_profile.save(path)
    loaded = Profile.load(path)
    assert loaded == quick_profile
    assert loaded.to_dict() == quick_profile.to_dict()


def _counted_measure(monkeypatch, raw: dict) -> list:
    """`_measure` counted: the list of its calls, returned; each call gives `raw` (a profile's
    measurements) back. The cache tests count measurements; they do not look at their numbers,
    which `quick_profile`'s tests check."""
    calls = []

    def measure(*args, **kwargs):
        calls.append(args)
        return json.loads(json.dumps(raw))  # a copy: calibrate adds to it

    monkeypatch.setattr(cal, "_measure", measure)
    return calls


# a measurement given back takes a millisecond, in which one 10 ms tick of another process's
# CPU time reads as cores of background load
@pytest.mark.filterwarnings("ignore:calibrate. other processes:UserWarning")
def test_a_second_call_comes_from_the_cache(monkeypatch, tmp_path, quick_profile):
    """With the cache on, the first call measures and writes the file; the second returns the
    same profile without measuring; force=True measures again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = _counted_measure(monkeypatch, quick_profile.meta["measurements"])
    workers = quick_profile.workers
    first = cal.calibrate(workers=workers, quick=True, progress=False, gpu=False)
    assert len(calls) == 1
    path = cal.cache_path(workers, quick=True)
    assert path.exists() and path.parent == tmp_path / "asyncsim"
    second = cal.calibrate(workers=workers, quick=True, progress=False, gpu=False)
    assert len(calls) == 1 and second == first
    cal.calibrate(workers=workers, quick=True, progress=False, gpu=False, force=True)
    assert len(calls) == 2


def test_cache_files_differ_by_workers_and_settings(monkeypatch, tmp_path):
    """The cache key includes the worker count and quick/full settings."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    paths = {cal.cache_path(w, q) for w in (1, 2) for q in (False, True)}
    assert len(paths) == 4


@pytest.mark.filterwarnings("ignore:calibrate. other processes:UserWarning")  # as above
def test_a_broken_cache_file_is_measured_again(monkeypatch, tmp_path, quick_profile):
    """A cache file that does not load as a Profile is replaced, not trusted."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = _counted_measure(monkeypatch, quick_profile.meta["measurements"])
    workers = quick_profile.workers
    path = cal.cache_path(workers, quick=True)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    profile = cal.calibrate(workers=workers, quick=True, progress=False, gpu=False)
    assert len(calls) == 1 and Profile.load(path) == profile


def test_quick_settings_are_small():
    """Quick calibration stays in small sizes (it is meant for tests and CI)."""
    q = cal.QUICK
    assert max(q.sizes) <= 2**18 and max(q.dot_sides) <= 256 and q.repeats <= 3
    assert max(q.sizes) < max(cal.FULL.sizes)


def test_issue_loops_fit_behind_one_hold():
    """`issue_times` times each kind after an untimed loop of its own, all behind a hold: the
    settings' loops fit the engine's table, and a loop too long for it is refused at once
    instead of waiting forever for a slot the hold keeps."""
    import realexec
    from realexec.calibration import issuing, microbench

    for settings_ in (cal.QUICK, cal.FULL):
        assert 2 * max(1, settings_.issue_ops // 3) <= issuing.HOLD_OPS
    with realexec.session(workers=1) as nd:
        with pytest.raises(ValueError, match="issue_times"):
            issuing.issue_times(microbench._Bench(nd, 1), issuing.HOLD_OPS, 1, 0.0)


@settings(max_examples=50, deadline=None)
@given(coef=st.lists(st.floats(0.0, 10.0), min_size=2, max_size=3),
       data=st.data())
def test_fit_recovers_non_negative_coefficients(coef, data):
    """On exact data from non-negative coefficients the fit gives them back."""
    k = len(coef)
    rows = data.draw(st.lists(st.lists(st.floats(0.1, 100.0), min_size=k - 1, max_size=k - 1),
                              min_size=k + 2, max_size=8))
    features = np.array([[1.0, *row] for row in rows])
    truth = np.array(coef)
    seconds = features @ truth
    if np.any(seconds <= 1e-9):
        return
    got = cal.fit(features, seconds)
    assert np.all(got >= 0)
    assert np.allclose(features @ got, seconds, rtol=1e-6, atol=1e-9)


def test_fit_never_goes_negative():
    """Data that a negative latency would fit best gets a zero latency instead."""
    nbytes = np.array([1.0, 2.0, 4.0, 8.0])
    seconds = 2.0 * nbytes - 1.0
    latency, per_byte = cal.fit(np.stack([np.ones(4), nbytes], axis=1), seconds)
    assert latency == 0.0 and per_byte > 0


def test_fit_bytes_finds_a_cache_size():
    """Times that grow at one rate up to a size and faster beyond it get `cache` and `spill`."""
    truth = Cost(latency=1e-6, bandwidth=80e9, cache=8e6, spill=30e9)
    nbytes = np.array([4e3, 3e4, 2.6e5, 2e6, 8e6, 1.6e7, 3.2e7])
    seconds = np.array([truth.time(b, 0.0) for b in nbytes])
    cost, _ = cal.fit_bytes(nbytes, seconds)
    assert cost.cache == 8e6
    assert math.isclose(cost.bandwidth, 80e9, rel_tol=1e-6)
    assert math.isclose(cost.spill, 30e9, rel_tol=1e-6)
    straight = np.array([1e-6 + b / 50e9 for b in nbytes])
    assert math.isinf(cal.fit_bytes(nbytes, straight)[0].cache)


def test_fit_bytes_finds_a_second_cache_size():
    """Times with three rates (a core's caches, a shared cache, main memory) get `cache`,
    `spill`, `cache2` and `spill2`, where one cache size alone would bend the fit."""
    truth = Cost(latency=1e-6, bandwidth=120e9, cache=5e5, spill=65e9, cache2=1.6e7, spill2=35e9)
    nbytes = np.array([8e3, 6e4, 5e5, 2e6, 8e6, 1.6e7, 3.2e7, 6.4e7])
    seconds = np.array([truth.time(b, 0.0) for b in nbytes])
    cost, _ = cal.fit_bytes(nbytes, seconds)
    assert (cost.cache, cost.cache2) == (5e5, 1.6e7)
    for attr in ("bandwidth", "spill", "spill2"):
        assert math.isclose(getattr(cost, attr), getattr(truth, attr), rel_tol=1e-6)


def test_quick_profile_has_the_host_values_and_refits_to_itself(quick_profile):
    """Calibration measures a fresh engine's start-up, a blocked frontend's re-checks, a GIL
    hand-over to a sleeping thread (a wake-up: more than nothing, under the switch interval) and
    the broadcasting costs; `refit` derives the same profile from the measurements it keeps."""
    p = quick_profile
    assert 0.0 <= p.startup < 0.1 and 0.0 <= p.recheck < 1e-3
    assert p.first_kind == max(0.0, central(p.meta["measurements"]["fresh"]["first_kinds"]))
    assert 0.0 <= p.first_kind < 1e-3
    assert 0.0 < p.handover < p.switch
    assert {"cpu:broadcast", "frontend:broadcast"} <= set(p.costs)
    assert p.blocker("print", 64) > p.t3
    assert cal.refit(p) == p


def test_first_calls_and_later_blockers_have_prices_of_their_own(quick_profile):
    """The profile prices a program's later asnumpy, print and item apart from its first
    ("frontend:<kind>:again"), and the Python of a block's first call per parameter it makes
    ("frontend:init") and of its first call after hybridize() per op it traces
    ("frontend:trace"): what those calls took beyond a later call, less the issue prices of the
    ops they issued beyond it."""
    p = quick_profile
    firsts = p.meta["measurements"]["firsts"]
    assert {f"frontend:{kind}:again" for kind in ("asnumpy", "print", "item")} <= set(p.costs)
    assert firsts["init"]["params"] == 4 and firsts["init"]["extra"] > 0
    assert {"uniform", "zeros"} <= set(firsts["init"]["ops"])  # the initialisers' ops
    assert firsts["trace"]["traced"] > 0 and not firsts["trace"]["ops"]  # one graph op each
    for phase, per in (("init", "params"), ("trace", "traced")):
        case = firsts[phase]
        issued = sum(count * cal._issue_price(p.costs, p.t1, name)
                     for name, count in case["ops"].items())
        assert p.costs[f"frontend:{phase}"].latency == pytest.approx(
            max(0.0, (case["extra"] - issued) / case[per]))


def test_quick_profile_keeps_the_mixing_and_the_speed_of_its_moment(quick_profile):
    """`mix` is the fit of the mixed-issue ratios it keeps (two, five and ten kinds), and the
    speed and product probes were taken as calibration began and as it ended
    (benchmarks/accuracy.py compares its own against them)."""
    from realexec.calibration.issuing import fit_mix

    raw = quick_profile.meta["measurements"]
    assert sorted(int(k) for k in raw["mixed"]["ratios"]) == [2, 5, 10]
    assert all(r > 0 for r in raw["mixed"]["ratios"].values())
    assert quick_profile.mix == fit_mix(raw["mixed"]["ratios"]) >= 0.0
    assert len(raw["speed_probe"]) == 2 and all(0.0 < s < 1.0 for s in raw["speed_probe"])
    # and the product probe (BLAS's speed, which drifts apart from the other probe's)
    assert len(raw["product_probe"]) == 2 and all(0.0 < s < 1.0 for s in raw["product_probe"])


def test_the_prices_of_data_another_core_wrote_come_from_its_measurement(quick_profile):
    """With two workers or more, calibration times the other core's writes
    (`realexec.calibration.places`) and the profile's `foreign` and `foreign_gemm` are those
    prices; a refit with other measured prices takes them."""
    p = quick_profile
    raw = p.meta["measurements"]
    if p.workers < 2:
        assert "places" not in raw and p.foreign == p.foreign_gemm == 0.0
        return
    assert p.foreign == raw["places"]["foreign"] >= 0.0
    assert p.foreign_gemm == raw["places"]["foreign_gemm"] >= 0.0
    changed = json.loads(json.dumps(p.meta))
    changed["measurements"]["places"].update(foreign=2e-11, foreign_gemm=5e-11)
    again = cal.refit(dataclasses.replace(p, meta=changed))
    assert (again.foreign, again.foreign_gemm) == (2e-11, 5e-11)


def test_forget_comes_from_the_op_timed_after_idle_spells(quick_profile):
    """A quick calibration does not time the idle spells (`forget` 0: off); a refit of a
    profile whose measurements hold such a run takes `forget` from it, where the op is halfway
    to its slowest."""
    p = quick_profile
    assert "forget" not in p.meta["measurements"] and p.forget == 0.0
    changed = json.loads(json.dumps(p.meta))
    changed["measurements"]["forget"] = {"elements": 2**21, "idles": [0.0, 0.02, 0.04, 0.08],
                                         "seconds": [6e-4, 6e-4, 8e-4, 1e-3]}
    again = cal.refit(dataclasses.replace(p, meta=changed))
    assert again.forget == pytest.approx(0.04)


def test_cache_files_differ_by_engine(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    light, native = (cal.cache_path(1, True, False, e) for e in ("native-light", "native"))
    assert light != native


@pytest.mark.filterwarnings("ignore:calibrate. other processes:UserWarning")  # as above
def test_a_light_engines_profile_has_the_light_prices(monkeypatch, quick_profile):
    """On engine="native-light" the profile takes the light results' prices, timed on that
    engine (`realexec.calibration.light`); the shipped engine's profile has none."""
    from realexec.calibration.light import light_prices

    prices = light_prices(1, 64, 3, 0.0)
    assert prices["light"] > 0 and prices["light_flush"] > 0
    raw = {**quick_profile.meta["measurements"], "light": prices}
    calls = _counted_measure(monkeypatch, raw)
    light = cal.calibrate(workers=1, quick=True, cache=False, progress=False, gpu=False,
                          engine="native-light")
    assert calls[0][-1] == "native-light" and light.meta["engine"] == "native-light"
    assert (light.light, light.light_flush) == (prices["light"], prices["light_flush"])
    native = cal.calibrate(workers=1, quick=True, cache=False, progress=False, gpu=False,
                           engine="native")
    assert native.light == 0.0 and native.meta["engine"] == "native"
    with pytest.raises(ValueError, match="'python'"):
        cal.calibrate(workers=1, quick=True, cache=False, engine="python")


@pytest.mark.filterwarnings("ignore:calibrate. other processes:UserWarning")  # as above
def test_a_calibration_whose_steps_ran_behind_the_usual_state_is_taken_again(monkeypatch,
                                                                              quick_profile):
    """When the gate saw the machine's usual speed only after some steps had passed against a
    slower one (`Gate.behind`), calibration measures again, once, waiting for the fastest
    state each of its probes saw; the profile keeps the second take and says how many steps
    were behind."""
    raw = dict(quick_profile.meta["measurements"])
    takes = []

    def measure(*args):
        takes.append(args)
        gate = {"fastest": 0.01, "slow": 0, "waited": 0, "behind": 3 if len(takes) == 1 else 0,
                "products": {"fastest": 0.003}, "issues": {"fastest": 2e-6}}
        return json.loads(json.dumps({**raw, "gate": gate, "speed_probe": [0.02 * len(takes)]}))

    monkeypatch.setattr(cal, "_measure", measure)
    profile = cal.calibrate(workers=1, quick=True, cache=False, progress=False, gpu=False)
    assert len(takes) == 2 and takes[1][-3:] == (0.01, 0.003, 2e-6) and len(takes[0]) == 4
    measured = profile.meta["measurements"]
    assert measured["speed_probe"] == [0.04] and measured["gate"]["retaken"] == 3

    takes.clear()
    raw["gate"] = {"fastest": 0.01, "slow": 0, "waited": 0, "behind": 0}
    monkeypatch.setattr(cal, "_measure", lambda *args: takes.append(args) or dict(raw))
    cal.calibrate(workers=1, quick=True, cache=False, progress=False, gpu=False)
    assert len(takes) == 1
