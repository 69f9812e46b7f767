"""Exercises 1 and 4 of 12.2 (seed 001; the Chinese 8.2's one exercise, seed 000, is the first).

- 12.2-1 (open): why must 1000 t2 > 999 t1 for the total to be t1 + 1000 t2 + t3? The worked
  answer, and a demonstration that simulates the loop on constant costs on both sides of the
  condition beside the book's formula and the exact one (`asyncsim.model.analytic`).
- 12.2-4 (graded, about this machine): measure the difference between waitall and wait_to_read.
  The answer is a workload `workload(nd, n=10, size=1000)` with regions 'wait_to_read' and
  'waitall', as the scenario `waitall_vs_wait_to_read` (the reference). The check reads the
  Program (what the blocker waits for, what was issued after it), predicts it on the book's
  profile and measures it here at a small size.
Units: seconds; sizes are matrix sides.
"""

from __future__ import annotations

from asyncsim.lab.exercises import facts
from asyncsim.lab.exercises.base import (
    Exercise,
    Fail,
    Result,
    WorkedAnswer,
    ms,
    predict,
    record_answer,
    run_on_engine,
)
from asyncsim.lab.scenarios.async_compute import waitall_vs_wait_to_read
from asyncsim.model import analytic
from asyncsim.model.profile import Profile
from asyncsim.model.simulate import simulate
from asyncsim.nd.program import Sync
from asyncsim.nd.record import record

_EN = "001_c4db6a957a3c16a4.txt"

# -- 12.2-1 -------------------------------------------------------------------------------------
ANSWER_1 = """\
The book's t1 + 1000 t2 + t3 is the time when the backend is the bottleneck: it starts once the
first op is issued (t1), then never idles while it runs the 1000 ops (1000 t2), and the final
blocker costs t3. Meanwhile the frontend is done issuing at 1000 t1. The backend finishes last
only if t1 + 1000 t2 > 1000 t1, i.e. 1000 t2 > 999 t1. Otherwise the frontend is the bottleneck:
the last op cannot start before it is issued at 1000 t1, and the loop takes 1000 t1 + t2 + t3.
12.2.3's own loop on a (1, 2) array is such a case: its 'asynchronous: 0.0769 sec' is 1000 issues
of an op that computes almost nothing. The exact time of the loop is
max(t1 + 1000 t2, 1000 t1 + t2) + t3.

A closer look: the condition is necessary for the book's formula but not sufficient. For the
backend never to idle, op i must be issued (at i t1) before op i - 1 ends (at t1 + (i - 1) t2),
i.e. t2 >= t1. When 999/1000 t1 < t2 < t1 the condition holds, yet the backend waits for the
frontend from the first op on, and the book's formula is short by 999 (t1 - t2).
Run `demo()` (or `demo(t1=..., t3=..., n=...)`) to see the model agree with the exact form."""


def async_loop(nd, n=1000, shape=(1, 2)):
    """12.2.3's asynchronous half: n times `y = x + 1`, then one waitall, in one region."""
    x = nd.ones(shape)
    nd.waitall()
    with nd.benchmark('asynchronous'):
        for _ in range(n):
            y = x + 1
        nd.waitall()
    del y


def demo(t1: float = 10e-6, t3: float = 20e-6, n: int = 1000,
         ratios: tuple[float, ...] = (0.5, 0.9995, 1.0, 2.0)) -> str:
    """The loop of n ops simulated on constant costs (t2 = ratio * t1), beside the book's
    formula and the exact one: a table in microseconds, one row per ratio."""
    rows = [f"n = {n}, t1 = {t1 * 1e6:g} us, t3 = {t3 * 1e6:g} us (constant costs, one worker)",
            f"{'t2/t1':>7s}  {'n t2 > (n-1) t1':>15s}  {'book: t1+n t2+t3':>16s}  "
            f"{'exact':>10s}  {'simulated':>10s}  bound by"]
    program = record(async_loop, n=n)
    for ratio in ratios:
        t2 = ratio * t1
        trace = simulate(program, Profile.ideal(t1=t1, t2=t2, t3=t3, workers=1))
        book = float(analytic.book_async_time(n, t1, t2, t3))
        exact = float(analytic.async_time(n, t1, t2, t3))
        holds = "yes" if n * t2 > (n - 1) * t1 else "no"
        bound = "backend" if analytic.regime(n, t1, t2) == "backend-bound" else "frontend"
        rows.append(f"{ratio:7g}  {holds:>15s}  {book * 1e6:13.1f} us  {exact * 1e6:7.1f} us  "
                    f"{trace.regions['asynchronous'] * 1e6:7.1f} us  {bound}")
    return "\n".join(rows)


# -- 12.2-4 -------------------------------------------------------------------------------------
MODEL_4 = dict(n=10, size=1000)  # the book's sizes, predicted on the book's profile
ENGINE_4 = dict(n=10, size=200)  # measured here: products of about a millisecond
WTR, WAITALL = "wait_to_read", "waitall"


def _waited_op(instrs) -> tuple[object, list]:
    """(the op whose result the region's wait_to_read waits for, the ops issued after it)."""
    at = next(k for k, instr in enumerate(instrs)
              if isinstance(instr, Sync) and instr.kind == WTR)
    sync = instrs[at]
    ops_before = facts.ops_of(instrs[:at])
    writer = next((op for op in reversed(ops_before) if op.out == sync.var), None)
    if writer is None:
        return None, []
    return writer, [op for op in ops_before if op.id > writer.id]


