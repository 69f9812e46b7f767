"""The exercises of 8.3, automatic parallelism (seed 002): experiments about this machine.

Each asks for an experiment, so each check grades the design from the Program (which ops depend
on which, where the blockers are) and reports what the experiment finds from the traces: on the
engine here with two CPU workers, and on the book's profile, which has MXNet's single CPU worker.

- 8.3-1: are run()'s ten independent products run in parallel? Regions 'independent ...' (ops
  that need nothing from each other, one blocker at the end) and 'dependent ...' (the same number
  of ops as a chain, the control). Reference: the scenario `independent_products`.
- 8.3-2: a computation with richer dependencies: some op must join two branches that are
  independent of each other, and the workload returns its result as numpy. The engine's result
  (asynchronous, two workers) must equal a serial run's (mode='sync': each op inside its call).
  Reference: the scenario `complex_dependencies`.
- 8.3-3: small ops gain from running side by side on one device: as 8.3-1, with every compared
  op small (under `SMALL` seconds on the book's profile). The check calls the workload with its
  own defaults, since choosing the size is the exercise. Reference: the scenario `small_ops`.
Units: seconds; sizes are matrix sides.
"""

from __future__ import annotations

import numpy as np

from asyncsim.lab.exercises import facts
from asyncsim.lab.exercises.base import (
    Exercise,
    Fail,
    Result,
    ms,
    predict,
    record_answer,
    run_on_engine,
)
from asyncsim.lab.scenarios.auto_parallel import (
    complex_dependencies,
    independent_products,
    small_ops,
)
from asyncsim.model.profile import Profile
from asyncsim.nd.ops import OPS

_ZH83 = "002_497eb3d3148709f0.txt"
MODEL_1 = dict(n=10, size=2000)  # run()'s products, predicted for the book's machine
ENGINE_1 = dict(n=10, size=300)  # measured here: a few milliseconds each
MODEL_2, ENGINE_2 = dict(size=1000), dict(size=200)
SMALL = 1e-3  # seconds on the book's profile: a product of a few hundred per side at most
LIMIT = 5.0  # seconds predicted for the book's machine: more is too long to measure in a check
MAX_OPS = 5000  # more takes the model itself seconds


def _compute_ops(instrs) -> list:
    return [op for op in facts.ops_of(instrs) if OPS[op.name].group != "create"]


def _design(program) -> tuple[str, str, list, list]:
    """(independent label, dependent label, their compute ops), or a Fail naming the flaw."""
    ind, dep = facts.region_label(program, "independent"), facts.region_label(program, "dependent")
    if ind is None or dep is None:
        raise Fail(f"time the two halves in regions labelled 'independent ...' and "
                   f"'dependent ...' (your regions: {', '.join(program.regions()) or 'none'})")
    ind_instrs = facts.region_instrs(program, ind)
    ind_ops, dep_ops = _compute_ops(ind_instrs), _compute_ops(facts.region_instrs(program, dep))
    if len(ind_ops) < 2:
        raise Fail(f"region '{ind}' computes {len(ind_ops)} op(s): it needs several to overlap")
    before = facts.ancestors(program)
    for op in ind_ops:
        used = [o for o in ind_ops if o.id in before[op.id]]
        if used:
            raise Fail(f"in region '{ind}', op {op.id} ({op.name}) uses the result of op "
                       f"{used[-1].id} ({used[-1].name}): those ops are not independent, so the "
                       f"engine must run them one after the other")
    compute = {id(op) for op in ind_ops}
    last = max(k for k, instr in enumerate(ind_instrs) if id(instr) in compute)
    early = facts.syncs_of(ind_instrs[:last])
    if early:
        raise Fail(f"region '{ind}' waits ({early[0].kind}) before its last op is issued: a "
                   f"blocker between independent ops keeps them from running together; wait "
                   f"once, at the end (nd.waitall())")
    for prev, op in zip(dep_ops, dep_ops[1:], strict=False):
        if prev.id not in before[op.id]:
            raise Fail(f"in region '{dep}', op {op.id} ({op.name}) does not need op {prev.id} "
                       f"before it: the control should be a chain, each op using the previous "
                       f"result (y = nd.dot(y, x)), so that nothing in it can overlap")
    if len(dep_ops) != len(ind_ops):
        raise Fail(f"region '{ind}' computes {len(ind_ops)} ops and '{dep}' {len(dep_ops)}: "
                   f"give both the same ops, or their times do not compare")
    return ind, dep, ind_ops, dep_ops


def _findings(pred, meas, ind, dep, ind_ops) -> str:
    ids = [op.id for op in ind_ops]
    most, lanes = facts.concurrency(meas, ids)
    p_most, _ = facts.concurrency(pred, ids)
    m_ind, m_dep = meas.regions[ind], meas.regions[dep]
    p_ind, p_dep = pred.regions[ind], pred.regions[dep]
    return (f"On this machine's engine with 2 CPU workers, up to {most} of the {len(ids)} "
            f"independent ops ran at once (on {', '.join(lanes)}), and '{ind}' took {ms(m_ind)} "
            f"against {ms(m_dep)} for '{dep}' (a speed-up of {m_dep / m_ind:.2f}). The book's "
            f"profile has MXNet's default of one CPU worker, which runs one op at a time (a "
            f"large product uses every core by itself): it predicts {p_most} at a time, "
            f"{ms(p_ind)} against {ms(p_dep)}")


