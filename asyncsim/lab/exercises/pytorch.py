"""The exercise of the PyTorch edition's asynchronous-computation page (seed 004).

pytorch-1: benchmark the page's matrix products on the CPU: is asynchrony still visible through
the backend? The answer is the page's warm-up with its products on the CPU, a workload
`workload(nd, n=10, size=1000)` timing region 'torch' (issue the products, no wait) and region
'Done' (issue them again, then nd.waitall(), the page's torch.cuda.synchronize). The check grades
that design from the Program, then runs it both ways here and on the book's profile: PyTorch's
CPU ops run inside the call, which is realexec's mode='sync' (MXNet's NaiveEngine); MXNet's
engine (mode='async') queues them. In sync mode 'torch' takes as long as 'Done': the worked
answer is no.
Units: seconds; sizes are matrix sides.
"""

from __future__ import annotations

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
from asyncsim.model.profile import Profile

_PT = "004_344996d425b31308.txt"
MODEL = dict(n=10, size=1000)  # the page's sizes, predicted for the book's machine
ENGINE = dict(n=10, size=200)  # measured here


def cpu_products(nd, n=10, size=1000):
    """pytorch-1's answer: the page's products on the CPU, queued ('torch') and waited ('Done').

    No: PyTorch runs CPU ops inside the call (there is no backend queue for the CPU), so 'torch'
    takes as long as 'Done' and nothing is left to observe. Only a backend thread that takes
    the ops from a queue, as MXNet's engine (or PyTorch's GPU streams), makes 'torch' short.
    """
    device = nd.cpu()
    with nd.benchmark('torch'):
        for _ in range(n):
            a = nd.random.normal(shape=(size, size), ctx=device)
            b = nd.dot(a, a)

    with nd.benchmark('Done'):
        for _ in range(n):
            a = nd.random.normal(shape=(size, size), ctx=device)
            b = nd.dot(a, a)
        nd.waitall()  # torch.cuda.synchronize(device) on the page; nothing to wait for on a CPU
    del b


def _design(program) -> tuple[str, str]:
    elsewhere = sorted({op.device for op in program.ops if op.device != "cpu"})
    if elsewhere:
        raise Fail(f"your products run on {', '.join(elsewhere)}: the exercise asks for the CPU "
                   f"(make the arrays with ctx=nd.cpu(), or without a ctx)")
    torch, done = facts.region_label(program, "torch"), facts.region_label(program, "done")
    if torch is None or done is None:
        raise Fail(f"time the products in a region 'torch' (no wait) and again in a region "
                   f"'Done' that waits at its end, as the page does (your regions: "
                   f"{', '.join(program.regions()) or 'none'})")
    for label in (torch, done):
        if not facts.ops_of(facts.region_instrs(program, label)):
            raise Fail(f"region '{label}' issues no op: put the products inside it")
    waits = facts.syncs_of(facts.region_instrs(program, torch))
    if waits:
        raise Fail(f"region '{torch}' waits ({waits[0].kind}) for its products, so it cannot "
                   f"show whether they were only queued: leave the waiting to '{done}'")
    if not facts.syncs_of(facts.region_instrs(program, done)):
        raise Fail(f"region '{done}' never waits: end it with nd.waitall() (the page's "
                   f"torch.cuda.synchronize)")
    return torch, done


def grade_cpu(workload) -> Result:
    program = record_answer(workload, **MODEL)
    torch, done = _design(program)
    book = Profile.preset("book")
    pred, pred_sync = predict(program, book), predict(program, book, mode="sync")
    meas, _ = run_on_engine(workload, workers=1, **ENGINE)
    meas_sync, _ = run_on_engine(workload, workers=1, mode="sync", **ENGINE)

    def pair(trace):
        return f"'{torch}' {ms(trace.regions[torch])}, '{done}' {ms(trace.regions[done])}"

    return Result(True, f"run as PyTorch runs CPU ops, inside each call (mode='sync'), it took "
                        f"{pair(meas_sync)} here: every product had finished before its call "
                        f"returned, so no asynchrony is left to see. Through a backend queue "
                        f"(MXNet's engine, mode='async') the same code took {pair(meas)}: "
                        f"'{torch}' only queued the work. Predicted for the book's machine: "
                        f"sync {pair(pred_sync)}; async {pair(pred)}",
                  {"predicted": pred, "predicted, sync": pred_sync, "measured": meas,
                   "measured, sync": meas_sync})


EXERCISES = [
    Exercise(
        "pytorch-1", "the page's products on the CPU: is asynchrony still visible? (graded, "
                     "measured here)",
        "On the CPU, benchmark the same matrix multiplications as in this section. Can you "
        "still observe asynchrony through the backend? (Answer with workload(nd, n=10, "
        "size=1000) timing regions 'torch' and 'Done'.)",
        f"PyTorch 异步计算, exercise 1 ({_PT})", cpu_products, grade_cpu, machine=True),
]
