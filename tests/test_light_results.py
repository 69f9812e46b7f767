"""Light results (`realexec.engine.light`, `realexec.cpu.light`): on an engine made with
`light=True`, small results of the fast push live in compiled state alone. Any program of
elementwise ops, drops, blockers and ops of other kinds gives numpy's values; a light result has
no Python var until Python asks for one; a failure upstream reaches a light result, also one
adopted while its op was in flight; its memory is in the Trace and all of it comes back."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import realexec
from realexec import OpError
from realexec.cpu import kernels as cpu
from realexec.engine import arena, layout

STEPS = {
    "add": (lambda a, s: a + s, lambda a, s: a + np.float32(s)),
    "mul": (lambda a, s: a * s, lambda a, s: a * np.float32(s)),
    "rsub": (lambda a, s: s - a, lambda a, s: np.float32(s) - a),
    "relu": (lambda a, s: a.relu(), lambda a, s: np.maximum(a, np.float32(0))),
    # not light: an op of two arrays (the general push adopts a light input)
    "plus": (lambda a, s: a + a, lambda a, s: a + a),
    "sum": (lambda a, s: a.sum(), lambda a, s: a.sum(dtype=np.float32)),
}

programs = st.lists(
    st.tuples(st.sampled_from(sorted(STEPS)), st.sampled_from([-1.5, 0.0, 2.0]),
              st.integers(0, 5),  # which live array the step reads
              st.sampled_from(["keep", "drop", "wait"])),  # then: drop it, or wait on the result
    min_size=1, max_size=50)


def light_session(workers=2, **kw):
    return realexec.session(workers=workers, engine="native-light", **kw)


@settings(max_examples=40, deadline=None)
@given(program=programs, shape=st.sampled_from([(1, 2), (5,), (3, 4), (32, 33)]),
       workers=st.sampled_from([1, 2]))
def test_any_program_gives_numpys_values_and_gives_all_memory_back(program, shape, workers):
    start = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 7 - 1
    with light_session(workers) as nd:
        backend = nd._backend
        pool, world = backend.pools["cpu"], backend._world
        live, want = [nd.array(start)], [start]
        nd.waitall()
        before = pool.live_bytes
        for name, scalar, pick, then in program:
            k = pick % len(live)
            ours, theirs = STEPS[name]
            live.append(ours(live[k], scalar))
            want.append(theirs(want[k], scalar))
            if then == "drop" and len(live) > 1:
                del live[k], want[k]
            elif then == "wait":
                live[-1].wait_to_read()
        for got, expected in zip(live, want, strict=True):
            # (atol: a sum adds in another order than numpy's, an ulp apart, and a later
            # difference of near values makes that ulp a large part of a small result)
            np.testing.assert_allclose(got.asnumpy(), expected, rtol=1e-6, atol=1e-5)
        trace = backend.trace()
        del live, got
        nd.waitall()
        assert world.live == 0 and pool.live_bytes <= before
    execs = [s for s in trace.spans if s.kind == "exec"]
    assert len(trace.spans_of("frontend", "issue")) == len(execs)


def test_a_light_result_has_no_python_var_until_python_asks():
    with light_session() as nd:
        backend = nd._backend
        x = nd.ones((2, 3))
        x.wait_to_read()  # (its write done: lent, and read by light pushes)
        ys = [x + i for i in range(10)]
        big = nd.ones((40, 40)) + 1  # 6400 bytes: not light
        ids = [y.var for y in ys]
        assert not set(ids) & set(backend.vars) and big.var in backend.vars
        assert backend._world.live == 10 * 24
        np.testing.assert_array_equal(ys[3].asnumpy(), np.full((2, 3), 4, np.float32))
        assert ids[3] not in backend.vars  # a blocker reads it where it lies
        z = ys[5] * ys[6]  # two inputs: the general push adopts both
        assert ids[5] in backend.vars and ids[6] in backend.vars
        np.testing.assert_array_equal(z.asnumpy(), np.full((2, 3), 42, np.float32))
        del ys, z
        nd.waitall()
        assert backend._world.live == 0


def test_light_results_are_in_the_traced_memory():
    with light_session(workers=1) as nd:
        x = nd.ones((8, 8))  # 256 bytes a result
        nd.waitall()
        keep = [x + i for i in range(20)]
        nd.waitall()
        trace = nd._backend.trace()
        del keep
    cpu_bytes = [b for _, dev, b in trace.memory if dev == "cpu"]
    assert max(cpu_bytes) >= 21 * 256


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_long_loop_loses_no_memory_sample(mode):
    """The log of the arena's live bytes is read out as it fills, in both modes: a loop of
    three times its length keeps a sample for each of its pushes."""
    with light_session(workers=1, mode=mode) as nd:
        world = nd._backend._world
        x = nd.ones((2,))
        nd.waitall()
        n = 3 * world.words[arena.LOGS]  # three times the log
        for _ in range(n):
            y = x + 1
        nd.waitall()
        samples = [s for s in nd._backend.trace().memory if s[1] == "cpu"]
        del y
    assert len(samples) >= n


@pytest.mark.parametrize("trace", [False, 0, 5])
def test_a_bounded_trace_keeps_no_more_light_samples(trace):
    """A bounded trace keeps the last `trace` of the light results' memory samples. (`x` is
    written first: an op whose input is still being written goes the general way, whose pool
    trims its samples only at a release, and CI's loaded VM once sent all thirty that way.)"""
    with light_session(workers=1, trace=trace) as nd:
        x = nd.ones((4, 4))
        nd.waitall()
        keep = [x + i for i in range(30)]
        nd.waitall()
        samples = nd._backend.trace().memory
        del keep
    assert len([s for s in samples if s[1] == "cpu"]) <= (trace or 0) + 1