def grade_independent(workload) -> Result:
    program = record_answer(workload, **MODEL_1)
    ind, dep, ind_ops, _ = _design(program)
    pred = predict(program, Profile.preset("book"))
    meas, _ = run_on_engine(workload, workers=2, **ENGINE_1)
    return Result(True, f"your experiment can tell: the ops of '{ind}' need nothing from each "
                        f"other and those of '{dep}' form a chain. "
                        f"{_findings(pred, meas, ind, dep, ind_ops)}",
                  {"predicted": pred, "measured": meas})


def grade_small(workload) -> Result:
    program = record_answer(workload)
    if len(program.ops) > MAX_OPS:
        raise Fail(f"your experiment issues {len(program.ops)} ops: use fewer (under "
                   f"{MAX_OPS}) so the check can predict and run it in a few seconds")
    ind, dep, ind_ops, _ = _design(program)
    book = Profile.preset("book")
    big = max(ind_ops, key=book.cost)
    if book.cost(big) >= SMALL:
        shape = "x".join(map(str, program.vars[big.out].shape))
        raise Fail(f"your ops are not small: {big.name} to {shape} takes {ms(book.cost(big))} "
                   f"on the book's machine, enough to keep every core busy by itself; make "
                   f"each op take under {ms(SMALL)} there (e.g. 100x100 products)")
    pred = predict(program, book)
    if pred.duration > LIMIT:
        raise Fail(f"your experiment is predicted to take {pred.duration:.1f} s on the book's "
                   f"machine: use fewer ops (under {LIMIT:g} s) so the check can run it here")
    meas, _ = run_on_engine(workload, workers=2)
    return Result(True, f"small ops ({ms(book.cost(big))} or less each on the book's machine), "
                        f"independent against chained. {_findings(pred, meas, ind, dep, ind_ops)}",
                  {"predicted": pred, "measured": meas})


def _join(program) -> tuple | None:
    """(a, b, j): ops a and b computed (not just made) independently, both needed by op j."""
    before = facts.ancestors(program)
    computed = {op.id: op for op in program.ops if op.reads}
    for op in program.ops:
        needs = sorted(i for i in before[op.id] if i in computed)
        for k, a in enumerate(needs):
            for b in needs[k + 1:]:
                if facts.independent(a, b, before):
                    return computed[a], computed[b], op
    return None


def _flat(value) -> list:
    if isinstance(value, tuple | list):
        return [x for v in value for x in _flat(v)]
    return [] if value is None else [np.asarray(value, dtype=np.float64)]


def grade_dependencies(workload) -> Result:
    program = record_answer(workload, **MODEL_2)
    found = _join(program)
    if found is None:
        raise Fail("no op of your graph joins two branches computed independently of each "
                   "other (each op waits for the one before it, or nothing is combined), so "
                   "there is nothing for the engine to run side by side: compute two results "
                   "from the same input and combine them in a later op")
    a, b, j = found
    meas, value = run_on_engine(workload, workers=2, **ENGINE_2)
    serial, expected = run_on_engine(workload, workers=1, mode="sync", **ENGINE_2)
    got, want = _flat(value), _flat(expected)
    if not got:
        raise Fail("your workload returns nothing the check can compare: return the result as "
                   "numpy (e.g. `return e.asnumpy()`)")
    if len(got) != len(want) or any(x.shape != y.shape for x, y in zip(got, want, strict=False)):
        raise Fail("your workload returned differently shaped results in two runs")
    error = max(float(np.max(np.abs(x - y) / (np.abs(y) + 1e-6))) for x, y in
                zip(got, want, strict=True))
    if error > 1e-3:
        raise Fail(f"the engine's result differs from a serial run's by {error:.1e} (relative): "
                   f"an op ran before what it reads was written", {"measured": meas})
    book = Profile.preset("book")
    pred, pred_sync = predict(program, book), predict(program, book, mode="sync")
    return Result(True, f"op {a.id} ({a.name}) and op {b.id} ({b.name}) are independent and op "
                        f"{j.id} ({j.name}) joins them. The engine (asynchronous, 2 workers) "
                        f"gave the same result as running each op inside its call "
                        f"(mode='sync'; largest relative difference {error:.0e}); here it took "
                        f"{ms(meas.duration)} against {ms(serial.duration)} serially. The book's "
                        f"profile (one CPU worker) predicts {ms(pred.duration)} against "
                        f"{ms(pred_sync.duration)}",
                  {"predicted": pred, "measured": meas, "measured, serial": serial})


EXERCISES = [
    Exercise(
        "8.3-1", "does the engine run run()'s ten independent products in parallel? (graded, "
                 "measured here)",
        "The run function defined in this section does 10 operations with no dependencies "
        "between them. Design an experiment to see whether MXNet runs them in parallel "
        "automatically. (Answer with workload(nd, n=10, size=2000) timing regions "
        "'independent ...' and 'dependent ...'.)",
        f"8.3.4 exercise 1 ({_ZH83})", independent_products, grade_independent, machine=True),
    Exercise(
        "8.3-2", "a computation with richer dependencies: right result, faster? (graded, "
                 "measured here)",
        "Design computations with more complex data dependencies, and see by experiment "
        "whether MXNet gets the right result and improves performance. (Answer with "
        "workload(nd, size=1000) that returns its result as numpy.)",
        f"8.3.4 exercise 2 ({_ZH83})", complex_dependencies, grade_dependencies, machine=True),
    Exercise(
        "8.3-3", "small ops in parallel on one device (graded, measured here)",
        "When an operator's computation is small enough, running in parallel on just the CPU "
        "or a single GPU may also improve performance. Design an experiment to verify this. "
        "(Answer with workload(nd) whose defaults are your sizes, timing regions "
        "'independent ...' and 'dependent ...'.)",
        f"8.3.4 exercise 3 ({_ZH83})", small_ops, grade_small, machine=True),
]
