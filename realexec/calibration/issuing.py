"""The frontend side of the ops that training adds, for realexec.calibrate: seconds the frontend
spends issuing each of them, and the Python that surrounds their issue in autograd, a Trainer
and Gluon's blocks.

- `issue_times(bench, n, loops, pause)`: frontend seconds per issued op for each training op,
  called the way workloads and gradients call them (`nd.Convolution`, `nd.Pooling`,
  `nd.softmax`, `nd.sgd_update`, ...; `nd.invoke` for the gradient ops, as autograd does): the
  period of a loop of `n` calls while every worker is held, as
  `realexec.calibration.microbench.frontend` measures the other ops; here the workers wait on an
  event the frontend sets once a group of kinds is issued, so one hold serves as many kinds as
  the engine's table takes. Each timed loop follows an untimed loop of its own kind.
- `phase_times(bench, n, loops, pause)`: frontend seconds per op that `backward()` and
  `Trainer.step` issue (their Python around each op), per hybridized block call, and Gluon's
  imperative layer calls against the `nd` calls they make (what a block call adds beyond the
  ops it issues: `frontend:block`, with `LAYER_OPS`).
- `recording_overhead(bench, n, loops, pause)`: what `autograd.record()` adds per op issued.
- `mixed_issue(bench, n, loops, pause)`: what issuing ops of several kinds in turn costs over
  the same ops each issued in a loop of its own (`Profile.mix`).

Every loop runs with the workers held, so that no worker competes for the GIL or a core, and
the arrays the calls read are written by the first held op, so no call's op is ready and none
is handed to a worker's queue (a push that wakes a worker is `wake`, priced apart). Times are
seconds, `central` of `loops` rounds with busy pauses between them.
"""

from __future__ import annotations

import threading
from time import perf_counter_ns

from realexec.calibration.microbench import _HOLD, op_makers
from realexec.calibration.steady import busy, central
from realexec.calibration.training import WINDOW, small_cnn, small_mlp
from realexec.engine.native import CAPACITY

HOLD_OPS = CAPACITY * 3 // 4  # ops issued behind one hold: the compiled engine's table holds
# CAPACITY, and a push that needs the slot of an op still held would wait for it forever


def _hold_all(bench, arrays) -> threading.Event:
    """Occupy every worker with an op that waits on the returned event (no GIL, no core); the
    first also writes `arrays`, so that no op issued meanwhile that reads them is ready."""
    engine, release = bench.engine, threading.Event()
    writes = tuple(bench.backend.vars[a.var] for a in arrays)
    for k in range(bench.workers):
        engine.push(release.wait, (), writes if k == 0 else (engine.new_var(_HOLD),), "cpu",
                    _HOLD, (60.0,))
    return release


def _per_call(call, count: int, kept: list) -> float:
    """Seconds per call of `count` calls of `call`, each result kept in `kept` (so no drop is
    timed with it)."""
    start = perf_counter_ns()
    for _ in range(count):
        kept.append(call())
    return (perf_counter_ns() - start) * 1e-9 / count