def test_an_input_still_being_written_sends_the_op_the_general_way():
    """A light result read by the next op of another kind would be adopted; so an op whose
    input's last write still runs takes the general push, and its output is a Python var."""
    gate = threading.Event()
    with light_session() as nd:
        backend = nd._backend
        backend.kernels = {**cpu.KERNELS, "ones": gated("ones", gate)}
        x = nd.ones((2, 2))  # held at the gate
        y = x + 1
        assert y.var in backend.vars and not backend._lent
        gate.set()
        x.wait_to_read()
        z = x + 2  # x's write done: lent, and z light
        assert z.var not in backend.vars and backend.vars[x.var] in backend._lent
        np.testing.assert_array_equal(y.asnumpy() + z.asnumpy(), np.full((2, 2), 5, np.float32))


def test_a_python_vars_drop_waits_for_the_next_push_and_goes_before_its_output():
    """Every drop waits for the next push: a Python var's (here a 1 MiB result) is deleted by
    the push's call answering PYTHON_DROP, before the push's output is taken, and the push is
    then made light; with two drops waiting, both go."""
    with light_session(workers=1) as nd:
        backend = nd._backend
        pool = backend.pools["cpu"]
        x = nd.ones((2, 2))
        x.wait_to_read()
        y = x + 1  # x lent
        big = nd.ones((512, 512))
        nd.waitall()
        held = pool.live_bytes
        del big
        assert pool.live_bytes == held  # (a drop makes no call)
        z = x + 2
        nd.waitall()
        assert z.var not in backend.vars and pool.live_bytes == held - 512 * 512 * 4
        a, b = nd.ones((256, 256)), nd.ones((256, 256))
        nd.waitall()
        del a, b, y  # two Python vars and a light result waiting
        w = x + 3
        nd.waitall()
        assert pool.live_bytes == held - 512 * 512 * 4 and not backend._light_drops
        np.testing.assert_array_equal(w.asnumpy(), np.full((2, 2), 4, np.float32))


def test_a_poisoned_var_ends_the_light_pushes():
    """Once an op fails, light pushes are over (`Light.off`): the next push of the kind takes
    the general path, which looks for inherited failures, and its result is a Python var."""
    with light_session(workers=1) as nd:
        backend = nd._backend
        x = nd.ones((3,))
        x.wait_to_read()
        assert (x + 1).var not in backend.vars  # light
        backend.kernels = {**cpu.KERNELS, "relu": broken_kernel}
        y = nd.relu(x)
        with pytest.raises(OpError, match="relu"):
            y.wait_to_read()
        backend.kernels = cpu.KERNELS
        z = x + 1
        assert z.var in backend.vars
        np.testing.assert_array_equal(z.asnumpy(), np.full(3, 2, np.float32))


