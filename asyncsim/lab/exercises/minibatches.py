"""Exercises 2 and 3 of 12.2 (seed 001): how a training loop synchronises its minibatches.

Both answers are training loops in the form of 12.2.4's (`asyncsim.lab.scenarios.memory`: its
`data_iter`, `get_net` and `loss`), called as `workload(nd, num_batches, batch_size, num_inputs,
num_hiddens)`. A minibatch is read off the Program: it begins where its data
(`nd.random.normal` of shape (batch_size, num_inputs)) is made and runs to the next one; only
the last `num_batches` (per device) count, so a warm-up batch before the loop is left out. The
checks run on the model with the book's profile (one CPU worker, a GPU); neither question is
about this machine, so nothing runs on the engine.

- 12.2-2: an overlap of one minibatch: batch t finishes before batch t+2 begins (the first op of
  a batch to start on a lane, the last to end), yet some neighbours do overlap.
- 12.2-3: minibatches on the CPU and the GPU: the two devices must compute at the same time for
  at least half of the shorter one's busy time, and the frontend must not run more than two
  rounds ahead (at most two minibatches per device in flight, from the first op issued to the
  last one finished), or memory grows as in 12.2.4.
Units: seconds; memory in MiB.
"""

from __future__ import annotations

from asyncsim.lab.exercises import facts
from asyncsim.lab.exercises.base import Exercise, Fail, Result, ms, predict, record_answer
from asyncsim.lab.scenarios.memory import get_net, loss, memory_overlap
from asyncsim.model.profile import Profile

_EN = "001_c4db6a957a3c16a4.txt"
MIB = 2.0**20
PARAMS_2 = dict(num_batches=8, batch_size=1024, num_inputs=512, num_hiddens=(2048, 512))
PARAMS_3 = dict(num_batches=6, batch_size=1024, num_inputs=512, num_hiddens=(2048, 512))
MIN_SHARED = 0.5  # of the shorter device's busy time, for 12.2-3
ROUNDS_AHEAD = 2  # minibatches per device in flight at most, for 12.2-3


def _minibatches(program, params, per_device=1):
    """Op ids per minibatch (the last num_batches x per_device), or a Fail saying what is
    missing."""
    shape = (params["batch_size"], params["num_inputs"])
    wanted = params["num_batches"] * per_device

    def is_data(op):
        return op.name in ("normal", "uniform") and program.vars[op.out].shape == shape

    batches = facts.groups(program, is_data)
    if len(batches) < wanted:
        raise Fail(f"the check called your loop with num_batches={params['num_batches']}, but "
                   f"it made the data of only {len(batches)} minibatches of shape {shape}; "
                   f"make each batch's X with nd.random.normal, e.g. through data_iter(nd, "
                   f"num_batches, batch_size, num_inputs)")
    return batches[-wanted:]


# -- 12.2-2 -------------------------------------------------------------------------------------
def grade_overlap(workload) -> Result:
    program = record_answer(workload, **PARAMS_2)
    batches = _minibatches(program, PARAMS_2)
    pred = predict(program, Profile.preset("book"))
    traces = {"predicted": pred}
    windows = facts.op_windows(pred)
    spans = [facts.group_window(ids, windows) for ids in batches]
    peak = pred.peak_bytes("cpu") / MIB
    most = facts.most_in_flight([a for a, _ in spans], [b for _, b in spans])
    for t in range(len(spans) - 2):
        if spans[t + 2][0] < spans[t][1]:
            raise Fail(f"batch {t + 3} began ({ms(spans[t + 2][0])}) before batch {t + 1} "
                       f"finished ({ms(spans[t][1])}), so more than one minibatch overlaps "
                       f"batch {t + 1}: up to {most} were in flight at once and peak memory "
                       f"reached {peak:.0f} MiB (predicted for the book's machine). Wait for "
                       f"batch t before you issue batch t+2", traces)
    pairs = [t for t in range(len(spans) - 1) if spans[t + 1][0] < spans[t][1]]
    if not pairs:
        raise Fail(f"no two minibatches overlapped: batch 2 began ({ms(spans[1][0])}) only "
                   f"after batch 1 had finished ({ms(spans[0][1])}). That is 12.2.4's loop "
                   f"with a barrier per batch; for an overlap of one, issue batch t+1 before "
                   f"you wait for batch t", traces)
    t = pairs[0]
    return Result(True, f"every minibatch finished before the one two after it began, and "
                        f"{len(pairs)} of the {len(spans) - 1} pairs of neighbours overlapped "
                        f"(batch {t + 2} began at {ms(spans[t + 1][0])}, before batch {t + 1} "
                        f"finished at {ms(spans[t][1])}): at most {most} minibatches in flight, "
                        f"peak memory {peak:.0f} MiB (predicted for the book's machine)", traces)