def _issue_makers(nd) -> tuple[dict, tuple]:
    """kind -> a call that issues one op of that name, as workloads and autograd call it; and
    the arrays those calls read."""
    x, y = nd.ones((8,)), nd.ones((8,))
    m, row = nd.ones((4, 8)), nd.ones((1, 8))
    logits, label, per_example = nd.ones((4, 3)), nd.zeros((4,)), nd.ones((4,))
    images, channel = nd.ones((2, 2, 4, 4)), nd.ones((2,))
    pooled = nd.ones((2, 2, 2, 2))
    weight, maps = nd.ones((2, 2, 3, 3)), nd.ones((2, 2, 2, 2))
    geometry = {"kernel": (3, 3), "stride": (1, 1), "pad": (0, 0)}
    window = {"pool_type": "max", **WINDOW}
    invoke = nd.invoke
    makers = {
        "conv2d": lambda: nd.Convolution(images, weight, kernel=(3, 3), num_filter=2,
                                         no_bias=True),
        "conv2d_grad_data": lambda: invoke("conv2d_grad_data", maps, weight,
                                           data_shape=images.shape, **geometry),
        "conv2d_grad_weight": lambda: invoke("conv2d_grad_weight", images, maps,
                                             weight_shape=weight.shape, **geometry),
        "pool2d": lambda: nd.Pooling(images, kernel=(2, 2), stride=(2, 2), pool_type="max"),
        "pool2d_grad": lambda: invoke("pool2d_grad", images, pooled, **window),
        "softmax": lambda: nd.softmax(logits),
        "log_softmax": lambda: nd.log_softmax(logits),
        "softmax_grad": lambda: invoke("softmax_grad", logits, logits, axis=1),
        "log_softmax_grad": lambda: invoke("log_softmax_grad", logits, logits, axis=1),
        "softmax_ce": lambda: nd.softmax_cross_entropy(logits, label),
        "softmax_ce_grad": lambda: invoke("softmax_ce_grad", logits, label, per_example),
        "batch_norm": lambda: invoke("batch_norm", images, channel, channel, eps=1e-5),
        "batch_norm_grad": lambda: invoke("batch_norm_grad", images, channel, images,
                                          eps=1e-5),
        "batch_norm_grad_gamma": lambda: invoke("batch_norm_grad_gamma", images, images,
                                                eps=1e-5),
        "batch_norm_infer": lambda: invoke("batch_norm_infer", images, channel, channel,
                                           channel, channel, eps=1e-5),
        "bn_update": lambda: invoke("bn_update", channel, images, momentum=0.9, stat="mean"),
        "sum_axis": lambda: nd.sum(m, axis=0),
        "argmax": lambda: nd.argmax(logits, axis=1),
        "broadcast_to": lambda: nd.broadcast_to(row, m.shape),
        "reshape": lambda: nd.reshape(m, (8, -1)),
        "relu_grad": lambda: invoke("relu_grad", x, y),
        "sigmoid": lambda: nd.sigmoid(x),
        "tanh": lambda: nd.tanh(x),
        "equal": lambda: nd.equal(x, y),
        "cast": lambda: x.astype("float64"),
        "assign": lambda: invoke("assign", x, y),
        "sgd_update": lambda: nd.sgd_update(x, y, lr=0.0),
    }
    held = (x, y, m, row, logits, label, per_example, images, channel, pooled, weight, maps)
    return makers, held


def issue_times(bench, n: int, loops: int, pause: float) -> dict:
    """kind -> frontend seconds per issued op (`central` of `loops` rounds, each the period of
    `n` calls of every kind in turn while the workers wait on an event, so that no worker
    competes for the GIL or a core; the arrays the calls read are written by the first held
    op, so no call's op is ready and none is handed to a worker's queue, as in `frontend`)."""
    if 2 * n > HOLD_OPS:  # one kind's two loops would outgrow the table behind the hold
        raise ValueError(f"issue_times: n={n} ops a loop; at most {HOLD_OPS // 2}")
    nd = bench.nd
    makers, held = _issue_makers(nd)
    nd.waitall()
    samples: dict = {kind: [] for kind in makers}
    # as many kinds to a hold as the engine's table takes: 2 n ops each, all waiting on the hold
    per_hold = HOLD_OPS // (2 * n)
    kinds = list(makers)
    for _ in range(loops):
        busy(pause)
        for first in range(0, len(kinds), per_hold):
            release = _hold_all(bench, held)
            kept = []
            try:
                for kind in kinds[first:first + per_hold]:
                    make = makers[kind]
                    # untimed: the timed loop follows one of its own kind (`microbench.frontend`)
                    _per_call(make, n, kept)
                    samples[kind].append(_per_call(make, n, kept))
            finally:
                release.set()
            nd.waitall()
            del kept
    return {kind: central(values) for kind, values in samples.items()}


