"""The model of light results (`asyncsim.model.light`): which ops it prices as light pushes,
what their drops cost, when their buffers come back (never before every op on them has
finished), and the same rules as realexec's light engine where both are exact (sync mode)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import realexec
from asyncsim import Profile, predict
from asyncsim.model import simulate as sim
from asyncsim.model.light import LIGHT_BYTES, LIGHT_OPS
from asyncsim.model.profile import Cost
from realexec.cpu.worker import UNARY
from realexec.engine import light as engine_light

LIGHT, LIGHT_FLUSH, FREE = 0.5e-6, 0.3e-6, 0.7e-6


def _profile(**kv) -> Profile:
    base = dict(name="light", t1=1e-6, t3=2e-6, workers=1, cores=2, native=1, table=1024,
                drop_batch=32, free=FREE, light=LIGHT,
                light_flush=LIGHT_FLUSH, costs={"cpu:*": Cost(latency=2e-6, bandwidth=4e9)})
    base.update(kv)
    return Profile(**base)


def _issues(trace, name: str) -> list[float]:
    return [s.end - s.start for s in trace.spans if s.kind == "issue" and s.name == name]


def loop(nd, n=20, shape=(1, 2)):
    x = nd.ones(shape)
    nd.waitall()
    for _ in range(n):
        y = x + 1  # noqa: F841 -- each result dropped by the next
    nd.waitall()


def test_the_model_takes_the_engines_light_ops():
    assert set(UNARY) == LIGHT_OPS
    assert engine_light.LIGHT_BYTES == LIGHT_BYTES


def test_an_op_whose_input_is_still_being_written_is_not_light():
    def chained(nd):
        x = nd.ones((4,))  # its op still runs at the next push
        y = x + 1  # noqa: F841

    assert _issues(predict(chained, _profile()), "add_scalar") == pytest.approx([1e-6])


def test_a_light_push_and_its_drop_cost_their_prices():
    trace = predict(loop, _profile())
    assert _issues(trace, "add_scalar") == pytest.approx([LIGHT] * 20)
    # each drop is held for the next push, whose price has it: no span of its own (x, an
    # ordinary var, is dropped at the shipped price)
    assert _issues(trace, "free") == pytest.approx([FREE])


def test_a_drop_while_one_is_held_deletes_that_one_at_its_flush_price():
    def kept(nd, n=10):
        x = nd.ones((4,))
        nd.waitall()
        results = [x * 2 for _ in range(n)]
        nd.waitall()
        del results[:]  # ten drops in a row

    frees = _issues(predict(kept, _profile()), "free")  # (the first held: no span)
    assert frees == pytest.approx([LIGHT_FLUSH] * 9 + [FREE])  # (then x's, at the end)


@pytest.mark.parametrize("case", ["large", "three dims", "two arrays", "max_inflight",
                                  "shipped engine", "python engine"])
def test_other_ops_keep_their_issue_price(case):
    kwargs, profile = {}, _profile()
    if case == "large":
        kwargs = {"shape": (1, LIGHT_BYTES // 4 + 1)}
    elif case == "three dims":
        kwargs = {"shape": (2, 2, 2)}
    elif case == "shipped engine":
        profile = _profile(light=0.0)
    elif case == "python engine":
        profile = _profile(native=0)
    if case == "two arrays":
        def workload(nd):
            x = nd.ones((1, 2))
            for _ in range(5):
                y = x + x  # noqa: F841
        trace, name = predict(workload, profile), "add"
    else:
        trace = predict(loop, profile, max_inflight=2 if case == "max_inflight" else None,
                        **kwargs)
        name = "add_scalar"
    assert _issues(trace, name) and all(d == pytest.approx(1e-6) for d in _issues(trace, name))


def test_a_result_another_op_adopted_is_dropped_by_the_shipped_rules():
    def adopted(nd):
        x = nd.ones((4,))
        nd.waitall()
        y = x + 1
        y.wait_to_read()  # a blocker leaves it light
        del y
        y = x + 1
        z = y + y  # an op of another kind: Python adopts y, an ordinary var from here on
        del y, z

    # the first y's drop is held (no span); the second y's, adopted, z's and x's are the
    # shipped drops
    assert _issues(predict(adopted, _profile()), "free") == pytest.approx([FREE] * 3)


@pytest.mark.parametrize("kind", ["wait_to_read", "asnumpy", "print", "item"])
def test_a_blocker_on_a_light_result_leaves_it_light(kind):
    """It waits for the result's last write and reads its buffer where it lies: the values are
    numpy's, and the result has no Python var after it either."""
    with realexec.session(workers=1, engine="native-light") as nd:
        x = nd.ones((1,)) if kind == "item" else nd.ones((2, 2))
        x.wait_to_read()
        y = (x + 1) * 3
        got = getattr(y, kind)() if kind != "print" else str(y)
        assert nd._backend.vars.get(y.var) is None
        if kind == "asnumpy":
            assert got.tolist() == [[6.0, 6.0], [6.0, 6.0]]
        elif kind == "item":
            assert got == 6.0
        elif kind == "print":
            assert "6." in got


