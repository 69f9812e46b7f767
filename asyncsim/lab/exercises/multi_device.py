"""The graded exercises of 8.4, multi-GPU training from scratch: the English d2l 12.5's (the
Chinese 8.4 prints none); 8.4-2 and 8.5's are in `multi_device_scaling`, which uses the shared
functions below. The chapter's code is `asyncsim.lab.scenarios.data_parallel`. GPUs are the
model's, on the book's GPU machine (preset 'book-gpu', with as many GPUs as asked); CPU devices
(`nd.cpu(i)`, memory of their own, the CPU's workers) stand in for them where a check needs
values from this machine's engine.

- 8.4-1 (graded on the model): minibatches of k b on k GPUs. The answer is `workload(nd,
  num_devices, batch_size, num_train)`, one epoch of LeNet in region 'epoch 1'. Read off the
  Program: every GPU convolves batch_size images per minibatch, num_train in all; the epoch must
  be predicted `MIN_GAIN` faster than the chapter's code at batch_size on as many GPUs.
- 8.4-3 (graded, run here): a more efficient allreduce, a function `allreduce(grads)` that
  leaves in every `grads[c][i]` (parameter i's gradient on device c) the sum over c, in place.
  On the engine with CPU devices (LeNet's arrays) every array must hold the sum; on the model
  (`GPUS_3` GPUs, arrays of 4 MiB) it must be predicted `MIN_GAIN` faster than the section's
  allreduce applied to each parameter.
- 8.4-4 (graded, run here): test accuracy on several GPUs, a function `evaluate(data_iter, nets,
  ctx) -> float`, `nets[c](X)` being the model's output for X on device `ctx[c]`. On the engine
  (CPU devices) it must equal a single device's accuracy on the same net and data; on the model
  (GPUs) every device must compute, each test image once.
Units: seconds; sizes are counts of images or array sides.
"""

from __future__ import annotations

import contextlib
import functools
import io

import numpy as np

from asyncsim.gluon.kvstore import reduce_on_first
from asyncsim.lab import d2l
from asyncsim.lab.exercises import facts
from asyncsim.lab.exercises.base import (
    Exercise,
    Fail,
    Result,
    StudentError,
    ms,
    predict,
    record_answer,
)
from asyncsim.lab.scenarios import data_parallel as dp
from asyncsim.model.profile import Profile
from asyncsim.nd.record import record

_SRC = "d2l-en 12.5 exercise {} (the Chinese 8.4, 003_3c45022c8209ddba.txt, prints none)"
PROFILE = "book-gpu"
PARAMS_1 = dict(num_devices=2, batch_size=256, num_train=4096)
IMAGE = (1, 28, 28)
GPUS_3 = 4
MODEL_3 = dict(num_devices=GPUS_3, shapes=((1024, 1024),) * 8, kind="gpu")
ENGINE_3 = dict(num_devices=GPUS_3, shapes=((20, 1, 3, 3), (20,), (50, 20, 5, 5), (50,),
                                            (800, 128)), kind="cpu")  # LeNet's, fewer than 8
MIN_GAIN = 0.05  # an answer must be predicted this much faster than the baseline
PARAMS_4 = dict(num_devices=2, num_test=136, batch_size=64)  # a last batch of 8


def quiet(run):
    """run(), its prints dropped."""
    with contextlib.redirect_stdout(io.StringIO()):  # the chapter's prints and data notice
        return run()


def explain(exc: Exception, what: str) -> StudentError:
    """An error of the student's function as feedback (a Fail raised by the check stays)."""
    if isinstance(exc, Fail):
        return exc
    return StudentError(f"your {what} raised {type(exc).__name__}: {exc}")


def record_harness(harness, what: str, **params):
    """The Program of the check's workload `harness`, which runs the student's `what`."""
    try:
        return quiet(lambda: record(harness, **params))
    except Exception as exc:  # the student's function ran inside: its errors are feedback
        raise explain(exc, what) from None


def run_harness(harness, what: str, **params):
    """What the harness returns, run on this machine's engine (one worker, which every CPU
    device shares)."""
    import realexec

    try:
        with realexec.session(workers=1) as nd:
            return quiet(lambda: harness(nd, **params))
    except Exception as exc:
        raise explain(exc, f"{what} (on the engine, CPU devices)") from None


def contexts(nd, kind: str, num: int) -> list:
    """`num` devices of `kind`: the model's GPUs, or this machine's CPU devices."""
    return [nd.gpu(i) if kind == "gpu" else nd.cpu(i) for i in range(num)]


def gpu_profile(count: int) -> Profile:
    """The book's GPU machine with `count` GPUs (its derivation prints the chapter's lines)."""
    return quiet(lambda: Profile.preset(PROFILE)).replace(gpus=max(count, 2))


def images_per_device(program, label: str) -> dict[str, list[int]]:
    """Device -> the number of images each of its first-layer convolutions in region `label`
    took (LeNet's first layer reads the images themselves)."""
    out: dict[str, list[int]] = {}
    for op in facts.ops_of(facts.region_instrs(program, label)):
        shape = program.vars[op.reads[0]].shape if op.reads else ()
        if op.name == "conv2d" and tuple(shape[1:]) == IMAGE:
            out.setdefault(op.device, []).append(shape[0])
    return out


