"""The functions that the exercises of 8.4 and 8.5 (multi-GPU training) share, and exercise 8.4-1.
8.4's exercises are the English d2l 12.5's (the Chinese 8.4, multi-GPU training from scratch,
prints none): 8.4-1 is here, 8.4-3 in `multi_device_allreduce`, 8.4-4 in `multi_device_accuracy`;
8.4-2 and 8.5's are in `multi_device_scaling`. All of them use the shared functions below. The
chapter's code is `asyncsim.lab.scenarios.data_parallel`. GPUs are the model's, on the book's
GPU machine (preset 'book-gpu', with as many GPUs as asked: `gpu_profile`); CPU devices
(`nd.cpu(i)`, memory of their own, the CPU's workers) stand in for them where a check needs
values from this machine's engine (`run_harness`).

- 8.4-1 (graded on the model): minibatches of k b on k GPUs. The answer is `workload(nd,
  num_devices, batch_size, num_train)`, one epoch of LeNet in region 'epoch 1'. Read off the
  Program: every GPU convolves batch_size images per minibatch, num_train in all; the epoch must
  be predicted `MIN_GAIN` faster than the chapter's code at batch_size on as many GPUs.
Units: seconds; sizes are counts of images.
"""

from __future__ import annotations

import contextlib
import functools
import io

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
MIN_GAIN = 0.05  # an answer must be predicted this much faster than the baseline


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


EXERCISES = [
    Exercise(
        "8.4-1", "scale the minibatch with the number of GPUs (graded on the model)",
        "When training on k GPUs, change the minibatch size from b to k b, i.e., scale it up "
        "by the number of GPUs. (Answer with workload(nd, num_devices=2, batch_size=256, "
        "num_train=4096) that trains the chapter's LeNet for one epoch in region 'epoch 1' on "
        "num_devices GPUs with minibatches of num_devices x batch_size.)",
        _SRC.format(1), scaled_batch, grade_scaled, aliases=("12.5-1",)),
]
