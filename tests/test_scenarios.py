"""The scenario registry: every chapter experiment records, declares what it has, uses its devices.

Everything here is checked on recorded Programs (no simulator, no data). `worst_live_vars`
replays a Program against a pessimistic backend that finishes ops only when a blocker forces
them, giving how many vars the memory rule keeps alive at the worst point.
"""

import inspect
import re
from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncsim.lab.scenarios import SCENARIOS, Scenario, UnknownScenarioError, get, names
from asyncsim.lab.scenarios.async_compute import sync_vs_async_8_2
from asyncsim.lab.scenarios.memory import memory_barrier, memory_no_barrier
from asyncsim.nd.program import Free, Mark, Op, Sync
from asyncsim.nd.record import record

ALL = sorted(SCENARIOS)


@pytest.fixture(scope="module")
def programs():
    return {name: SCENARIOS[name].record(quick=True) for name in ALL}


def region_instrs(program, label):
    """The instructions between the begin and end marks of `label`."""
    inside, out = False, []
    for ins in program.instrs:
        if isinstance(ins, Mark) and ins.label == label:
            inside = ins.begin
            continue
        if inside:
            out.append(ins)
    return out


def syncs_in(program, label) -> Counter:
    return Counter(i.kind for i in region_instrs(program, label) if isinstance(i, Sync))


def worst_live_vars(program) -> int:
    """Most vars alive at once when ops finish only at the blocker that waits for them."""
    last_writer, deps, users = {}, {}, defaultdict(set)
    done, live, pending, worst = set(), set(), set(), 0

    def finish(op_id):
        stack = [op_id]
        while stack:
            o = stack.pop()
            if o not in done:
                done.add(o)
                stack.extend(deps[o])

    for ins in program.instrs:
        if isinstance(ins, Op):
            deps[ins.id] = {last_writer[v] for v in ins.reads if v in last_writer}
            for v in (*ins.reads, ins.out):
                users[v].add(ins.id)
            last_writer[ins.out] = ins.id
            if ins.fresh:
                live.add(ins.out)
        elif isinstance(ins, Sync):
            if ins.var is None:
                done.update(deps)
            else:
                finish(last_writer[ins.var])
        elif isinstance(ins, Free):
            pending.add(ins.var)
        released = {v for v in pending if users[v] <= done}
        live -= released
        pending -= released
        worst = max(worst, len(live))
    return worst


@pytest.mark.parametrize("name", ALL)
def test_every_scenario_records_its_declared_regions(name, programs):
    """Recorded with quick params, each scenario issues ops and has exactly its declared regions."""
    program, scenario = programs[name], SCENARIOS[name]
    assert program.ops, name
    assert program.regions() == list(scenario.regions)
    assert set(scenario.book) <= set(scenario.regions)


@pytest.mark.parametrize("name", ALL)
def test_regions_nest_and_close(name, programs):
    """Every region that begins ends, and regions nest (last begun, first ended)."""
    stack = []
    for ins in programs[name].instrs:
        if isinstance(ins, Mark) and ins.begin:
            stack.append(ins.label)
        elif isinstance(ins, Mark):
            assert stack and stack.pop() == ins.label
    assert stack == []


@pytest.mark.parametrize("name", ALL)
def test_params_name_every_workload_argument(name):
    """Default and quick params name exactly the workload's keyword arguments."""
    scenario = SCENARIOS[name]
    accepted = list(inspect.signature(scenario.workload).parameters)[1:]
    assert set(scenario.params) == set(accepted)
    assert set(scenario.quick) == set(accepted)


@pytest.mark.parametrize("name", ALL)
def test_params_do_not_shadow_runner_keywords(name):
    """No workload parameter is swallowed by record/predict/realexec.run's own keywords."""
    runner = {"device", "workers", "mode", "max_inflight", "seed", "profile"}
    assert not runner & set(SCENARIOS[name].params)


@pytest.mark.parametrize("name", ALL)
def test_devices_match_the_program(name, programs):
    """GPU scenarios address gpu0 (and gpu1 when they need two); CPU ones touch no GPU."""
    scenario = SCENARIOS[name]
    gpus = [d for d in programs[name].devices if d.startswith("gpu")]
    assert gpus == [f"gpu{i}" for i in range(scenario.num_gpus)]


def test_measured_only_regions_hold_no_backend_ops(programs):
    """The plain-NumPy regions record nothing a prediction could see."""
    marked = [n for n in ALL if SCENARIOS[n].measured_only]
    assert {"warmup", "torch_warmup"} <= set(marked)
    for name in marked:
        for label in SCENARIOS[name].measured_only:
            inside = region_instrs(programs[name], label)
            assert not [i for i in inside if isinstance(i, Op | Sync)]


def test_blockers_close_each_region_with_their_own_sync(programs):
    """12.2.2's regions end with the blocker they are named after (restored from the notebook)."""
    want = {"waitall": "waitall", "wait_to_read": "wait_to_read",
            "numpy conversion": "asnumpy", "scalar conversion": "item"}
    for label, kind in want.items():
        assert syncs_in(programs["blockers"], label) == Counter({kind: 1})
    assert syncs_in(programs["queued_vs_finished"], "Workloads are queued.") == Counter()
    assert syncs_in(programs["queued_vs_finished"], "Workloads are finished.") == {"print": 1}


