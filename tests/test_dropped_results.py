"""Small dropped results go back to the compiled engine in runs: `DROP_BATCH` of them, or all
of them at the next blocker, mark or trace, in one call (`NativeEngine.delete_vars`) and one
release of the pool (`Pool.release_many`). Their memory comes back that many drops late at most,
never before their ops are done (DESIGN.md's rule), and none is lost. The model deletes them in
the same runs (`Profile.drop_batch`). On the engine without light results (`engine="native"`):
the default engine's small elementwise results have rules of their own (test_light_model).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_realexec_memory import gated  # a kernel that waits for an event

import realexec
from asyncsim.model.issue import DROP_BATCH, DROP_BYTES
from realexec.cpu import kernels as cpu
from realexec.engine.deps import OpError
from realexec.engine.memory import BufferCache, Pool

SHAPES = [(1,), (16,), (100,), (1000,), (300, 300)]


def _state(pool: Pool) -> tuple:
    cache = pool.cache
    return (pool.live_bytes, pool.peak_bytes, cache.cached_bytes,
            sorted((size, len(free)) for size, free in cache.free.items() if free))


@given(picks=st.lists(st.tuples(st.sampled_from(SHAPES), st.booleans()), min_size=1,
                      max_size=12),
       cap=st.sampled_from([1 << 30, 1 << 20, 4096]))
def test_releasing_many_at_once_counts_as_releasing_each(picks, cap):
    """For any arrays and any cache cap: `release_many` of some of them leaves live and peak
    bytes, the cached bytes and the free lists as releasing them one by one does, with one
    memory sample instead of one each."""
    pools = [Pool("cpu", BufferCache(max_bytes=cap)) for _ in range(2)]
    chosen = []
    for pool in pools:
        arrays = [pool.acquire(shape, "float32") for shape, _ in picks]
        chosen.append([a for a, (_, give) in zip(arrays, picks, strict=True) if give])
    for a in chosen[0]:
        pools[0].release(a)
    samples = len(pools[1].samples)
    pools[1].release_many(chosen[1])
    assert _state(pools[0]) == _state(pools[1])
    assert len(pools[1].samples) - samples <= max(1, len(chosen[1]))


def test_releasing_many_of_a_class_already_cached_takes_one_sample():
    """Arrays whose size class the cache has seen come back with one sample in all."""
    pool = Pool("cpu", BufferCache())
    pool.release(pool.acquire((4,), "float32"))
    arrays = [pool.acquire((4,), "float32") for _ in range(10)]
    samples = len(pool.samples)
    pool.release_many(arrays)
    assert len(pool.samples) == samples + 1
    assert pool.samples[-1][2] == pool.live_bytes == 0
    again = pool.acquire((4,), "float32")
    assert any(np.shares_memory(again, a) for a in arrays)  # back in the cache


def _results(nd, x, n):
    """n fresh results of the compiled fast path, every op done."""
    kept = [x + 1 for _ in range(n)]
    nd.waitall()
    return kept


def test_small_drops_come_back_together_at_the_batchs_size():
    """Dropping done results one by one: none comes back until the `DROP_BATCH`th; that run
    is then kept for the next outputs of its shape and dtype (the pool hands out nothing and
    its live bytes do not move), and the next blocker gives back what none took."""
    with realexec.session(workers=1, engine="native") as nd:
        backend = nd._backend
        pool = backend.pools["cpu"]
        x = nd.ones((4,))
        kept = _results(nd, x, DROP_BATCH)
        held, handed = pool.live_bytes, pool.hits + pool.misses
        for k in range(DROP_BATCH - 1):
            kept.pop()
            assert pool.live_bytes == held, k
        kept.pop()
        assert len(backend._stash[(4,)]) == DROP_BATCH
        assert pool.live_bytes == held
        other = nd.ones((4,), dtype="float64")  # its dtype differs: from the pool
        assert pool.hits + pool.misses == handed + 1
        again = [x + 1 for _ in range(DROP_BATCH - 1)]  # these take the kept buffers
        assert pool.hits + pool.misses == handed + 1
        assert pool.live_bytes == held + other.nbytes
        np.testing.assert_array_equal(again[-1].asnumpy(), np.full(4, 2, np.float32))
        assert pool.live_bytes == held + other.nbytes - 16  # the blocker gave the last back
        assert not any(backend._stash.values())


def test_a_kept_result_of_a_failed_op_serves_a_new_op_unpoisoned():
    """What a run keeps is the engine var itself: one poisoned by a failed op (an input's kernel
    raised) reads right once a new op has taken it as its output."""
    def broken(inputs, out, attrs):
        raise ZeroDivisionError("broken")

    with realexec.session(workers=1, engine="native") as nd:
        backend = nd._backend
        backend.kernels = {**cpu.KERNELS, "mul_scalar": broken}
        x = nd.ones((4,))
        bad = x * 2
        poisoned = [bad + 1 for _ in range(DROP_BATCH)]
        with pytest.raises(OpError, match="mul_scalar"):
            nd.waitall()
        taken = {id(backend.vars[y.var]) for y in poisoned}
        del poisoned  # a full run: done, so kept
        assert len(backend._stash[(4,)]) == DROP_BATCH
        fresh = x + 1
        assert id(backend.vars[fresh.var]) in taken
        np.testing.assert_array_equal(fresh.asnumpy(), np.full(4, 2, np.float32))
        with pytest.raises(OpError, match="mul_scalar"):
            bad.asnumpy()


def test_a_kept_run_goes_back_when_the_next_run_is_handed_over():
    """Results kept from one run that no output took go back to the pool when the next run is
    handed over: at most two runs' bytes are held for drops."""
    with realexec.session(workers=1, engine="native") as nd:
        pool = nd._backend.pools["cpu"]
        x, w = nd.ones((4,)), nd.ones((8,))
        first = _results(nd, x, DROP_BATCH)
        second = _results(nd, w, DROP_BATCH)  # (8,): cannot take (4,)'s buffers
        base = x.nbytes + w.nbytes
        del first
        assert pool.live_bytes == base + DROP_BATCH * (16 + 32)
        del second  # the (4,) run goes back, the (8,) run is kept
        assert pool.live_bytes == base + DROP_BATCH * 32
        nd.waitall()
        assert pool.live_bytes == base


