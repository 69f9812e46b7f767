"""Random programs that move data between the CPU and the GPUs give numpy's sequential result.

Hypothesis writes small programs over four (3, 4) float32 arrays, each living on cpu, gpu0 or
gpu1 (the simulator's two virtual devices; cpu and gpu0 on a real one-GPU machine): arithmetic
(an operand on another device is moved first with as_in_context), in-place updates, row
assignment, moves with copyto, rebinding (which frees), and blockers in the middle (asnumpy,
wait_to_read). Every op therefore runs on a CPU worker, a GPU compute stream or a copy stream,
and the engine must order them across all three (host-side deps plus CUDA events). Values are
small integers, so each kernel is exact. At the end every array is dropped and each device's
live bytes must be back to zero.
"""

import numpy as np
import pytest
from conftest import gpu_count
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import realexec
from realexec.gpu import kernels as gpu

if not gpu.available():
    pytest.skip(gpu.device_error(0), allow_module_level=True)

pytestmark = pytest.mark.cudasim

SLOTS = 4
SHAPE = (3, 4)
DEVICES = ("cpu", *(f"gpu{i}" for i in range(min(2, gpu_count()))))
SCALARS = (-1.0, 0.5, 2.0)

slot = st.integers(0, SLOTS - 1)
device = st.sampled_from(DEVICES)
rows = st.tuples(st.integers(0, SHAPE[0]), st.integers(0, SHAPE[0])).map(sorted)
actions = st.one_of(
    st.tuples(st.just("binary"), slot, slot, slot, st.sampled_from(["add", "sub", "mul"])),
    st.tuples(st.just("scalar"), slot, slot, st.sampled_from(SCALARS),
              st.sampled_from(["add", "rsub", "mul"])),
    st.tuples(st.just("inplace"), slot, slot),
    st.tuples(st.just("move"), slot, slot, device),
    st.tuples(st.just("set_rows"), slot, slot, rows),
    st.tuples(st.just("set_scalar"), slot, rows, st.sampled_from(SCALARS)),
    st.tuples(st.just("fresh"), slot, st.integers(0, 99), device),
    st.tuples(st.just("read"), slot),
    st.tuples(st.just("wait"), slot),
)
programs = st.lists(actions, min_size=1, max_size=8)
starts = st.lists(device, min_size=SLOTS, max_size=SLOTS)


def start_values(seed):
    return np.random.default_rng(seed).integers(-3, 4, size=SHAPE).astype(np.float32)


def ctx(nd, name):
    return nd.cpu() if name == "cpu" else nd.gpu(int(name[3:]))


def run_program(nd, program, homes):
    """Run `program` on nd arrays and numpy arrays side by side, checking every read."""
    arrs = [nd.array(start_values(i), ctx=ctx(nd, homes[i])) for i in range(SLOTS)]
    refs = [start_values(i) for i in range(SLOTS)]
    for kind, *args in program:
        if kind == "binary":
            d, a, b, name = args
            x, y = arrs[a], arrs[b].as_in_context(arrs[a].context)
            arrs[d] = {"add": x + y, "sub": x - y, "mul": x * y}[name]
            refs[d] = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[name](refs[a],
                                                                                    refs[b])
        elif kind == "scalar":
            d, a, s, name = args
            x, r = arrs[a], refs[a]
            arrs[d] = {"add": x + s, "rsub": s - x, "mul": x * s}[name]
            refs[d] = {"add": r + s, "rsub": s - r, "mul": r * s}[name].astype(np.float32)
        elif kind == "inplace":
            d, a = args
            arrs[d] += arrs[a].as_in_context(arrs[d].context)
            refs[d] += refs[a]
        elif kind == "move":
            d, a, where = args
            arrs[d] = arrs[a].copyto(ctx(nd, where))
            refs[d] = refs[a].copy()
        elif kind == "set_rows":
            d, a, (lo, hi) = args
            arrs[d][lo:hi] = arrs[a].as_in_context(arrs[d].context)[lo:hi]
            refs[d][lo:hi] = refs[a][lo:hi].copy()
        elif kind == "set_scalar":
            d, (lo, hi), s = args
            arrs[d][lo:hi] = s
            refs[d][lo:hi] = s
        elif kind == "fresh":
            d, seed, where = args
            arrs[d] = nd.array(start_values(seed), ctx=ctx(nd, where))
            refs[d] = start_values(seed)
        elif kind == "read":
            (a,) = args
            np.testing.assert_array_equal(arrs[a].asnumpy(), refs[a])
        else:
            arrs[args[0]].wait_to_read()
    for a, r in zip(arrs, refs, strict=True):
        np.testing.assert_array_equal(a.asnumpy(), r)


@pytest.mark.parametrize(("workers", "mode", "examples"), [(2, "async", 100), (1, "sync", 25)])
def test_random_cross_device_programs_match_numpy(workers, mode, examples):
    """Any small program over CPU and GPU arrays gives numpy's sequential result, and every
    device's memory (GPU pools and pinned copy targets on the CPU) is given back."""

    @settings(max_examples=examples, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(program=programs, homes=starts)
    def check(program, homes):
        with realexec.session(workers=workers, mode=mode) as nd:
            run_program(nd, program, homes)
            nd.waitall()
            pools = nd._backend.pools
            assert {name: pool.live_bytes for name, pool in pools.items()} == dict.fromkeys(
                pools, 0)

    check()