def test_queued_regions_do_not_wait(programs):
    """Regions that show queuing end without a blocker; their 'Done' twins end with a waitall."""
    for name, queued in (("warmup", "mxnet.np"), ("torch_warmup", "torch")):
        assert syncs_in(programs[name], queued) == Counter()
        assert syncs_in(programs[name], "Done") == Counter({"waitall": 1})


@settings(max_examples=15, deadline=None)
@given(n=st.integers(min_value=0, max_value=40))
def test_sync_loop_waits_once_per_step(n):
    """For any n, the synchronous loop waits after each of its n ops; the asynchronous one once."""
    program = record(sync_vs_async_8_2, n=n, shape=(2, 2))
    sync_region = region_instrs(program, "synchronous.")
    assert sum(isinstance(i, Op) for i in sync_region) == n
    assert syncs_in(program, "synchronous.") == Counter({"wait_to_read": n} if n else {})
    assert syncs_in(program, "asynchronous.") == Counter({"waitall": 1})


def test_torch_loop_synchronizes_with_waitall(programs):
    """PyTorch has no per-tensor wait: its synchronous loop uses synchronize (waitall) per step."""
    n = SCENARIOS["torch_sync_vs_async"].quick["n"]
    assert syncs_in(programs["torch_sync_vs_async"], "synchronous") == Counter({"waitall": n})


def test_no_barrier_keeps_more_vars_alive(programs):
    """Without a per-batch blocker more vars are alive at the worst point; one batch of overlap
    sits between the two."""
    barrier = worst_live_vars(programs["memory_barrier"])
    overlap = worst_live_vars(programs["memory_overlap"])
    no_barrier = worst_live_vars(programs["memory_no_barrier"])
    assert barrier < overlap < no_barrier
    assert worst_live_vars(programs["memory_asscalar_8_2"]) < worst_live_vars(
        programs["memory_no_barrier_8_2"])


@settings(max_examples=10, deadline=None)
@given(num_batches=st.integers(min_value=2, max_value=12))
def test_live_vars_grow_with_batches_only_without_barrier(num_batches):
    """The blocker bounds live vars whatever the batch count; without it they grow per batch."""
    tiny = dict(batch_size=2, num_inputs=3, num_hiddens=(4, 2))
    with_barrier = [worst_live_vars(record(memory_barrier, num_batches=k, **tiny))
                    for k in (num_batches, num_batches + 1)]
    without = [worst_live_vars(record(memory_no_barrier, num_batches=k, **tiny))
               for k in (num_batches, num_batches + 1)]
    assert with_barrier[0] == with_barrier[1]
    assert without[1] > without[0] > with_barrier[0]


def test_book_numbers_name_their_source():
    """Every reported number is positive and comes with the seed file it was printed in."""
    with_numbers = [s for s in SCENARIOS.values() if s.book]
    assert len(with_numbers) >= 12
    for s in with_numbers:
        assert all(v > 0 for v in s.book.values()), s.name
        assert re.search(r"\b00[0-4]_[0-9a-f]{16}\.txt\b", s.book_source), s.name


def test_get_returns_and_lists():
    """get finds a scenario by name; an unknown name raises an error listing every name."""
    assert get("sync_vs_async").name == "sync_vs_async"
    with pytest.raises(UnknownScenarioError) as info:
        get("no_such_thing")
    assert isinstance(info.value, KeyError)
    for name in ALL:
        assert name in str(info.value)


def test_names_filter_by_devices():
    """names('cpu') leaves out every scenario that needs a GPU; no filter gives all."""
    assert names() == list(SCENARIOS)
    cpu_only = names("cpu")
    assert "sync_vs_async" in cpu_only and "cpu_gpu_parallel" not in cpu_only
    assert "multi_gpu_helpers" not in names("cpu+gpu")


def test_kwargs_merge_and_reject_unknown():
    """Overrides replace defaults; a parameter the workload does not take is refused."""
    s = get("sync_vs_async")
    assert s.kwargs(quick=True, n=7)["n"] == 7
    assert s.kwargs()["shape"] == (2000, 2000)
    with pytest.raises(TypeError, match="unknown parameter"):
        s.kwargs(nope=1)


def test_scenario_refuses_numbers_for_undeclared_regions():
    """Book numbers must belong to declared regions and carry a source."""
    with pytest.raises(ValueError, match="undeclared"):
        Scenario("x", sync_vs_async_8_2, {}, {}, "d", "s", ("a",), book={"b": 1.0},
                 book_source="f")
    with pytest.raises(ValueError, match="book_source"):
        Scenario("x", sync_vs_async_8_2, {}, {}, "d", "s", ("a",), book={"a": 1.0})
    with pytest.raises(ValueError, match="devices"):
        Scenario("x", sync_vs_async_8_2, {}, {}, "d", "s", ("a",), devices="tpu")
