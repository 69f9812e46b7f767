"""Recording is a pure function of the workload: the cyclic garbage collector neither frees
arrays in the middle of a recording nor appends frees to a Program after `record` returned."""

import gc
import re

import pytest

import asyncsim
from asyncsim.nd.program import Free


class Holder:
    """A reference cycle that keeps an array: only the cyclic collector frees it."""

    def __init__(self, array):
        self.array, self.me = array, self


def _freed(program) -> set[int]:
    return {i.var for i in program.instrs if isinstance(i, Free)}


def test_an_array_a_cycle_holds_is_not_freed_by_a_collection_after_record():
    held = []

    def workload(nd):
        x = nd.ones((2, 3))
        held.append(x.var)
        Holder(x)

    program = asyncsim.record(workload)
    count = len(program.instrs)
    gc.collect()
    assert len(program.instrs) == count
    assert held[0] not in _freed(program)


def test_the_collector_does_not_run_while_the_workload_records():
    held, states = [], []

    def workload(nd):
        x = nd.ones((2, 3))
        held.append(x.var)
        Holder(x)
        del x
        # far past the collector's first threshold: with it on, one collection runs here
        junk = [[] for _ in range(50 * gc.get_threshold()[0])]
        states.append(gc.isenabled())
        (nd.ones((2, 3)) + 1).wait_to_read()
        del junk

    was = gc.isenabled()
    program = asyncsim.record(workload)
    assert states == [False] and gc.isenabled() == was
    assert held[0] not in _freed(program)


def test_the_collector_is_back_on_after_a_workload_raised():
    def workload(nd):
        raise ValueError("workload failed")

    assert gc.isenabled()
    with pytest.raises(ValueError, match="workload failed"):
        asyncsim.record(workload)
    assert gc.isenabled()


def test_an_array_used_after_its_recording_names_the_program():
    kept = []

    def stash(nd):
        kept.append(nd.ones((2,)))

    asyncsim.record(stash)
    with pytest.raises(RuntimeError, match="recording of 'stash' is over"):
        kept[0] + 1


def test_a_scenario_records_the_same_program_whatever_ran_before():
    from asyncsim.lab import scenarios

    def program_of(name):
        sc = scenarios.get(name)
        return asyncsim.record(sc.workload, **sc.kwargs(quick=True))

    first = program_of("hybrid_net")  # its blocks and parameters form reference cycles
    recorded = repr(first.instrs)
    program_of("hybridize_mlp")
    gc.collect()
    assert repr(first.instrs) == recorded
    again = repr(program_of("hybrid_net").instrs)
    # Gluon names a block by how many of its class this process made before (`hybridnet0`,
    # `hybridnet1`..., as MXNet does), and other tests may have made some
    first_name = re.search(r"hybridnet\d+", recorded).group()
    assert re.sub(r"hybridnet\d+", first_name, again) == recorded
    assert re.search(r"hybridnet\d+", again).group() != first_name
