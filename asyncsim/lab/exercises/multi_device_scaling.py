"""The open question of 8.4 and both exercises of 8.5, about the number and kind of devices:
the English d2l 12.5's second and 12.6's two (the Chinese 8.4 and 8.5 print none). The graded
ones of 8.4 are in `multi_device` (8.4-1, with the shared functions these use),
`multi_device_allreduce` (8.4-3) and `multi_device_accuracy` (8.4-4). Predictions are for the
book's GPU machine (preset 'book-gpu', with as many GPUs as asked).

- 8.4-2 (open): learning rates against the number of GPUs; the demonstration trains 3.2's linear
  regression data-parallel on this machine's engine, CPU devices standing in for GPUs: the
  minibatch kept and split (8.4's train), scaled, and scaled with the learning rate.
- 8.5-1 (open): 16 GPUs; the demonstration predicts a minibatch of the chapter's ResNet-18 on 1
  to 16 GPUs, its size scaled with the GPUs, through the chapter's allreduce and a ring.
- 8.5-2 (graded on the model): divide a minibatch between two GPUs and the CPU. The answer is a
  function `split(batch_size, devices, step_time) -> list[int]`, where `step_time(device, n)`
  predicts one step on n examples on that device alone (at most `PROBES` distinct calls); a
  step is an MLP's forward and backward on each device's share (`mlp_step`). The shares must
  add up to the batch; the step must be predicted faster than an even split and no slower than
  the GPUs alone. Nothing runs here: the question is about the book's machine.
Units: seconds; sizes are counts of examples.
"""

from __future__ import annotations

import math

import numpy as np

from asyncsim.gluon import init, nn
from asyncsim.gluon import loss as gloss
from asyncsim.lab import d2l
from asyncsim.lab.exercises import multi_device as md
from asyncsim.lab.exercises.base import (
    Exercise,
    Fail,
    Result,
    WorkedAnswer,
    ms,
    predict,
)
from asyncsim.lab.scenarios import data_parallel as dp
from asyncsim.nd import autograd
from asyncsim.nd.record import record

_SRC = "d2l-en {} exercise {} (the Chinese {}, 003_3c45022c8209ddba.txt, prints none)"
TRAIN = 60000  # Fashion-MNIST's training images: an epoch's minibatches
DEVICES = ("gpu0", "gpu1", "cpu")
BATCH_2 = 8192
MLP = dict(num_inputs=784, num_hiddens=(2048, 2048))
PROBES = 40  # distinct step_time calls an answer may make: each is a recording and a prediction
TIE = 1e-3  # relative: "no slower" allows this much


# -- 8.4-2 --------------------------------------------------------------------------------------
LR_ANSWER = """\
It depends on what the GPUs change. 8.4's own train keeps the minibatch b and splits it: the k
GPUs compute the gradient of the same b examples, summed by allreduce, so an epoch does the same
SGD steps whatever k (equal up to float rounding): accuracy per epoch does not depend on k, and
the same learning rate is right. Scaling the minibatch to k b (exercise 1) makes an epoch k
times fewer steps, each averaging more examples: at the same learning rate, accuracy after an
epoch drops. Raising the learning rate with the batch (k times, the linear scaling rule of
Goyal et al., 2017) recovers most of it, up to a limit where SGD diverges (lr too large for the
loss's curvature; a warm-up of a few epochs at a smaller rate pushes the limit). Run `demo()`:
a linear regression trained for one epoch data-parallel on this machine's engine, with CPU
devices standing in for GPUs, for each k and learning rate."""


