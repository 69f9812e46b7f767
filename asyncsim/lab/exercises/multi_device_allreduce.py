"""Exercise 8.4-3, a more efficient allreduce (graded, run here): the English d2l 12.5's third
(the Chinese 8.4 prints none). The answer is a function `allreduce(grads)` that leaves in every
`grads[c][i]` (parameter i's gradient on device c) the sum over c, in place. On the engine with
CPU devices (LeNet's arrays) every array must hold the sum; on the model (`GPUS_3` GPUs of the
book's GPU machine, arrays of 4 MiB) it must be predicted `multi_device.MIN_GAIN` faster than
the section's allreduce applied to each parameter (`section_allreduce`). The check runs the
answer inside its own workload through `multi_device`'s shared functions.
Units: seconds; sizes are array sides.
"""

from __future__ import annotations

import numpy as np

from asyncsim.gluon.kvstore import reduce_on_first
from asyncsim.lab.exercises import multi_device as md
from asyncsim.lab.exercises.base import Exercise, Fail, Result, ms, predict

_SRC = "d2l-en 12.5 exercise 3 (the Chinese 8.4, 003_3c45022c8209ddba.txt, prints none)"
GPUS_3 = 4
MODEL_3 = dict(num_devices=GPUS_3, shapes=((1024, 1024),) * 8, kind="gpu")
ENGINE_3 = dict(num_devices=GPUS_3, shapes=((20, 1, 3, 3), (20,), (50, 20, 5, 5), (50,),
                                            (800, 128)), kind="cpu")  # LeNet's, fewer than 8


def allreduce_spread(grads):
    """8.4-3's answer: parameter i is summed on device i % k, not all on device 0. The section's
    allreduce sends every parameter through device 0: its copy engine takes in k - 1 arrays per
    parameter, one after another, and its adds run alone. Spread over the devices, each
    device's copy engine and compute take 1/k of that, all at once. Copies to one device run in
    issue order (a CUDA stream), so the three phases are issued in turn, for every parameter:
    the gathers, then the sums, then the copies back; issued parameter by parameter, a copy back
    that waits for its sum would hold up the next parameter's gather behind it.
    """
    k = len(grads)
    homes = [i % k for i in range(len(grads[0]))]
    parts = [[grads[c][i].copyto(grads[h][i].context) for c in range(k) if c != h]
             for i, h in enumerate(homes)]
    for i, h in enumerate(homes):
        for part in parts[i]:
            grads[h][i][:] += part
    for i, h in enumerate(homes):
        for c in range(k):
            if c != h:
                grads[h][i].copyto(grads[c][i])


def section_allreduce(grads):
    """The section's allreduce on each parameter: everything through device 0 (the baseline)."""
    for i in range(len(grads[0])):
        reduce_on_first([row[i] for row in grads])


def _allreduce_harness(answer):
    def allreduce_check(nd, num_devices, shapes, kind):
        ctx = md.contexts(nd, kind, num_devices)
        grads = [[nd.random.normal(shape=s, ctx=c) for s in shapes] for c in ctx]
        before = [[g.asnumpy() for g in row] for row in grads]
        held = [list(row) for row in grads]  # the arrays, whatever the answer does to the lists
        with nd.benchmark('allreduce'):
            answer(grads)
            nd.waitall()
        after = [[g.asnumpy() for g in row] for row in held]
        swapped = any(a is not b for row, kept in zip(grads, held, strict=False)
                      for a, b in zip(row, kept, strict=False))
        return before, after, swapped
    return allreduce_check


def _wrong_sum(before, after, swapped) -> str | None:
    k = len(before)
    for i in range(len(before[0])):
        want = sum(row[i] for row in before)
        for c in range(k):
            error = float(np.max(np.abs(after[c][i] - want)))
            if error <= 1e-4 * (1 + float(np.max(np.abs(want)))):
                continue
            where = f"parameter {i} on cpu({c})"
            if np.array_equal(after[c][i], before[c][i]):
                how = (" you put new arrays into the lists instead of writing into the arrays "
                       "(a parameter's .grad stays as it was); write in place: a[:] = s or "
                       "s.copyto(a)" if swapped else
                       " the sum never reached it: copy the sum back to every device")
                return f"{where} was left unchanged:{how}"
            return (f"{where} holds no sum of the {k} devices' arrays (largest difference "
                    f"{error:.3g}): each array must end as the sum over the devices")
    return None


def _lanes(trace, kind: str) -> dict[str, float]:
    """Lane -> seconds of `kind` spans inside region 'allreduce' (the copies back's "assign"
    into the destination left out: they are not sums)."""
    a, b = next((a, b) for name, a, b in trace.marks if name == "allreduce")
    out: dict[str, float] = {}
    for s in trace.spans:
        if s.kind == kind and s.name != "assign" and s.start >= a and s.end <= b + 1e-12:
            out[s.lane] = out.get(s.lane, 0.0) + s.end - s.start
    return out


def grade_allreduce(answer) -> Result:
    harness = _allreduce_harness(answer)
    wrong = _wrong_sum(*md.run_harness(harness, "allreduce", **ENGINE_3))
    if wrong:
        raise Fail(f"on the engine with {GPUS_3} CPU devices, {wrong}")
    profile = md.gpu_profile(GPUS_3)
    pred = predict(md.record_harness(harness, "allreduce", **MODEL_3), profile)
    base = predict(md.record_harness(_allreduce_harness(section_allreduce), "allreduce", **MODEL_3),
                   profile)
    traces = {"predicted": pred, "predicted, the section's": base}
    t, t_base = pred.regions["allreduce"], base.regions["allreduce"]
    copies, adds = _lanes(pred, "copy"), _lanes(pred, "exec")
    size = f"{len(MODEL_3['shapes'])} parameters of 4 MiB on {GPUS_3} GPUs"
    if t > (1 - md.MIN_GAIN) * t_base:
        if len(adds) <= 1:
            where = ", ".join(sorted({lane.split("/")[0] for lane in adds})) or "one device"
            why = (f"every sum was computed on {where}, as in the "
                   f"section's: sum each parameter on a different device")
        else:
            why = ("the sums run on several devices, yet the copies wait: a device's copies "
                   "run in the order they were issued (a CUDA stream), so a copy back that "
                   "waits for its sum holds up every copy issued after it; issue all the "
                   "gathers first, then the sums, then the copies back")
        raise Fail(f"your allreduce of {size} is predicted to take {ms(t)} on the book's GPU "
                   f"machine, not faster than the section's ({ms(t_base)}): {why}", traces)
    busiest, busiest_base = max(copies.values()), max(_lanes(base, "copy").values())
    return Result(True, f"every device held the sums on the engine ({GPUS_3} CPU devices). "
                        f"For {size} (the book's GPU machine) it is predicted to take {ms(t)} "
                        f"against {ms(t_base)} for the section's: the busiest copy engine "
                        f"worked {ms(busiest)} against {ms(busiest_base)}, with sums on "
                        f"{len(adds)} devices at once", traces)


EXERCISES = [
    Exercise(
        "8.4-3", "an allreduce that sums different parameters on different GPUs (graded, "
                 "run here)",
        "Implement a more efficient allreduce function that aggregates different parameters "
        "on different GPUs. Why is it more efficient? (Answer with a function allreduce(grads) "
        "where grads[c][i] is parameter i's gradient on device c; it must leave the sum over "
        "the devices in every grads[c][i], in place.)",
        _SRC, allreduce_spread, grade_allreduce, machine=True, aliases=("12.5-3",)),
]
