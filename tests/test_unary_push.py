"""`realexec.unary`: the commonest push written out in one frame. Any program of elementwise ops
over one array, with handles dropped at random, gives numpy's values in both modes, on one and
two workers and under `max_inflight`; the ops take the written-out push (the general `issue`
sees none of them) unless `max_inflight` sends them to the general push; every op leaves one
issue span and one exec span; and once every handle is gone the pool holds what it held before.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import realexec

# an elementwise op of one array as nd calls it and as numpy computes it (float32 throughout)
STEPS = {
    "add": (lambda a, s: a + s, lambda a, s: a + np.float32(s)),
    "sub": (lambda a, s: a - s, lambda a, s: a - np.float32(s)),
    "rsub": (lambda a, s: s - a, lambda a, s: np.float32(s) - a),
    "mul": (lambda a, s: a * s, lambda a, s: a * np.float32(s)),
    "neg": (lambda a, s: -a, lambda a, s: -a),
    "relu": (lambda a, s: a.relu(), lambda a, s: np.maximum(a, np.float32(0))),
    "copy": (lambda a, s: a.copy(), lambda a, s: a.copy()),
}

programs = st.lists(
    st.tuples(st.sampled_from(sorted(STEPS)),
              st.sampled_from([-2.0, -0.5, 0.0, 1.0, 3.0]),
              st.integers(0, 3),  # which live array the step reads (modulo how many there are)
              st.booleans()),  # whether the array it read is dropped after
    min_size=1, max_size=40)


@settings(max_examples=25, deadline=None)
@given(program=programs, shape=st.sampled_from([(1, 2), (3,), (2, 5)]),
       setting=st.sampled_from([("async", 1, None), ("async", 2, None), ("sync", 1, None),
                                ("async", 2, 3)]))
def test_any_program_of_one_array_ops_gives_numpys_values(program, shape, setting):
    mode, workers, max_inflight = setting
    start = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) - 2
    with realexec.session(workers=workers, mode=mode, max_inflight=max_inflight) as nd:
        backend = nd._backend
        pool = backend.pools["cpu"]
        general, pushed = [], []
        issue, push_native = backend.issue, backend.engine.push_native
        backend.issue = lambda op, *rest: general.append(op.name) or issue(op, *rest)
        backend.engine.push_native = lambda *args, **kw: (pushed.append(args[11])
                                                          or push_native(*args, **kw))
        live, want = [nd.array(start)], [start]
        nd.waitall()
        before = pool.live_bytes - start.nbytes
        for name, scalar, pick, drop in program:
            k = pick % len(live)
            ours, theirs = STEPS[name]
            live.append(ours(live[k], scalar))
            want.append(theirs(want[k], scalar))
            if drop and len(live) > 1:
                del live[k], want[k]
        for got, expected in zip(live, want, strict=True):
            np.testing.assert_array_equal(got.asnumpy(), expected)
        nd.waitall()
        trace = backend.trace()
        backend.issue = issue
        del backend.engine.push_native
        del live, got
        nd.waitall()  # the drops handed over, the kept ones given back
        assert pool.live_bytes == before
    issued = [s.name for s in trace.spans_of("frontend", "issue")]
    execs = [s for s in trace.spans if s.kind == "exec"]
    assert len(issued) == len(execs) == 1 + len(program)
    # no step builds records for `issue`; the written-out push takes every step of the
    # compiled worker's elementwise ops (copy is not one of them), or none under `max_inflight`
    assert general == ["array"]
    copies = sum(name == "copy" for name, *_ in program)
    assert pushed[0] == "array" and len(pushed) == 1 + (len(program) if max_inflight else copies)
    assert max_inflight or set(pushed[1:]) <= {"copy"}