def steps():
    """Programs of light pushes over earlier results, drops, waits and ops of another kind."""
    step = st.one_of(st.tuples(st.just("push"), st.integers(0, 5), st.sampled_from(
                         ["add_scalar", "mul_scalar", "relu"])),
                     st.tuples(st.just("drop"), st.integers(0, 5)),
                     st.tuples(st.just("wait"), st.integers(0, 5)),
                     st.tuples(st.just("sum"), st.integers(0, 5)),
                     st.just(("waitall",)))
    return st.lists(step, min_size=1, max_size=30)


def program_of(plan):
    def workload(nd):
        live = [nd.ones((2, 3))]
        for s in plan:
            kind = s[0]
            if kind == "waitall":
                nd.waitall()
                continue
            a = live[s[1] % len(live)] if live else None
            if a is None:
                live.append(nd.ones((2, 3)))
            elif kind == "push":
                live.append(nd.relu(a) if s[2] == "relu" else a * 1.5 if s[2] == "mul_scalar"
                            else a + 1.0)
            elif kind == "drop":
                del live[s[1] % len(live)]
            elif kind == "wait":
                a.wait_to_read()
            else:
                live.append(a.sum())
    return workload


@settings(max_examples=60, deadline=None)
@given(plan=steps(), workers=st.integers(1, 3), light=st.floats(1e-7, 5e-6),
       latency=st.floats(1e-7, 2e-5))
def test_a_light_buffer_comes_back_after_every_op_on_it(plan, workers, light, latency):
    released = []
    original = sim._Model._release

    def spy(self, var, count=True):
        released.append((var, self.env.now, self))
        return original(self, var, count)

    sim._Model._release = spy
    try:
        trace = predict(program_of(plan), _profile(
            workers=workers, light=light, costs={"cpu:*": Cost(latency=latency)}))
    finally:
        sim._Model._release = original
    model = released[-1][2] if released else None
    if model is None:
        return
    ends: dict = {}  # var -> the end of the last op on it
    by_id = {s.op_id: s.end for s in trace.spans if s.kind == "exec"}
    for op in model.ops:
        for var in (*op.reads, op.out):
            ends[var] = max(ends.get(var, 0.0), by_id[op.id])
    for var, when, _ in released:
        assert when >= ends.get(var, 0.0) - 1e-15, f"var {var} back before its last op ended"
    live = [b for _, device, b in trace.memory if device == "cpu"]
    assert min(live) >= 0
    assert live[-1] == 0  # every buffer back once the program ends
    assert not model.light_late and model.light_held is None


def held_loop(nd, n=12):
    x = nd.ones((2, 3))
    nd.waitall()
    y = x + 1
    for _ in range(n):
        y = y * 2
        z = nd.relu(y)
    w = z + 0.5
    w.wait_to_read()
    big = nd.ones((40, 40)) + 1  # noqa: F841 -- not light: over LIGHT_BYTES
    nd.waitall()


def test_sync_mode_keeps_the_bytes_the_engine_keeps():
    """In sync mode every op is done at the next push on both halves: the bytes live during the
    loop of light results (x, the results in use and the one drop held) are the same."""
    def loop_peak(trace) -> int:
        live = [b for _, device, b in trace.memory if device == "cpu"]
        first_big = next(i for i, b in enumerate(live) if b > LIGHT_BYTES)
        return max(live[:first_big]), live[-1]

    predicted = predict(held_loop, _profile(), mode="sync")
    measured = realexec.run(held_loop, workers=1, mode="sync", engine="native-light")
    assert loop_peak(predicted) == loop_peak(measured)


def test_a_unary_op_not_from_a_method_is_light_too():
    """`nd.invoke` (as a gradient issues its ops) takes the light push, as the model assumes."""
    with realexec.session(workers=1, engine="native-light") as nd:
        x = nd.ones((2, 2))
        x.wait_to_read()
        y = nd.invoke("mul_scalar", x, scalar=3.0)
        assert nd._backend.vars.get(y.var) is None  # no Python var: a light result
        assert y.asnumpy().tolist() == [[3.0, 3.0], [3.0, 3.0]]