def test_a_blocker_a_mark_and_a_trace_give_the_drops_back():
    """Fewer drops than a batch come back at the next blocker, region mark or trace."""
    with realexec.session(workers=1, engine="native") as nd:
        pool = nd._backend.pools["cpu"]
        x = nd.ones((4,))
        backend = nd._backend
        for give_back in (nd.waitall, lambda: x.wait_to_read(),
                          lambda: backend.mark("region", True), backend.trace):
            kept = _results(nd, x, 3)
            del kept
            assert pool.live_bytes == 4 * 16
            give_back()
            assert pool.live_bytes == 16


def test_results_above_the_size_go_back_at_once():
    """A result of more than `DROP_BYTES` is deleted when dropped, as before."""
    with realexec.session(workers=1, engine="native") as nd:
        pool = nd._backend.pools["cpu"]
        x = nd.ones((DROP_BYTES // 4 + 1,))
        y = x + 1
        nd.waitall()
        del y
        assert pool.live_bytes == x.nbytes


def test_a_result_dropped_after_the_session_goes_back_at_once():
    """Once the session is closed, a small result still held goes back when dropped."""
    with realexec.session(workers=1, engine="native") as nd:
        pool = nd._backend.pools["cpu"]
        y = nd.ones((4,)) + 1
    assert pool.live_bytes == 16
    del y
    assert pool.live_bytes == 0


def test_a_run_of_drops_waits_for_the_ops_that_use_them():
    """Dropped results whose ops still wait (their input's op is held) stay live through the
    hand-over and come back only once those ops ran; the results read right meanwhile."""
    gate = threading.Event()
    with realexec.session(workers=1, engine="native") as nd:
        nd._backend.kernels = {**cpu.KERNELS, "ones": gated("ones", gate)}
        pool = nd._backend.pools["cpu"]
        x = nd.ones((4,))
        dropped = [x + 1 for _ in range(DROP_BATCH)]
        kept = x * 3
        del dropped  # one run: handed over, none of it done
        assert pool.live_bytes == (DROP_BATCH + 2) * 16
        gate.set()
        np.testing.assert_array_equal(kept.asnumpy(), np.full(4, 3, np.float32))
        nd.waitall()
        assert pool.live_bytes == 2 * 16


def test_a_drop_made_during_the_hand_over_is_not_lost():
    """A result dropped while a run is being handed over (a collection on another thread, or
    inside the hand-over) stays for the next run; every buffer comes back."""
    with realexec.session(workers=1, engine="native") as nd:
        backend = nd._backend
        pool, engine = backend.pools["cpu"], backend.engine
        x = nd.ones((4,))
        late = _results(nd, x, 1)
        kept = _results(nd, x, DROP_BATCH)
        real = engine.delete_vars

        def meanwhile(vars_, give_back, one):
            if late:
                late.pop()  # its drop lands in the list being handed over
            real(vars_, give_back, one)

        engine.delete_vars = meanwhile
        try:
            del kept
            assert len(backend._drops) == 1
            nd.waitall()
        finally:
            del engine.delete_vars
        assert pool.live_bytes == x.nbytes



def _drop_forty(nd):
    """Forty small results made, then dropped at once: a run of 32 is kept, and twenty results
    of its shape and dtype take twenty of them; three of another dtype come from the pool. The
    next blocker gives back the twelve kept and the eight dropped since, the one after it the
    twenty."""
    x = nd.ones((4,))
    kept = [x + 1 for _ in range(40)]
    nd.waitall()
    del kept
    more = [x * 2 for _ in range(20)]
    wide = [nd.ones((4,), dtype="float64") for _ in range(3)]  # noqa: F841 -- held to the end
    nd.waitall()
    del more
    nd.waitall()
    return x


def _settled(trace) -> list[int]:
    """Live bytes on cpu after each instant at which they changed (samples at one instant: the
    last), as a sequence."""
    last: dict = {}
    for t, device, nbytes in trace.memory:
        if device == "cpu":
            last[t] = nbytes
    values = [last[t] for t in sorted(last)]
    steps = [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]
    return steps[1:] if steps[0] == 0 else steps  # before the first array, if sampled apart


def test_the_model_deletes_small_drops_in_runs_as_the_engine_does():
    """The model's `drop_batch` follows the engine: the same memory curve, step for step, for
    the same program (the kept run's buffers taken by later results, step for step); without
    it each drop gives its bytes back alone, and takes nothing."""
    import dataclasses

    from asyncsim import Profile, predict

    measured = realexec.run(_drop_forty, workers=1, engine="native")
    ideal = dataclasses.replace(Profile.ideal(t1=1e-6, t2=1e-6, t3=1e-6), free=1e-6)
    batched = predict(_drop_forty, dataclasses.replace(ideal, native=1, drop_batch=DROP_BATCH))
    made = [16 * k for k in range(1, 42)]
    steps = made + [656 + 32, 656 + 64, 656 + 96, 752 - 20 * 16, 112, 0]
    assert _settled(measured) == _settled(batched) == steps
    alone = _settled(predict(_drop_forty, ideal))
    assert alone[:50] == made + [640 - 16 * k for k in range(9)]  # each drop's bytes at once


def test_the_model_deletes_a_copy_from_a_gpu_alone():
    """A small cpu result that a copy from a GPU wrote (realexec's pinned buffer, given back on
    its own path) goes back at its drop in the model, where a cpu op's waits for the run."""
    import dataclasses

    from asyncsim import Profile, predict

    def program(nd):
        on_gpu = nd.ones((4,), ctx=nd.gpu(0))
        copied = on_gpu.copyto(nd.cpu())
        computed = nd.ones((4,)) + 1
        nd.waitall()
        del copied
        nd.note("dropped")  # a Call: no blocker, no mark
        del computed
        nd.note("dropped")
        nd.waitall()

    ideal = dataclasses.replace(Profile.ideal(t1=1e-6, t2=1e-6, t3=1e-6, gpus=1), free=1e-6,
                                native=1, drop_batch=DROP_BATCH)
    cpu_steps = _settled(predict(program, ideal))
    # copied, the temporary ones, computed; the temporary at the first waitall; copied at its
    # drop; computed at the last waitall (waiting for a run of drops, it would go with copied)
    assert cpu_steps == [16, 32, 48, 32, 16, 0]


def test_runs_handed_over_on_two_threads_lose_and_repeat_nothing():
    """Two threads dropping results at once, each handing runs over (a collection on a worker
    thread does so): every buffer comes back, and none twice (the cache holds each once)."""
    import sys

    with realexec.session(workers=1, engine="native") as nd:
        pool = nd._backend.pools["cpu"]
        x = nd.ones((4,))
        kept = [_results(nd, x, 600) for _ in range(2)]

        def drop(results):
            while results:
                results.pop()

        threads = [threading.Thread(target=drop, args=(k,)) for k in kept]
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # the threads take turns inside the hand-overs
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            sys.setswitchinterval(interval)
        nd.waitall()
        assert pool.live_bytes == x.nbytes
        cached = [id(a) for a in pool.cache.free[512]]
        assert len(set(cached)) == len(cached)


def test_the_model_prices_each_drop_by_the_path_the_engine_takes():
    """A small result whose op is done costs `free` to drop, one whose op still runs
    `free_pending` (the engine keeps its deletion waiting), one too large for a run
    `free_large` (given back alone); without runs of drops every drop costs `free`."""
    import dataclasses

    from asyncsim import Profile, predict

    def program(nd):
        small, large = nd.ones((4,)), nd.ones((2 * DROP_BYTES // 4,))
        done = small + 1
        nd.waitall()
        del done  # its op is done
        running = small + 1
        del running  # dropped as soon as issued: its op (a millisecond) still runs
        bigger = large + 1
        nd.waitall()
        del bigger
        nd.waitall()

    ideal = dataclasses.replace(Profile.ideal(t1=1e-6, t2=1e-3, t3=1e-6), free=2e-6,
                                free_pending=5e-6, free_large=7e-6)
    batched = dataclasses.replace(ideal, native=1, drop_batch=DROP_BATCH)

    def drops(profile):
        frees = [s for s in predict(program, profile).spans_of("frontend", "issue")
                 if s.name == "free"]
        return [round((s.end - s.start) * 1e6, 6) for s in frees]

    # the three named drops, then the inputs (small, large) at the program's end
    assert drops(batched) == [2.0, 5.0, 7.0, 2.0, 7.0]
    assert drops(ideal) == [2.0] * 5


def test_the_model_takes_take_off_the_issues_whose_outputs_take_kept_results():
    """A run of done results dropped and kept: the next outputs of their shape and dtype take
    them, and each of those issues costs `take` less; an output of another dtype, or one made
    after a blocker gave the kept ones back, costs the full price; without runs, nothing is
    kept and `take` changes nothing."""
    import dataclasses

    from asyncsim import Profile, predict

    def program(nd):
        x = nd.ones((4,))
        made = [x + 1 for _ in range(DROP_BATCH)]
        nd.waitall()
        del made  # a full run, its ops done: kept
        taking = [x + 1 for _ in range(3)]  # these take three of them
        other = nd.ones((4,), dtype="float64")  # another dtype: from the pool
        nd.waitall()  # the kept ones go back
        after = x + 1
        nd.waitall()
        del taking, other, after

    ideal = dataclasses.replace(Profile.ideal(t1=4e-6, t2=1e-6, t3=1e-6), free=1e-6)
    batched = dataclasses.replace(ideal, native=1, drop_batch=DROP_BATCH)

    def issues(profile):
        spans = [s for s in predict(program, profile).spans_of("frontend", "issue")
                 if s.name != "free"]
        return [round((s.end - s.start) * 1e6, 6) for s in spans]

    full = [4.0] * (1 + DROP_BATCH + 5)
    assert issues(batched) == full
    taken = issues(dataclasses.replace(batched, take=1.5e-6))
    assert taken[:1 + DROP_BATCH] == full[:1 + DROP_BATCH]
    assert taken[1 + DROP_BATCH:] == [2.5, 2.5, 2.5, 4.0, 4.0]
    assert issues(dataclasses.replace(ideal, take=1.5e-6)) == full


_SOURCES = [((4,), "float32"), ((4,), "float64"), ((2, 2), "float32")]
_COUNTS = st.sampled_from([1, 5, DROP_BATCH - 1, DROP_BATCH, DROP_BATCH + 8, 3 * DROP_BATCH])
_ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("make"), st.integers(0, len(_SOURCES) - 1), _COUNTS),
    st.tuples(st.just("drop"), _COUNTS),
    st.tuples(st.just("wait"))), min_size=1, max_size=8)


def _program_of(actions):
    """A program that makes small results (each run of them waited for, so every drop finds its
    ops done, in the engine as in the model), drops the newest ones and waits, in `actions`'
    order."""
    def program(nd):
        sources = [nd.ones(shape, dtype=dtype) for shape, dtype in _SOURCES]
        nd.waitall()
        held = []
        for action in actions:
            if action[0] == "make":
                held.extend(sources[action[1]] + 1 for _ in range(action[2]))
                nd.waitall()
            elif action[0] == "drop":
                del held[max(0, len(held) - action[1]):]
            else:
                nd.waitall()
        nd.waitall()
    return program


@settings(max_examples=25, deadline=None)
@given(actions=_ACTIONS, mode=st.sampled_from(["async", "sync"]))
@example(actions=[("make", 0, DROP_BATCH), ("drop", DROP_BATCH), ("make", 1, 5),
                  ("make", 0, 5)], mode="async")  # a kept float32 run, then float64 results
def test_the_model_keeps_and_takes_back_the_runs_as_the_engine_does(actions, mode):
    """For any order of made, dropped and waited-for small results of a few shapes and dtypes,
    in either mode, the model's memory curve is the engine's, step for step: the same runs
    kept, the same results taking their buffers (by shape and dtype), the same given back at
    each blocker."""
    import dataclasses

    from asyncsim import Profile, predict

    program = _program_of(actions)
    ideal = dataclasses.replace(Profile.ideal(t1=1e-6, t2=1e-6, t3=1e-6), free=1e-6,
                                native=1, drop_batch=DROP_BATCH)
    assert (_steps(realexec.run(program, workers=1, mode=mode, engine="native"))
            == _steps(predict(program, ideal, mode=mode)))


def _steps(trace) -> list[int]:
    """Live bytes on cpu after each memory sample that changed them, in order (each sample,
    not each instant: the model gives a run's bytes back in one sample, as the engine does)."""
    values = [nbytes for _, device, nbytes in trace.memory if device == "cpu"]
    return [v for i, v in enumerate(values) if v and (i == 0 or v != values[i - 1])]


def test_calibration_scales_the_saving_to_t1s_pace():
    """The take bursts run slower than t1's hot loop: their saving is taken off t1 at t1's pace
    (scaled by t1 over the pool burst's time), and never scaled up."""
    from realexec.calibration.calibrate import _take

    raw = {"take": {"take": 1.4e-6, "kept": 2.0e-6, "pool": 3.4e-6}}
    assert _take(raw, 2.9e-6) == pytest.approx(1.4e-6 * 2.9 / 3.4)
    assert _take(raw, 4.0e-6) == pytest.approx(1.4e-6)
    assert _take({"take": {"take": 0.0, "kept": 0.0, "pool": 0.0}}, 2.9e-6) == 0.0