def phase_times(bench, n: int, loops: int, pause: float) -> dict:
    """Frontend seconds per op issued by `backward()` ("backward": the tape's walk and the
    gradient rules' Python, in this project's autograd, which MXNet runs in C++) and by
    `Trainer.step` ("kvstore": its loop over the parameters), each on a small classifier of
    every kind of layer (`small_cnn`), and per call of a hybridized block (the block's lookup
    of its traced graph and parameters, and the issue of the one op): the classifier ("graph",
    10 parameters) and a two-layer perceptron ("graph_mlp", 4); and imperative Gluon layer
    calls beside the `nd` calls they make (`_layer_calls`); with every worker held, as
    `issue_times`. The cross-entropy loss and its mean are part of what backward
    differentiates."""
    from asyncsim.gluon import Trainer, loss
    from asyncsim.nd import autograd

    nd = bench.nd
    images, label = nd.random.uniform(shape=(2, 1, 8, 8)), nd.array([0, 2])
    net, hybrid, mlp = small_cnn(), small_cnn(), small_mlp()
    ce = loss.SoftmaxCrossEntropyLoss()
    ce(net(images), label).wait_to_read()  # deferred initialisation
    for block in (hybrid, mlp):
        block(images)
        block.hybridize()
        block(images)  # the trace
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.0})

    def recorded():
        with autograd.record():
            return ce(net(images), label).mean()

    since = bench.mark()
    recorded().backward()
    bench.flush()
    backward_ops = sum(1 for entry in bench.engine.log[since:]
                       if entry[1] == "issue" and entry[2] != "ones")
    since = bench.mark()
    trainer.step(2)
    bench.flush()
    step_ops = sum(1 for entry in bench.engine.log[since:] if entry[1] == "issue")
    nd.waitall()
    layers = _layer_calls(nd)
    arrays = (images, label, *layers.pop("arrays"),
              *[p.data() for block in (net, hybrid, mlp) for p in block.collect_params().values()])
    samples: dict = {kind: [] for kind in ("backward", "kvstore", "graph", "graph_mlp", *layers)}
    for _ in range(loops):
        busy(pause)
        heads = [recorded() for _ in range(n)]
        kept = []
        release = _hold_all(bench, arrays)
        try:
            start = perf_counter_ns()
            for head in heads:
                head.backward()
            samples["backward"].append((perf_counter_ns() - start) * 1e-9 / (n * backward_ops))
            start = perf_counter_ns()
            for _ in range(n):
                trainer.step(2)
            samples["kvstore"].append((perf_counter_ns() - start) * 1e-9 / (n * step_ops))
            calls = {"graph": lambda: hybrid(images), "graph_mlp": lambda: mlp(images),
                     **layers}
            for kind, call in calls.items():
                # the layer calls' differences are a few microseconds: longer loops
                count = n if kind.startswith("graph") else 5 * n
                samples[kind].append(_per_call(call, count, kept))
        finally:
            release.set()
        nd.waitall()
        del heads, kept
    return {kind: central(values) for kind, values in samples.items()}


# what each layer call of `_layer_calls` issues, by the frontend cost that prices each op
# ("frontend:<key>": a Dense's bias add broadcasts), and the classes of the Gluon blocks it calls
# (each call a program.Call "block"), in the order `realexec.calibration.calibrate` prices them:
# each call's time less what the model charges for its ops and for the blocks priced before
LAYER_OPS = {"dense_call": (("dot", "broadcast"), ("Dense",)),
             "activation_call": (("relu",), ("Activation",)),
             "sequential_call": (("dot", "broadcast", "relu"),
                                 ("HybridSequential", "Dense", "Activation"))}


def _layer_calls(nd) -> dict:
    """kind -> call: Gluon layers called imperatively and the `nd` functions they call, on one
    example (a block call's Python, beyond its ops' issue, is the difference): a Dense layer
    against `nd.FullyConnected`, an Activation against `nd.relu`, a HybridSequential of
    them against its layers called in turn; "arrays": what they read."""
    from asyncsim.gluon import nn

    x = nd.ones((1, 16))
    dense, act = nn.Dense(8), nn.Activation("relu")
    seq = nn.HybridSequential()
    seq.add(nn.Dense(8), nn.Activation("relu"))
    for block in (dense, seq):
        block.initialize()
        block(x)
    weight, bias = dense.weight.data(), dense.bias.data()
    first, second = seq[0], seq[1]
    params = [p.data() for block in (dense, seq) for p in block.collect_params().values()]
    return {
        "dense_call": lambda: dense(x),
        "fully_connected": lambda: nd.FullyConnected(x, weight, bias, num_hidden=8),
        "activation_call": lambda: act(x),
        "relu": lambda: nd.relu(x),
        "sequential_call": lambda: seq(x),
        "layers_in_turn": lambda: second(first(x)),
        "arrays": (x, *params),
    }