def _linreg_epoch(nd, num_devices, batch_size, lr, num_examples=960, seed=0) -> float:
    """The loss after one data-parallel epoch of 3.2's linear regression (the chapter's
    split_and_load, allreduce and sgd)."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(num_examples, 2))
    labels = features @ np.array([2.0, -3.4]) + 4.2 + rng.normal(0, 0.01, num_examples)
    ctx = md.contexts(nd, "cpu", num_devices)
    start_params = [nd.array(rng.normal(0, 0.01, (2, 1))), nd.zeros((1,))]
    replicas = [dp.get_params(start_params, c) for c in ctx]
    for start in range(0, num_examples, batch_size):
        X = nd.array(features[start:start + batch_size])
        y = nd.array(labels[start:start + batch_size].reshape(-1, 1))
        with autograd.record():
            parts = zip(dp.split_and_load(X, ctx), dp.split_and_load(y, ctx), replicas,
                        strict=True)
            ls = [(nd.dot(Xp, w) + b - yp) * (nd.dot(Xp, w) + b - yp) / 2
                  for Xp, yp, (w, b) in parts]
        for l in ls:  # noqa: E741 (the book's name)
            l.backward()
        for i in range(2):
            dp.allreduce([params[i].grad for params in replicas])
        for params in replicas:
            d2l.sgd(params, lr, X.shape[0])
    w, b = (p.asnumpy() for p in replicas[0])
    return float(np.mean((features @ w + b - labels.reshape(-1, 1)) ** 2 / 2))


def demo_learning_rates(devices=(1, 2, 4), batch_size: int = 12, lr: float = 0.03) -> str:
    """One epoch of linear regression for each number of devices: the minibatch kept and split
    (8.4's train), scaled with the learning rate kept, and scaled with the rate scaled."""
    import realexec

    rows = [f"one epoch of 960 examples; 3.2's linear regression, batch {batch_size} and lr "
            f"{lr:g} on one device", f"{'devices':>7s}  {'minibatch':>9s}  {'lr':>6s}  "
            f"{'steps':>5s}  loss after the epoch"]
    with realexec.session(workers=1) as nd:
        for k in devices:
            runs = [(batch_size, lr)] if k == 1 else [(batch_size, lr), (k * batch_size, lr),
                                                       (k * batch_size, k * lr)]
            for batch, rate in runs:
                loss = _linreg_epoch(nd, k, batch, rate)
                rows.append(f"{k:7d}  {batch:9d}  {rate:6.3g}  {960 // batch:5d}  {loss:.3e}")
    return "\n".join(rows)


# -- 8.5-1 --------------------------------------------------------------------------------------
SCALING_ANSWER = """\
More epochs raise accuracy until it levels off; a larger minibatch makes an epoch fewer, larger
steps, so it needs a larger learning rate to progress as far per epoch (8.4-2), and too large a
rate diverges. With 16 GPUs the chapter's code meets its overheads: the frontend issues every
op once per GPU, and the chapter's allreduce (kvstore 'device') brings every gradient of
ResNet-18 (11 million numbers) from 15 GPUs into gpu0 and back, one copy after another on
gpu0's copy engine. A minibatch of 256 leaves each GPU 16 images, too few to keep it busy;
scaled with the GPUs (64 each in the demo) they are busy, yet a minibatch takes longer the more
GPUs there are, so the epoch gains far less than 16 times. A ring allreduce (kvstore='ring')
spreads the copies over every link, but as ordinary ops it issues some 117 000 ops per
minibatch on 16 GPUs against 12 000, and the model predicts it slower still: NCCL runs a ring
as one kernel per GPU. Real systems also issue from a thread or process per GPU and overlap the
allreduce with backward. Run `demo()` for the model's predictions."""


def demo_scaling(gpus=(1, 2, 4, 8, 16), per_gpu: int = 64,
                 kvstores=("device", "ring")) -> str:
    """ResNet-18's minibatch of per_gpu images per GPU, predicted for each number of GPUs and
    allreduce: a table with the minibatch's time and the epoch it makes."""
    rows = [f"ResNet-18 (8.5), {per_gpu} images per GPU, predicted on the book's GPU machine",
            f"{'GPUs':>4s}  {'batch':>5s}  {'allreduce':>9s}  {'per batch':>10s}  "
            f"{'epoch of 60000':>14s}"]
    for k in gpus:
        for kvstore in kvstores if k > 1 else kvstores[:1]:
            batch = k * per_gpu
            program = md.quiet(lambda k=k, batch=batch, kvstore=kvstore: record(
                dp.resnet_data_parallel, num_devices=k, batch_size=batch, epochs=1,
                devices='gpu', num_train=batch, num_test=k, kvstore=kvstore))
            per = predict(program, md.gpu_profile(k)).regions["epoch 1"]
            rows.append(f"{k:4d}  {batch:5d}  {kvstore:>9s}  {per * 1e3:7.1f} ms  "
                        f"{math.ceil(TRAIN / batch) * per:12.1f} s")
    return "\n".join(rows)


# -- 8.5-2 --------------------------------------------------------------------------------------
def mlp_step(nd, shares=(BATCH_2 // 2, BATCH_2 // 2, 0), num_inputs=784,
             num_hiddens=(2048, 2048)):
    """One training step's forward and backward of an MLP, `shares[d]` examples on device
    DEVICES[d], each share already on its device. The second step is region 'step' (the first
    makes the parameters)."""
    used = [(nd.cpu() if d == "cpu" else nd.gpu(int(d[3:])), n)
            for d, n in zip(DEVICES, shares, strict=True) if n]
    net = nn.HybridSequential()
    net.add(*[nn.Dense(h, activation='relu') for h in num_hiddens], nn.Dense(10))
    net.initialize(init=init.Normal(0.01), ctx=[c for c, _ in used])
    loss = gloss.SoftmaxCrossEntropyLoss()
    parts = [(nd.random.normal(shape=(n, num_inputs), ctx=c), nd.ones((n,), ctx=c))
             for c, n in used]
    for label in ('warm-up', 'step'):
        nd.waitall()
        with nd.benchmark(label):
            with autograd.record():
                ls = [loss(net(X), y) for X, y in parts]
            for l in ls:  # noqa: E741 (the book's name)
                l.backward()
            nd.waitall()


def _step(shares):
    """The predicted Trace of `mlp_step` with these shares."""
    program = md.record_harness(mlp_step, "split", shares=tuple(shares), **MLP)
    return predict(program, md.gpu_profile(2))


def split_equal_finish(batch_size, devices, step_time):
    """8.5-2's answer: give each device a share such that all finish together, which is not in
    proportion to speed alone. Each device's step is a fixed cost (writing every parameter's
    gradient, issuing its ops) plus a cost per example, read off two probes per device. Pick
    the finishing time T at which the shares (T - fixed) / per_example add up to the batch; a
    device whose fixed cost alone exceeds T gets nothing, as it would only delay the step.
    Worth it? Barely: the CPU is about ten times slower per example than a GPU here, so it can
    take a few percent of the batch and saves a few percent of the step.
    """
    half = batch_size // 2
    fits = []
    for d in devices:
        small, full = step_time(d, half), step_time(d, batch_size)
        per = max((full - small) / (batch_size - half), 1e-12)
        fits.append((small - per * half, per))

    def shares_at(t):
        return [max(0.0, (t - fixed) / per) for fixed, per in fits]

    lo, hi = 0.0, max(fixed + per * batch_size for fixed, per in fits)
    for _ in range(100):  # bisect for T: the shares grow with it
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(shares_at(mid)) < batch_size else (lo, mid)
    shares = [math.floor(s) for s in shares_at(hi)]
    fastest = min(range(len(fits)), key=lambda i: fits[i][1])
    shares[fastest] += batch_size - sum(shares)  # what rounding left over
    return shares


def _probe():
    calls: dict[tuple, float] = {}

    def step_time(device, n):
        if device not in DEVICES:
            raise Fail(f"step_time: unknown device {device!r}; the devices are "
                       f"{', '.join(DEVICES)}")
        n = int(n)
        if n <= 0:
            return 0.0
        if (device, n) not in calls:
            if len(calls) >= PROBES:
                raise Fail(f"your split called step_time with more than {PROBES} different "
                           f"arguments: a few probes per device are enough")
            calls[device, n] = _step([n if d == device else 0 for d in DEVICES]).regions["step"]
        return calls[device, n]
    return step_time


def _shares(answer) -> list[int]:
    try:
        shares = list(answer(BATCH_2, DEVICES, _probe()))
        whole = len(shares) == len(DEVICES) and all(s == int(s) >= 0 for s in shares)
    except Exception as exc:  # the student's function: its errors are feedback
        raise md.explain(exc, "split") from None
    if not whole:
        raise Fail(f"your split must return one whole, non-negative number of examples per "
                   f"device ({', '.join(DEVICES)}), got {shares!r:.80}")
    shares = [int(s) for s in shares]
    if sum(shares) != BATCH_2:
        raise Fail(f"your shares {shares} add up to {sum(shares)}, not the batch's {BATCH_2}: "
                   f"every example must go to one device (after rounding, give what is left "
                   f"to the fastest device)")
    return shares


def grade_split(answer) -> Result:
    shares = _shares(answer)
    third = BATCH_2 // 3
    even = [third, third, BATCH_2 - 2 * third]
    gpus_only = [BATCH_2 // 2, BATCH_2 - BATCH_2 // 2, 0]
    traces = {"predicted": _step(shares), "predicted, even": _step(even),
              "predicted, GPUs alone": _step(gpus_only)}
    t, t_even, t_gpus = (trace.regions["step"] for trace in traces.values())
    said = f"{', '.join(f'{n} on {d}' for d, n in zip(DEVICES, shares, strict=True))}"
    if t >= t_even:
        raise Fail(f"your split ({said}) is predicted to take {ms(t)} per step, no faster than "
                   f"an even split ({ms(t_even)}): the slowest device finishes last; give the "
                   f"faster devices more examples", traces)
    if t > (1 + TIE) * t_gpus:
        a, b = next((a, b) for name, a, b in traces["predicted"].marks if name == "step")
        last = max((s for s in traces["predicted"].spans if s.kind == "exec" and a <= s.start
                    and s.end <= b), key=lambda s: s.end).lane.split("/")[0]
        why = ("A step is not in proportion to its examples: part of it (writing every "
               "parameter's gradient, issuing the ops) is paid whatever the share, and that "
               "part alone is long on the CPU; probe each device at two sizes, and split so "
               "that all devices finish together" if last == "cpu" else
               f"Give {last} fewer examples, so that all devices finish together")
        raise Fail(f"your split ({said}) is predicted to take {ms(t)} per step, slower than "
                   f"leaving the CPU idle ({ms(t_gpus)} with the GPUs alone), and {last} "
                   f"finishes last. {why}", traces)
    cpu = shares[DEVICES.index("cpu")]
    use = (f"the CPU's {cpu} examples save {(t_gpus - t) / t_gpus:.1%} of a step" if cpu
           else "you left the CPU idle")
    return Result(True, f"your split ({said}) is predicted to take {ms(t)} per step on the "
                        f"book's GPU machine, against {ms(t_even)} for an even split and "
                        f"{ms(t_gpus)} for the GPUs alone: {use}. The effort pays only where "
                        f"the slow device's fixed cost per step is small against the step",
                  traces)


EXERCISES = [
    Exercise(
        "8.4-2", "learning rates against the number of GPUs (open: worked answer and demo)",
        "Compare accuracy for different learning rates. How does it scale with the number of "
        "GPUs?",
        _SRC.format("12.5", 2, "8.4"), WorkedAnswer(LR_ANSWER, demo_learning_rates),
        aliases=("12.5-2",)),
    Exercise(
        "8.5-1", "epochs, batch sizes, learning rates, and 16 GPUs (open: worked answer and "
                 "demo)",
        "Try different epochs, batch sizes and learning rates. Use more GPUs for computation. "
        "What happens if we try this on 16 GPUs?",
        _SRC.format("12.6", 1, "8.5"), WorkedAnswer(SCALING_ANSWER, demo_scaling),
        aliases=("12.6-1",)),
    Exercise(
        "8.5-2", "divide a minibatch between two GPUs and the CPU (graded on the model)",
        "Sometimes, different devices provide different computing power. We could use the "
        "GPUs and the CPU at the same time. How should we divide the work? Is it worth the "
        "effort? Why? Why not? (Answer with a function split(batch_size, devices, step_time) "
        "returning how many examples each device of devices ('gpu0', 'gpu1', 'cpu') takes; "
        "step_time(device, n) is the predicted time of one training step of the check's MLP "
        "on n examples on that device alone. The check calls it with batch_size=8192.)",
        _SRC.format("12.6", 2, "8.5"), split_equal_finish, grade_split,
        aliases=("12.6-2",)),
]
