"""The microbenchmarks of the kernels of the ops that training adds (`asyncsim.nd.ops.nn` and the
training half of `asyncsim.nd.ops.tensor`), for realexec.calibrate: their exec seconds over
sizes.

- `cases(nd, sizes, conv_shapes, dot_shapes)`: one op call per (op, size): the memory-bound ops
  (activations
  and their gradients, `equal`, `sgd_update`, `broadcast_to`, `sum_axis`, `argmax`, the softmax
  family, softmax cross-entropy, batch norm and `bn_update`, pooling) on arrays of about `size`
  elements each, the three convolutions on `conv_shapes`, LeNet's and ResNet's layers, and
  rectangular products with an operand transposed (`dot_shapes`: as dense layers' forward and
  backward call them; fitted with the square ones of `realexec.calibration.microbench`).
  Pooling runs 'max' and 'avg' windows and `bn_update` both statistics at every size (training
  issues both): their points are fitted together.
- `kernel_times(bench, cases, repeats, rounds, pause)`: each case's exec span, a low quantile
  of `repeats` calls one at a time, in `rounds` sweeps over every case with busy pauses between
  them, summarised by `central` (as `realexec.calibration.microbench.kernel_times`, with one
  pause per sweep over all the ops rather than one per op, which keeps calibration short).
  Each point keeps the op's bytes and flops as `asyncsim.nd.ops` counts them (what the model
  prices), so the fits need no formula of their own.
The frontend side (issue costs, autograd's and Gluon's Python) is in
`realexec.calibration.issuing`; `graph_step` here times what a hybridized graph's kernel adds per
member op.

Sizes are float32 elements; times seconds; bytes and flops as `asyncsim.nd.ops`.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from asyncsim.nd import ops
from realexec.calibration.steady import at_once, busy, central

ROW = 256  # the row that `broadcast_to` stretches and `sum_axis` sums over
CLASSES = 10  # the softmaxes' and cross-entropy's classes: a classifier's last layer
CHANNELS, SIDE = 16, 8  # batch norm's and pooling's images: (size // 1024, 16, 8, 8)
WINDOW = {"kernel": (2, 2), "stride": (2, 2), "pad": (0, 0)}  # LeNet's pooling
COMPUTE_BOUND = ("conv2d", "conv2d_grad_data", "conv2d_grad_weight", "dot")  # every shape
CROWD_ROUNDS = 7  # rounds of `crowding` (each visits every pair); the median ratio's is kept
LONGEST = 6e-3  # seconds: a memory-bound op's call that takes longer is left out (kernel_times)


def features(name: str, inputs, attrs: dict) -> tuple[int, float]:
    """The bytes (read plus written) and flops of op `name` on `inputs`, as the frontend
    counts them for the Program (an in-place op's output is its first input, counted again)."""
    shapes = tuple(a.shape for a in inputs)
    shape, dtype = ops.infer(name, shapes, tuple(a.dtype for a in inputs), attrs)
    nbytes = ops.nbytes(shape, dtype) + sum(a.nbytes for a in inputs)
    return nbytes, ops.flops(name, shapes, shape)


def cases(nd, sizes, conv_shapes, dot_shapes=(), layer_products=(),
          ctx=None) -> list[tuple[str, tuple, dict]]:
    """(op name, inputs, attrs) of every timed call: the memory-bound ops at each of `sizes`
    (elements), the convolutions at each of `conv_shapes` ((batch, channels, side, filters,
    kernel, stride, pad)), `dot` at each of `dot_shapes` ((m, k, n): an (m, k) x (k, n)
    product) as is and with either operand transposed, as a layer's forward and backward
    call it, and at each of `layer_products` ((m, k, n, "" | "ta" | "tb")); every array on
    `ctx` (default: the CPU; `realexec.calibration.gpu` times the same calls on a GPU)."""
    out = []
    for n in sizes:
        out += _memory_bound(nd, n, ctx)
    for shape in conv_shapes:
        out += _convolutions(nd, *shape, ctx=ctx)
    for m, k, n in dot_shapes:
        out += [_product(nd, m, k, n, transposed, ctx) for transposed in ("", "tb", "ta")]
    out += [_product(nd, *shape, ctx=ctx) for shape in layer_products]
    nd.waitall()
    return out


def _product(nd, m: int, k: int, n: int, transposed: str, ctx=None) -> tuple[str, tuple, dict]:
    """An (m, k) by (k, n) product, with operand a ("ta") or b ("tb") stored transposed."""
    def operand(*shape):
        return nd.random.uniform(0, 2.0 / k, shape=shape, ctx=ctx)

    a = operand(k, m) if transposed == "ta" else operand(m, k)
    b = operand(n, k) if transposed == "tb" else operand(k, n)
    return "dot", (a, b), {f"transpose_{transposed[1]}": True} if transposed else {}


def _memory_bound(nd, n: int, ctx=None) -> list[tuple[str, tuple, dict]]:
    # random values where a kernel branches on them (relu_grad, equal, max pooling, argmax);
    # arrays of other shapes are copies of one random vector's leading elements (copies are
    # cheap, the sampler is not: ~8 ns an element)
    source = nd.random.uniform(-1, 1, shape=(max(n, CHANNELS * SIDE * SIDE),), ctx=ctx)

    def like(*shape):
        count = 1
        for side in shape:
            count *= side
        return nd.reshape(source[0:count], shape)

    a, b = like(n), nd.random.uniform(-1, 1, shape=(n,), ctx=ctx)
    weight = a.copy()
    rows = max(1, n // ROW)
    matrix, row = like(rows, ROW), like(1, ROW)
    examples = max(1, n // CLASSES)
    logits, grads = like(examples, CLASSES), like(examples, CLASSES) * 0.5
    label, per_example = nd.zeros((examples,), ctx=ctx), nd.ones((examples,), ctx=ctx)
    images = max(1, n // (CHANNELS * SIDE * SIDE))
    x = like(images, CHANNELS, SIDE, SIDE)
    gx = x * 0.5
    gamma, beta = nd.ones((CHANNELS,), ctx=ctx), nd.zeros((CHANNELS,), ctx=ctx)
    mean, var = nd.zeros((CHANNELS,), ctx=ctx), nd.ones((CHANNELS,), ctx=ctx)
    running = nd.zeros((CHANNELS,), ctx=ctx)
    pooled = like(images, CHANNELS, SIDE // 2, SIDE // 2)
    axis1 = {"axis": 1}
    bn = {"eps": 1e-5}
    calls = [
        ("sigmoid", (a,), {}),
        ("tanh", (a,), {}),
        ("relu_grad", (a, b), {}),
        ("equal", (a, b), {}),
        ("sgd_update", (weight, b), {"lr": 1e-4, "rescale": 1.0, "wd": 0.0}),
        ("broadcast_to", (row,), {"shape": matrix.shape}),
        ("sum_axis", (matrix,), {"axis": (0,), "keepdims": False}),
        ("argmax", (logits,), {"axis": (1,), "keepdims": False}),
        ("softmax", (logits,), axis1),
        ("log_softmax", (logits,), axis1),
        ("softmax_grad", (logits, grads), axis1),
        ("log_softmax_grad", (logits, grads), axis1),
        ("softmax_ce", (logits, label), {}),
        ("softmax_ce_grad", (logits, label, per_example), {}),
        ("batch_norm", (x, gamma, beta), bn),
        ("batch_norm_grad", (x, gamma, gx), bn),
        ("batch_norm_grad_gamma", (x, gx), bn),
        ("batch_norm_infer", (x, gamma, beta, mean, var), bn),
    ]
    for stat in ("mean", "var"):
        calls.append(("bn_update", (running, x), {"momentum": 0.9, "stat": stat}))
    for kind in ("max", "avg"):
        calls.append(("pool2d", (x,), {"pool_type": kind, **WINDOW}))
        calls.append(("pool2d_grad", (x, pooled), {"pool_type": kind, **WINDOW}))
    return calls


def _convolutions(nd, batch, channels, side, filters, kernel, stride, pad, ctx=None) -> list:
    geometry = {"kernel": (kernel, kernel), "stride": (stride, stride), "pad": (pad, pad)}
    data = nd.random.uniform(-1, 1, shape=(batch, channels, side, side), ctx=ctx)
    weight = nd.random.uniform(-1, 1, shape=(filters, channels, kernel, kernel), ctx=ctx)
    shape, _ = ops.infer("conv2d", (data.shape, weight.shape), ("float32", "float32"), geometry)
    grad = nd.random.uniform(-1, 1, shape=shape, ctx=ctx)
    return [
        ("conv2d", (data, weight), geometry),
        ("conv2d_grad_data", (grad, weight), {**geometry, "data_shape": data.shape}),
        ("conv2d_grad_weight", (data, grad), {**geometry, "weight_shape": weight.shape}),
    ]


def crowding(bench, conv_shapes, rounds: int = CROWD_ROUNDS, take=None) -> dict:
    """How much two convolutions at once slow each other, per geometry of `conv_shapes` (the
    last shape of a geometry gives its batch): "conv2d@<geometry>", the forward twice (as two
    devices run a layer), and "conv2d_grad@<geometry>", the data and weight gradients (which
    backward issues together), each {"alone": s, "together": s}: the mean exec seconds of the
    two ops one at a time and both at once (queued while the workers are held, so they start
    together), from the round of `rounds` with the median ratio.

    A round visits every pair once, alone and together back to back (in turn which first), so
    a pair's rounds lie a whole sweep apart, not a few milliseconds: with three rounds of one
    pair in a row, a slow spell of a second or two took all of them, and LeNet's second
    convolution came out 0.82 crowded in one calibration and under 0.05 or 0.13 in the two
    after it (2-core AMD EPYC VM; lenet_cpu2 predicted 39% slow). `take(fn)` runs each round
    (`Gate.run`, as `kernel_times`'s sweeps); None: at once."""
    nd = bench.nd
    take = take or at_once
    pairs = {}
    for shape in conv_shapes:
        calls = _convolutions(nd, *shape)
        forward, grad_data, grad_weight = (
            (lambda name=name, inputs=inputs, attrs=attrs: nd.invoke(name, *inputs, **attrs))
            for name, inputs, attrs in calls)
        _, inputs, attrs = calls[0]
        geometry = ops.geometry("conv2d", tuple(a.shape for a in inputs), attrs)
        pairs[f"conv2d@{geometry}"] = (forward, forward)
        pairs[f"conv2d_grad@{geometry}"] = (grad_data, grad_weight)
    nd.waitall()
    for first, second in pairs.values():
        first().wait_to_read()  # compiled, buffers touched
        second().wait_to_read()
    def round_(k: int) -> dict:
        row = {}
        for label, (first, second) in pairs.items():
            seconds = {}
            for together in ((False, True) if k % 2 == 0 else (True, False)):
                since = bench.mark()
                if together:
                    bench.hold((), 0.003)
                    first(), second()
                    nd.waitall()
                else:
                    first().wait_to_read()
                    second().wait_to_read()
                spans = [end - start for _, name, start, end in bench.spans(since, "exec")
                         if name.startswith("conv2d")]
                seconds[together] = sum(spans) / len(spans)
            row[label] = (seconds[False], seconds[True])
        return row

    results = {label: [] for label in pairs}
    for k in range(rounds):
        for label, pair in take(lambda k=k: round_(k)).items():
            results[label].append(pair)
    out = {}
    for label, measured in results.items():
        measured.sort(key=lambda pair: pair[1] / pair[0])
        alone, together = measured[len(measured) // 2]
        out[label] = {"alone": alone, "together": together}
    return out


def kernel_times(bench, calls, repeats: int, rounds: int, pause: float,
                 longest: float = LONGEST, take=None) -> dict:
    """op name -> {"points": [[bytes, flops, seconds], ...]} (and for a convolution
    "geometries": {`ops.geometry`: its point}): each call's exec seconds, a low
    quantile (0.25) of `repeats` calls one at a time in each of `rounds` sweeps over all the
    calls (`pause` seconds of busy cores between sweeps), then `central` of the sweeps.

    Each call runs twice first, out of the timing (the first touches its output buffer); a
    call whose second run took over `longest` seconds is left out, with every larger call of the
    same op and attrs (`calls` come in increasing sizes): an op that slow at that size is
    compute-bound, its time grows in step with its bytes, and the smaller sizes pin its cost
    down at a fraction of the time.

    `take(fn)` runs each sweep (`Gate.run`: in the machine's usual state, again when a slow
    spell began during it); None: at once. A gate around the whole minute of sweeps let a spell
    in its middle price every convolution 1.35-1.45x its usual time, and with it the CNN
    scenarios 36-65% slow (2-core AMD EPYC VM)."""
    nd = bench.nd
    take = take or at_once
    timed, too_long = [], set()
    for name, inputs, attrs in calls:
        variant = (name, repr(sorted((k, v) for k, v in attrs.items() if not k.endswith("shape"))))
        if variant in too_long:
            continue
        nd.invoke(name, *inputs, **attrs).wait_to_read()
        since = bench.mark()  # the second call: the first touched fresh pages
        nd.invoke(name, *inputs, **attrs).wait_to_read()
        (_, _, start, end), = bench.spans(since, "exec", name)
        if end - start > longest and name not in COMPUTE_BOUND:
            too_long.add(variant)
            continue
        timed.append((name, inputs, attrs))
    def sweep() -> list[float]:
        row = []
        for name, inputs, attrs in timed:
            since = bench.mark()
            for _ in range(repeats):
                nd.invoke(name, *inputs, **attrs).wait_to_read()
            spans = bench.spans(since, "exec", name)
            row.append(float(np.quantile([end - start for _, _, start, end in spans], 0.25)))
        nd.waitall()
        return row

    sweeps = []
    for k in range(rounds):
        if k:
            busy(pause)
        sweeps.append(take(sweep))
    out: dict = defaultdict(lambda: {"points": []})
    for (name, inputs, attrs), column in zip(timed, zip(*sweeps, strict=True), strict=True):
        nbytes, flops = features(name, inputs, attrs)
        point = [float(nbytes), float(flops), central(column)]
        out[name]["points"].append(point)
        geometry = ops.geometry(name, tuple(a.shape for a in inputs), attrs)
        if geometry:  # a convolution or a 2-d product: priced apart too (`fits.op_costs`)
            out[name].setdefault("geometries", {})[geometry] = point
    return dict(out)


def small_cnn():
    """A small classifier of every kind of layer (convolution, pooling, dense, batch norm),
    for the issue costs of backward, a Trainer and a hybridized call."""
    from asyncsim.gluon import nn

    net = nn.HybridSequential()
    net.add(nn.Conv2D(2, kernel_size=3, activation="relu"), nn.MaxPool2D(pool_size=2),
            nn.BatchNorm(), nn.Dense(6, activation="relu"), nn.Dense(3))
    net.initialize()
    return net


def small_mlp():
    """A two-layer perceptron as a HybridSequential (a hybridized call of few parameters)."""
    from asyncsim.gluon import nn

    net = nn.HybridSequential()
    net.add(nn.Dense(8, activation="relu"), nn.Dense(3))
    net.initialize()
    return net


def graph_step(bench, repeats: int) -> dict:
    """Exec seconds a hybridized block's graph op takes beyond its member ops run one by one
    (each waited for, one at a time), per member op: the graph kernel's own Python between its
    kernels (temporaries, bindings). On `small_cnn` and `small_mlp`, a low quantile (0.25) of
    `repeats` each. Their mean is the profile's "cpu:graph" (per member op, added to the
    members' sum)."""
    nd = bench.nd
    images = nd.random.uniform(shape=(2, 1, 8, 8))
    out = {}
    for kind, make in (("cnn", small_cnn), ("mlp", small_mlp)):
        imperative, hybrid = make(), make()
        imperative(images)
        hybrid(images)
        hybrid.hybridize()
        hybrid(images)
        nd.waitall()
        graph, members, count = [], [], 0
        for _ in range(repeats):
            since = bench.mark()
            hybrid(images).wait_to_read()
            graph.append(sum(end - start for _, _, start, end in bench.spans(since, "exec")))
            since = bench.mark()
            imperative(images)
            nd.waitall()
            spans = bench.spans(since, "exec")
            members.append(sum(end - start for _, _, start, end in spans))
            count = len(spans)
        extra = float(np.quantile(graph, 0.25) - np.quantile(members, 0.25))
        out[kind] = {"members": count, "per_member": extra / max(count, 1)}
    return out