def test_a_failure_upstream_reaches_the_results_behind_it():
    with light_session() as nd:
        nd._backend.kernels = {**cpu.KERNELS, "relu": broken_kernel}
        x = nd.ones((3,))
        y = nd.relu(x)  # fails on a worker
        z = (y + 1) * 2  # behind it: the general push, which passes the failure on
        with pytest.raises(OpError, match="relu"):
            z.asnumpy()
        with pytest.raises(OpError, match="relu"):
            nd.waitall()
        nd._backend.kernels = cpu.KERNELS
        np.testing.assert_array_equal((x + 1).asnumpy(), np.full(3, 2, np.float32))


def test_a_failure_landing_late_reaches_the_blocker():
    """The op that fails is still running when the frontend waits on a result two ops behind
    it: the failure reaches that wait."""
    gate = threading.Event()

    def late_failure(inputs, out, attrs):
        gate.wait(5)
        raise ZeroDivisionError("late")

    with light_session() as nd:
        nd._backend.kernels = {**cpu.KERNELS, "ones": late_failure}
        x = nd.ones((4,))
        z = (x + 1) * 3
        opener = threading.Timer(0.05, gate.set)
        opener.start()
        with pytest.raises(OpError, match="ones"):
            z.wait_to_read()
        opener.join()
        with pytest.raises(OpError):
            nd.waitall()


def test_a_write_of_a_lent_var_waits_for_the_light_reads_of_it():
    """A Python var read by light pushes is lent to the compiled state, which notes their
    reads; an op that writes it gets them back first and waits for all of them."""
    gate = threading.Event()
    with light_session(workers=2) as nd:
        backend, engine = nd._backend, nd._backend.engine
        x = nd.ones((2, 2))
        x.wait_to_read()
        backend.kernels = {**cpu.KERNELS, "zeros": gated("zeros", gate)}
        held = [nd.zeros((1,)) for _ in range(2)]  # both workers wait at the gate
        ys = [x + i for i in range(20)]
        assert backend.vars[x.var] in backend._lent
        x[:] = 5.0  # the general push: its write of x waits for the 20 reads
        slot = (engine._next - 1) & (engine.cap - 1)
        assert engine._buf[layout.at(slot, layout.F_PENDING)] >= 20
        assert backend.vars[x.var] not in backend._lent
        gate.set()
        for i, y in enumerate(ys):
            np.testing.assert_array_equal(y.asnumpy(), np.full((2, 2), 1 + i, np.float32))
        np.testing.assert_array_equal(x.asnumpy(), np.full((2, 2), 5, np.float32))
        del held


@pytest.mark.parametrize("shape,dtype,light", [
    ((2, 3), "float64", True), ((3,), "float32", True), ((), "float64", True),
    ((2, 2, 2), "float32", False),  # more than two dimensions: never lent, never light
    ((40, 40), "float32", False)])  # more than `LIGHT_BYTES`
def test_a_light_push_gives_its_output_its_inputs_shape_and_dtype(shape, dtype, light):
    """The light push takes its output's shape and dtype from its input's slot in the state
    (a lent Python var's are written there when it is lent), not from the frontend."""
    start = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape) / 3
    with light_session(workers=1) as nd:
        backend = nd._backend
        x = nd.array(start, dtype=dtype)
        x.wait_to_read()
        y = x * 2.0
        z = y + 1.5  # over a light result when `y` is one
        assert (backend.vars.get(x.var) in backend._lent) == light
        assert (y.var not in backend.vars and z.var not in backend.vars) == light
        for got, want in ((y, start * 2.0), (z, start * 2.0 + 1.5)):
            assert got.shape == shape and got.dtype == np.dtype(dtype)
            out = got.asnumpy()
            assert out.shape == shape and out.dtype == np.dtype(dtype)
            np.testing.assert_array_equal(out, want)