def _check_regions(program) -> None:
    for label, kind in ((WTR, WTR), (WAITALL, WAITALL)):
        if label not in program.regions():
            raise Fail(f"your workload has no region labelled '{label}': time each way of "
                       f"waiting in its own `with nd.benchmark('{label}'):` block "
                       f"(it has: {', '.join(program.regions()) or 'no region'})")
        kinds = [s.kind for s in facts.syncs_of(facts.region_instrs(program, label))]
        if kind not in kinds:
            raise Fail(f"region '{label}' never calls {kind}, so it does not measure it "
                       f"(its blockers: {', '.join(kinds) or 'none'})")
    if WAITALL in [s.kind for s in facts.syncs_of(facts.region_instrs(program, WTR))]:
        raise Fail(f"region '{WTR}' also calls waitall, so it waits for everything and "
                   f"measures waitall, not wait_to_read")


def grade_waitall(workload) -> Result:
    program = record_answer(workload, **MODEL_4)
    _check_regions(program)
    instrs = facts.region_instrs(program, WTR)
    writer, after = _waited_op(instrs)
    if writer is None:
        raise Fail(f"in region '{WTR}' you wait for an array made before the region, so the "
                   f"wait measures nothing issued in it: wait for an intermediate result "
                   f"computed inside")
    if not after:
        raise Fail(f"in region '{WTR}' you wait for the last op you issued ({writer.name}), so "
                   f"nothing is queued behind it and wait_to_read waits exactly as long as "
                   f"waitall would: issue more work after the intermediate result (the hint), "
                   f"then wait for the intermediate result")
    book = Profile.preset("book")
    pred = predict(program, book)
    start = dict((label, a) for label, a, _ in pred.marks)[WAITALL]
    own = facts.ops_of(facts.region_instrs(program, WAITALL))
    if not own:
        raise Fail(f"region '{WAITALL}' issues no work of its own, so its waitall has nothing "
                   f"to wait for: issue the same work as in '{WTR}', then call nd.waitall()")
    first = min(op.id for op in own)
    windows = facts.op_windows(pred)
    leftover = [i for i, (_, end) in windows.items() if i < first and end > start]
    if leftover:
        raise Fail(f"when region '{WAITALL}' began, {len(leftover)} ops issued before it were "
                   f"still queued or running (predicted on the book's machine), so its waitall "
                   f"waited for them too and the comparison is unfair: drain them with "
                   f"nd.waitall() between the two regions", {"predicted": pred})
    t_wtr, t_all = pred.regions[WTR], pred.regions[WAITALL]
    end_wtr = dict((label, b) for label, _, b in pred.marks)[WTR]
    queued = sum(1 for op in after if windows[op.id][1] > end_wtr)
    if not t_wtr < t_all:
        raise Fail(f"the ops after the intermediate result cost nothing to wait for: "
                   f"wait_to_read {ms(t_wtr)} and waitall {ms(t_all)} on the book's machine; "
                   f"issue real work after it (more products)", {"predicted": pred})
    # one worker, MXNet's default: a second would leave the frontend no core of its own on a
    # two-core machine, and its wait would end when the scheduler lets it, not with the product
    meas, _ = run_on_engine(workload, workers=1, **ENGINE_4)
    m_wtr, m_all = meas.regions[WTR], meas.regions[WAITALL]
    noise = "" if m_wtr < m_all else (" (no difference here: other work on this machine "
                                      "drowned it; run the check again when it is quiet)")
    return Result(True, f"wait_to_read returned once the intermediate {writer.name} was done, "
                        f"with {queued} of the {len(after)} ops issued after it still queued "
                        f"or running: {ms(t_wtr)} against waitall's {ms(t_all)}, which waits "
                        f"for all of them (predicted for the book's machine at size "
                        f"{MODEL_4['size']}); measured here at size {ENGINE_4['size']}: "
                        f"{ms(m_wtr)} against {ms(m_all)}{noise}",
                  {"predicted": pred, "measured": meas})


EXERCISES = [
    Exercise(
        "12.2-1", "why the book assumes 1000 t2 > 999 t1 (open: worked answer and demo)",
        "We mentioned above that using asynchronous computation can reduce the total amount of "
        "time needed to perform 1000 computations to t1 + 1000 t2 + t3. Why do we have to "
        "assume 1000 t2 > 999 t1 here?",
        f"12.2.6 exercise 1 ({_EN}); 8.2 exercise (000_6080be87bce40d23.txt)",
        WorkedAnswer(ANSWER_1, demo), aliases=("8.2-1",)),
    Exercise(
        "12.2-4", "measure waitall against wait_to_read (graded, measured here)",
        "Measure the difference between waitall and wait_to_read. Hint: perform a number of "
        "instructions and synchronize for an intermediate result. (Answer with "
        "workload(nd, n=10, size=1000) timing regions 'wait_to_read' and 'waitall'.)",
        f"12.2.6 exercise 4 ({_EN})", waitall_vs_wait_to_read, grade_waitall, machine=True),
]