# -- 8.4-1 --------------------------------------------------------------------------------------
def scaled_batch(nd, num_devices=2, batch_size=256, num_train=4096):
    """8.4-1's answer: the chapter's train with minibatches of num_devices x batch_size, so each
    GPU keeps batch_size images. An epoch then has num_devices times fewer minibatches, hence
    fewer of the tiny ops that make the frontend LeNet's bottleneck, and fewer allreduces. The
    learning rate grows with the batch (0.2 per 256 images), as each SGD step now averages the
    gradient over num_devices times the examples (see 8.4-2).
    """
    dp.lenet_data_parallel(nd, num_devices, batch_size=num_devices * batch_size,
                           lr=0.2 * num_devices, epochs=1, devices='gpu', num_train=num_train,
                           num_test=batch_size)


@functools.cache
def _chapter_epoch(num_devices: int, batch_size: int) -> float:
    program = quiet(lambda: record(
        dp.lenet_data_parallel, num_devices=num_devices, batch_size=batch_size, epochs=1,
        devices='gpu', num_train=PARAMS_1["num_train"], num_test=batch_size))
    return predict(program, gpu_profile(num_devices)).regions["epoch 1"]


def grade_scaled(workload) -> Result:
    k, b, total = PARAMS_1["num_devices"], PARAMS_1["batch_size"], PARAMS_1["num_train"]
    program = quiet(lambda: record_answer(workload, **PARAMS_1))
    if "epoch 1" not in program.regions():
        raise Fail(f"your workload has no region 'epoch 1' (its regions: "
                   f"{', '.join(program.regions()) or 'none'}): train one epoch as the "
                   f"chapter's train does, e.g. lenet_data_parallel(nd, ..., epochs=1)")
    images = images_per_device(program, "epoch 1")
    gpus = sorted(d for d in images if d.startswith("gpu"))
    if len(gpus) < k:
        raise Fail(f"your epoch convolved images on {', '.join(sorted(images)) or 'no device'} "
                   f"only: train on num_devices={k} GPUs (devices='gpu')")
    for gpu in gpus:
        typical = max(set(images[gpu]), key=images[gpu].count)
        if typical != b:
            how = ("you split the chapter's minibatch across the GPUs (8.4's own train); "
                   if typical == b // k else "")
            raise Fail(f"{gpu} got {typical} images per minibatch, not batch_size={b}: {how}"
                       f"scale the minibatch to num_devices x batch_size = {k * b} so that "
                       f"each GPU keeps {b}")
    done = sum(sum(sizes) for sizes in images.values())
    if done != total:
        raise Fail(f"your epoch trained {done} images, not num_train={total}: one epoch is "
                   f"one pass over the num_train images")
    pred = predict(program, gpu_profile(k))
    t, split, single = pred.regions["epoch 1"], _chapter_epoch(k, b), _chapter_epoch(1, b)
    if t > (1 - MIN_GAIN) * split:
        raise Fail(f"your epoch is predicted to take {ms(t)} on the book's GPU machine, no "
                   f"faster than the chapter's code ({ms(split)} with minibatches of {b} split "
                   f"over {k} GPUs), though it has {k} times fewer minibatches: do not add "
                   f"blockers or copies", {"predicted": pred})
    return Result(True, f"each of the {k} GPUs convolved {b} images per minibatch ({k * b} "
                        f"in all), {total // (k * b)} minibatches per epoch instead of "
                        f"{total // b}: predicted {ms(t)} on the book's GPU machine against "
                        f"{ms(split)} for the chapter's code at {b} ({b // k} per GPU) and "
                        f"{ms(single)} on one GPU at {b}", {"predicted": pred})


# -- 8.4-3 --------------------------------------------------------------------------------------
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
        ctx = contexts(nd, kind, num_devices)
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
    wrong = _wrong_sum(*run_harness(harness, "allreduce", **ENGINE_3))
    if wrong:
        raise Fail(f"on the engine with {GPUS_3} CPU devices, {wrong}")
    profile = gpu_profile(GPUS_3)
    pred = predict(record_harness(harness, "allreduce", **MODEL_3), profile)
    base = predict(record_harness(_allreduce_harness(section_allreduce), "allreduce", **MODEL_3),
                   profile)
    traces = {"predicted": pred, "predicted, the section's": base}
    t, t_base = pred.regions["allreduce"], base.regions["allreduce"]
    copies, adds = _lanes(pred, "copy"), _lanes(pred, "exec")
    size = f"{len(MODEL_3['shapes'])} parameters of 4 MiB on {GPUS_3} GPUs"
    if t > (1 - MIN_GAIN) * t_base:
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


# -- 8.4-4 --------------------------------------------------------------------------------------
def evaluate_accuracy_gpus(data_iter, nets, ctx):
    """8.4-4's answer: split each test batch over the devices, run each part through its
    device's replica, and count the correct predictions on the CPU; the accuracy is the total
    count over the number of examples (a mean of per-batch or per-device accuracies would weigh
    a smaller last batch wrongly). One blocker per batch keeps the frontend a batch ahead."""
    correct, n = None, 0
    for X, y in data_iter:
        for part_X, part_y, net in zip(d2l.split_and_load(X, ctx), d2l.split_and_load(y, ctx),
                                       nets, strict=True):
            hits = (net(part_X).argmax(axis=1) == part_y).sum().copyto(X.context)
            correct = hits if correct is None else correct + hits
            n += part_y.shape[0]
        correct.wait_to_read()
    return correct.asscalar() / n


def _accuracy_harness(answer):
    def accuracy_check(nd, num_devices, num_test, batch_size, kind):
        ctx = contexts(nd, kind, num_devices)
        params = dp.lenet_params(nd, scale=0.1)  # random, yet not every output is alike
        replicas = [[p.copyto(c) for p in params] for c in ctx]
        nets = [functools.partial(_lenet_on, nd, r) for r in replicas]
        _, test_iter = d2l.load_data_fashion_mnist(batch_size, num_train=batch_size,
                                                   num_test=num_test)
        with nd.benchmark('evaluate'):
            acc = answer(test_iter, nets, ctx)
        with nd.benchmark('one device'):
            single = d2l.evaluate_accuracy(test_iter, nets[0], ctx[0])
        return float(acc), single
    return accuracy_check


def _lenet_on(nd, params, X):
    return dp.lenet(nd, X, params)


def grade_accuracy(answer) -> Result:
    harness = _accuracy_harness(answer)
    k, total = PARAMS_4["num_devices"], PARAMS_4["num_test"]
    program = record_harness(harness, "evaluate", kind="gpu", **PARAMS_4)
    images = {d: sum(sizes) for d, sizes in images_per_device(program, "evaluate").items()}
    if len(images) < k:
        raise Fail(f"all of the evaluation ran on {', '.join(images) or 'no device'}: split "
                   f"each test batch over the devices (split_and_load) and run each part "
                   f"through the net of its device (nets[c] on ctx[c])")
    if sum(images.values()) != total:
        raise Fail(f"your evaluation ran {sum(images.values())} images through the nets for "
                   f"{total} test images: each image should be evaluated once, on one device")
    acc, single = run_harness(harness, "evaluate", kind="cpu", **PARAMS_4)
    if abs(acc - single) > 0.5 / total:
        raise Fail(f"your accuracy {acc:.4f} differs from a single device's {single:.4f} on the "
                   f"same net and {total} test images (batches of {PARAMS_4['batch_size']}, "
                   f"the last of {total % PARAMS_4['batch_size']}): count the correct "
                   f"predictions of every part, sum them over devices and batches, and divide "
                   f"by the number of examples")
    pred = predict(program, gpu_profile(k))
    t, t1 = pred.regions["evaluate"], pred.regions["one device"]
    shares = " and ".join(f"{n} on {d}" for d, n in sorted(images.items()))
    return Result(True, f"on the engine with {k} CPU devices your accuracy equals a single "
                        f"device's ({acc:.4f} on {total} images), and on the model each image "
                        f"was evaluated once, {shares}. Predicted on the book's GPU machine: "
                        f"{ms(t)} against {ms(t1)} on one GPU (LeNet's kernels are tiny: the "
                        f"frontend issues the ops of every part)", {"predicted": pred})


EXERCISES = [
    Exercise(
        "8.4-1", "scale the minibatch with the number of GPUs (graded on the model)",
        "When training on k GPUs, change the minibatch size from b to k b, i.e., scale it up "
        "by the number of GPUs. (Answer with workload(nd, num_devices=2, batch_size=256, "
        "num_train=4096) that trains the chapter's LeNet for one epoch in region 'epoch 1' on "
        "num_devices GPUs with minibatches of num_devices x batch_size.)",
        _SRC.format(1), scaled_batch, grade_scaled, aliases=("12.5-1",)),
    Exercise(
        "8.4-3", "an allreduce that sums different parameters on different GPUs (graded, "
                 "run here)",
        "Implement a more efficient allreduce function that aggregates different parameters "
        "on different GPUs. Why is it more efficient? (Answer with a function allreduce(grads) "
        "where grads[c][i] is parameter i's gradient on device c; it must leave the sum over "
        "the devices in every grads[c][i], in place.)",
        _SRC.format(3), allreduce_spread, grade_allreduce, machine=True, aliases=("12.5-3",)),
    Exercise(
        "8.4-4", "test accuracy computed on several GPUs (graded, run here)",
        "Implement multi-GPU test accuracy computation. (Answer with a function "
        "evaluate(data_iter, nets, ctx) -> float, where nets[c](X) is the model's output for "
        "X on device ctx[c].)",
        _SRC.format(4), evaluate_accuracy_gpus, grade_accuracy, machine=True,
        aliases=("12.5-4",)),
]