def test_a_full_arena_sends_the_push_the_general_way():
    with light_session(workers=1) as nd:
        backend = nd._backend
        arena_bytes = len(backend._world.arena)
        x = nd.ones((32, 32))  # 4 KiB: the largest class
        keep = [x + i for i in range(arena_bytes // 4096 + 3)]
        assert sum(y.var in backend.vars for y in keep) >= 3  # made the general way
        np.testing.assert_array_equal(keep[-1].asnumpy(), np.full((32, 32), len(keep), np.float32))
        del keep
        nd.waitall()
        assert backend._world.live == 0


def test_max_inflight_keeps_the_shipped_push():
    """A light push makes no `max_inflight` wait: a light engine with one keeps the shipped
    push."""
    with light_session(workers=1, max_inflight=2) as nd:
        assert nd._backend._world is None
        x = nd.ones((2,))
        np.testing.assert_array_equal((x + 1).asnumpy(), np.full(2, 2, np.float32))


@settings(max_examples=20, deadline=None)
@given(program=programs)
def test_sync_mode_runs_each_light_op_in_its_push(program):
    """In sync mode the one call runs the op: the result is there when the push returns, each
    op leaves its issue and exec spans, a dropped result's buffer is free for the next push."""
    start = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    with light_session(workers=1, mode="sync") as nd:
        backend = nd._backend
        assert backend._world is not None
        live, want = [nd.array(start)], [start]
        for name, scalar, pick, then in program:
            k = pick % len(live)
            ours, theirs = STEPS[name]
            live.append(ours(live[k], scalar))
            want.append(theirs(want[k], scalar))
            assert backend.engine.pending == 0
            if then == "drop" and len(live) > 1:
                del live[k], want[k]
        for got, expected in zip(live, want, strict=True):
            # (atol: a sum adds in another order than numpy's, an ulp apart, and a later
            # difference of near values makes that ulp a large part of a small result)
            np.testing.assert_allclose(got.asnumpy(), expected, rtol=1e-6, atol=1e-5)
        trace = backend.trace()
        del live, got
        nd.waitall()
        assert backend._world.live == 0
    execs = [s for s in trace.spans if s.kind == "exec"]
    assert len(trace.spans_of("frontend", "issue")) == len(execs) == 1 + len(program)


def test_size_classes_cover_their_bytes():
    for nbytes in (1, 8, 9, 16, 100, 4095, 4096):
        k = arena.size_class(nbytes)
        assert 8 << k >= nbytes and (k == 0 or 8 << (k - 1) < nbytes)


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.booleans(), st.integers(0, 40)), max_size=120))
def test_the_var_table_finds_what_it_holds_and_nothing_else(steps):
    """The light var table (open addressing, GONE slots left by deletions) on 16 slots, over any
    run of insertions of fresh ids (rising, as the frontend's are) and deletions: `find` gives
    each held var's slot and -1 for any other id, and looks at no more than `PROBE` + 1 slots,
    the farthest a var was put from its own (a look for an id not held once went round the
    whole table)."""
    w = np.zeros(arena.HEADER, np.int64)
    keys = np.full(16, arena.EMPTY, np.int64)
    held, next_id = {}, 0
    for insert, pick in steps:
        if insert and len(held) < 16:
            slot = arena.free_slot(w, keys, next_id)
            assert slot >= 0 and slot not in held.values()
            keys[slot] = next_id
            held[next_id] = slot
            next_id += 1 + pick % 5  # (ids that reach no array here: another kind of op's)
        elif held:
            var = sorted(held)[pick % len(held)]
            keys[held.pop(var)] = arena.GONE
        for var in range(next_id + 3):
            assert arena.find(w, keys, var) == held.get(var, -1)
    assert all((slot - var) % 16 <= w[arena.PROBE] for var, slot in held.items())


def test_a_look_for_a_python_var_stays_short_after_the_ids_go_round():
    """After more light results than the var table has slots, every slot is taken or GONE; a
    Python var's drop before a light push (a look that finds nothing) still looks at few."""
    with light_session(workers=1) as nd:
        world = nd._backend._world
        x = nd.ones((1, 2))
        x.wait_to_read()
        for _ in range(world.words[arena.SLOTS] + 100):
            y = x + 1
        nd.waitall()
        keys = world.words[world.words[arena.KEYS]:][:world.words[arena.SLOTS]]
        assert not (keys == arena.EMPTY).any() and world.words[arena.PROBE] < 8
        big = nd.ones((64, 64))
        big.wait_to_read()
        del big  # a Python var's, held for the next push
        z = x + 2
        assert z.var not in nd._backend.vars
        np.testing.assert_array_equal(z.asnumpy() + y.asnumpy(), np.full((1, 2), 5, np.float32))


def broken_kernel(inputs, out, attrs):
    raise ZeroDivisionError("injected failure")


def gated(name, gate):
    real = cpu.KERNELS[name]

    def kernel(inputs, out, attrs):
        gate.wait(5)
        real(inputs, out, attrs)

    return kernel
