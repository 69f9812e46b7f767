"""Exercise 8.4-4, test accuracy on several GPUs (graded, run here): the English d2l 12.5's
fourth (the Chinese 8.4 prints none). The answer is a function `evaluate(data_iter, nets, ctx)
-> float`, `nets[c](X)` being the model's output for X on device `ctx[c]`. On the engine (CPU
devices) it must equal a single device's accuracy on the same net and data; on the model (GPUs
of the book's GPU machine) every device must compute, each test image once. The net is the
chapter's LeNet (`asyncsim.lab.scenarios.data_parallel`); the check runs the answer inside its
own workload through `multi_device`'s shared functions.
Units: seconds; sizes are counts of images.
"""

from __future__ import annotations

import functools

from asyncsim.lab import d2l
from asyncsim.lab.exercises import multi_device as md
from asyncsim.lab.exercises.base import Exercise, Fail, Result, ms, predict
from asyncsim.lab.scenarios import data_parallel as dp

_SRC = "d2l-en 12.5 exercise 4 (the Chinese 8.4, 003_3c45022c8209ddba.txt, prints none)"
PARAMS_4 = dict(num_devices=2, num_test=136, batch_size=64)  # a last batch of 8


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
        ctx = md.contexts(nd, kind, num_devices)
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
    program = md.record_harness(harness, "evaluate", kind="gpu", **PARAMS_4)
    images = {d: sum(sizes) for d, sizes in md.images_per_device(program, "evaluate").items()}
    if len(images) < k:
        raise Fail(f"all of the evaluation ran on {', '.join(images) or 'no device'}: split "
                   f"each test batch over the devices (split_and_load) and run each part "
                   f"through the net of its device (nets[c] on ctx[c])")
    if sum(images.values()) != total:
        raise Fail(f"your evaluation ran {sum(images.values())} images through the nets for "
                   f"{total} test images: each image should be evaluated once, on one device")
    acc, single = md.run_harness(harness, "evaluate", kind="cpu", **PARAMS_4)
    if abs(acc - single) > 0.5 / total:
        raise Fail(f"your accuracy {acc:.4f} differs from a single device's {single:.4f} on the "
                   f"same net and {total} test images (batches of {PARAMS_4['batch_size']}, "
                   f"the last of {total % PARAMS_4['batch_size']}): count the correct "
                   f"predictions of every part, sum them over devices and batches, and divide "
                   f"by the number of examples")
    pred = predict(program, md.gpu_profile(k))
    t, t1 = pred.regions["evaluate"], pred.regions["one device"]
    shares = " and ".join(f"{n} on {d}" for d, n in sorted(images.items()))
    return Result(True, f"on the engine with {k} CPU devices your accuracy equals a single "
                        f"device's ({acc:.4f} on {total} images), and on the model each image "
                        f"was evaluated once, {shares}. Predicted on the book's GPU machine: "
                        f"{ms(t)} against {ms(t1)} on one GPU (LeNet's kernels are tiny: the "
                        f"frontend issues the ops of every part)", {"predicted": pred})


EXERCISES = [
    Exercise(
        "8.4-4", "test accuracy computed on several GPUs (graded, run here)",
        "Implement multi-GPU test accuracy computation. (Answer with a function "
        "evaluate(data_iter, nets, ctx) -> float, where nets[c](X) is the model's output for "
        "X on device ctx[c].)",
        _SRC, evaluate_accuracy_gpus, grade_accuracy, machine=True,
        aliases=("12.5-4",)),
]