def recording_overhead(bench, n: int, loops: int, pause: float) -> dict:
    """Frontend seconds per `x + 1.0` issued outside and inside `autograd.record()` on an
    `x` that needs a gradient (the tape notes every op): the extra cost of an op recorded for
    backward. Reported in meta; a Profile has no key for it yet."""
    from asyncsim.nd import autograd

    nd = bench.nd
    x = nd.ones((8,))
    x.attach_grad()
    nd.waitall()
    samples: dict = {"plain": [], "recorded": []}
    for _ in range(loops):
        busy(pause)
        release = _hold_all(bench, (x,))
        kept = []
        try:
            for kind in samples:
                start = perf_counter_ns()
                if kind == "recorded":
                    with autograd.record():
                        for _ in range(n):
                            kept.append(x + 1.0)
                else:
                    for _ in range(n):
                        kept.append(x + 1.0)
                samples[kind].append((perf_counter_ns() - start) * 1e-9 / n)
        finally:
            release.set()
        nd.waitall()
        del kept
    return {kind: central(values) for kind, values in samples.items()}


MIXED_KINDS = ("dot", "broadcast", "relu", "ones", "normal", "add", "sum", "copy", "slice",
               "add_scalar")


def mixed_issue(bench, n: int, loops: int, pause: float, counts=(2, 5, 10)) -> dict:
    """Frontend seconds per op of the first k kinds of `MIXED_KINDS` issued in turn, against
    the mean of the same kinds each issued in a loop of its own (what the other issue costs
    are timed on), for each k of `counts`: {"ratios": {k: mixed / separate}}, which `fit_mix`
    turns into `Profile.mix`. A loop of one kind keeps one path through the frontend's code
    hot; kinds in turn cost more (2-core Intel VM, three calibrations from before each timed
    loop followed an untimed one of its own kinds: 1.22-1.27x for two kinds, 1.33-1.38x for
    five, 1.34-1.45x for ten; m 0.42-0.44; three kinds cost alike whether they alternate op by
    op or in pairs). Workers held, outputs kept, as `microbench.frontend`.

    Each ratio is taken within a loop, the mixed loop right after its kinds' own loops, and
    the ratios' central value kept: the machine's speed moves between the loops. With every
    kind's loops first and one ratio of central values over all loops, five runs in one
    process gave m 0.09-0.35 (2-core AMD EPYC VM); paired so, 0.06-0.14."""
    nd = bench.nd
    makers, held = op_makers(nd)
    nd.waitall()
    kinds = MIXED_KINDS[:max(counts)]
    ratios: dict = {k: [] for k in counts}

    hold_s = max(0.02, 120e-6 * n)  # two loops of n calls behind each hold

    def period(calls, seed: bool) -> float:  # each loop on its own hold (held at once, they
        # would fill the table)
        return bench.issue_period(held, calls, hold_s, seed)

    for _ in range(loops):
        busy(pause)
        for k in counts:
            # each kind's loop after an untimed one of its kinds, over buffers of its own
            # shapes, as a loop of it runs; the kinds in turn over the pool as those loops left
            # it: taking another kind's buffer is part of what mixing costs (a view of it built
            # per op)
            alone = [period([makers[kind]] * n, True) for kind in kinds[:k]]
            calls = [makers[kind] for kind in kinds[:k]] * max(1, n // k)
            ratios[k].append(period(calls, False) / (sum(alone) / k))
    return {"ratios": {k: central(values) for k, values in ratios.items()}}


def fit_mix(ratios: dict) -> float:
    """`Profile.mix` from {k: mixed / separate}: the least-squares m of ratio = 1 + m (1 - 1/k)
    (any mixing costs most of it, more kinds a little more); never below 0."""
    shares = {int(k): 1.0 - 1.0 / int(k) for k in ratios}
    if not any(shares.values()):
        return 0.0
    mix = (sum((r - 1.0) * shares[int(k)] for k, r in ratios.items())
           / sum(v * v for v in shares.values()))
    return max(0.0, mix)