# -- 12.2-3 -------------------------------------------------------------------------------------
def cpu_gpu_rounds(nd, num_batches=20, batch_size=1024, num_inputs=512, num_hiddens=(2048, 512)):
    """12.2-3's answer: no, do not synchronise after every minibatch once two devices share the
    work. Waiting for each minibatch before issuing the next leaves one device idle while the
    other computes. Issue one minibatch on each device, then wait for both: the CPU and the GPU
    compute at the same time, and the frontend stays one round ahead at most, so memory stays
    bounded (waiting only at the end would let the queue, and memory, grow as in 12.2.4).
    """
    devices = [nd.cpu(), nd.gpu(0)]
    nets = [get_net(nd, num_inputs, num_hiddens, ctx=ctx) for ctx in devices]

    def minibatch(net, ctx):
        X = nd.random.normal(shape=(batch_size, num_inputs), ctx=ctx)
        y = nd.ones((batch_size, 1), ctx=ctx)
        return loss(y, net(X))

    for net, ctx in zip(nets, devices, strict=True):
        minibatch(net, ctx).wait_to_read()  # warm-up: parameters exist before timing

    with nd.benchmark('sync after each round'):
        for _ in range(num_batches):
            losses = [minibatch(net, ctx) for net, ctx in zip(nets, devices, strict=True)]
            for l in losses:  # noqa: E741 (the book's name)
                l.wait_to_read()


def _clip(intervals, lo, hi):
    return [(max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi]


def grade_cpu_gpu(workload) -> Result:
    program = record_answer(workload, **PARAMS_3)
    batches = _minibatches(program, PARAMS_3, per_device=2)
    ops = {op.id: op for op in program.ops}
    devices = sorted({ops[ids[0]].device for ids in batches})
    if "cpu" not in devices or not any(d.startswith("gpu") for d in devices):
        raise Fail(f"all your minibatches ran on {', '.join(devices)}: give each round one "
                   f"minibatch on nd.cpu() and one on nd.gpu(0)")
    pred = predict(program, Profile.preset("book"))
    traces = {"predicted": pred}
    windows, issued = facts.op_windows(pred), facts.issue_starts(pred)
    spans = [facts.group_window(ids, windows) for ids in batches]
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    cpu = _clip(facts.busy(pred, lambda lane: lane.startswith("cpu/")), lo, hi)
    gpu = _clip(facts.busy(pred, lambda lane: lane.startswith("gpu")), lo, hi)
    shared = facts.overlap(cpu, gpu) / max(min(facts.total(cpu), facts.total(gpu)), 1e-12)
    flight = facts.most_in_flight([issued[ids[0]] for ids in batches], [b for _, b in spans])
    peak = pred.peak_bytes("cpu") / MIB
    if shared < MIN_SHARED:
        raise Fail(f"the CPU and the GPU computed at the same time for only {shared:.0%} of the "
                   f"faster one's busy time (predicted for the book's machine): you wait for "
                   f"each minibatch before issuing the next, so one device idles while the other "
                   f"works. Issue a minibatch on each device, then wait for both", traces)
    if flight > ROUNDS_AHEAD * 2:
        raise Fail(f"up to {flight} minibatches were queued or running at once: the frontend "
                   f"ran about {flight // 2} rounds ahead of the devices, so memory grows with "
                   f"the epoch as in 12.2.4 (peak {peak:.0f} MiB on the CPU, predicted for the "
                   f"book's machine). Keep a blocker per round, after both devices' minibatches "
                   f"are issued", traces)
    return Result(True, f"the CPU and the GPU computed at the same time for {shared:.0%} of the "
                        f"faster one's busy time, and at most {flight} minibatches were in "
                        f"flight (peak {peak:.0f} MiB on the CPU), predicted for the book's "
                        f"machine: synchronise once per round, not after every minibatch",
                  traces)


EXERCISES = [
    Exercise(
        "12.2-2", "a training loop with an overlap of one minibatch (graded on the model)",
        "How would you need to modify the training loop if you wanted to have an overlap of one "
        "minibatch each? I.e., if you wanted to ensure that batch b_t finishes before batch "
        "b_{t+2} commences? (Answer with a loop in the form of 12.2.4's: workload(nd, "
        "num_batches, batch_size, num_inputs, num_hiddens).)",
        f"12.2.6 exercise 2 ({_EN})", memory_overlap, grade_overlap),
    Exercise(
        "12.2-3", "minibatches on the CPU and the GPU: when to synchronise (graded on the model)",
        "What might happen if we want to execute code on CPUs and GPUs simultaneously? Should "
        "you still insist on synchronizing after every minibatch has been issued? (Answer with "
        "a loop that trains one minibatch per device per round: workload(nd, num_batches, "
        "batch_size, num_inputs, num_hiddens).)",
        f"12.2.6 exercise 3 ({_EN})", cpu_gpu_rounds, grade_cpu_gpu),
]
