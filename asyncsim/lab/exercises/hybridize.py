"""The exercises of 8.1, hybrid programming: the English d2l 12.1's (the Chinese 8.1 prints none).

- 8.1-1 (open): `x.asnumpy()` as the first line of HybridNet's `hybrid_forward`. The worked
  answer, and a demonstration on this machine's engine: the imperative call runs, the first call
  after `hybridize()` fails at the trace (`asyncsim.nd.jit`: a symbol has no value).
- 8.1-2 (open): Python `if` and `for` in `hybrid_forward`. The trace runs the Python once: a
  loop is unrolled into the graph, a condition on Python values is decided then and frozen, a
  condition on the data fails. The demonstration shows all three.
- 8.1-3 (graded on the model): reimplement a model of the earlier chapters as HybridBlocks. The
  answer is `workload(nd, hybridize, num_batches)` that predicts `num_batches` minibatches in a
  region 'predict ...' and calls `net.hybridize()` first when `hybridize` is true. The check
  records it both ways: hybridized, the region must issue the graph op, not hybridized it must
  not, both must compute the same flops, and on the chapter's machine (preset 'book-zh', CPU)
  a hybridized batch must be predicted at least `MIN_GAIN` faster. Nothing runs on the engine:
  the question is about the book's models, not this machine.
Units: seconds; sizes are counts of examples.
"""

from __future__ import annotations

import contextlib
import io

from asyncsim.gluon import init, nn
from asyncsim.lab.exercises import facts
from asyncsim.lab.exercises.base import (
    Exercise,
    Fail,
    Result,
    WorkedAnswer,
    ms,
    predict,
    record_answer,
)
from asyncsim.model.profile import Profile
from asyncsim.nd.jit import HybridizeError
from asyncsim.nd.record import record

_SRC = ("d2l-en 12.1 exercise {} (the Chinese 8.1, 003_3c45022c8209ddba.txt, prints no "
        "exercises)")
PARAMS_3 = dict(num_batches=20)
PROFILE_3 = "book-zh"  # the machine of the Chinese 8.1's numbers: one CPU worker
MIN_GAIN = 0.05  # a hybridized batch must be predicted this much faster


# -- 8.1-1 --------------------------------------------------------------------------------------
ANSWER_1 = """\
Before hybridize() the call runs imperatively: F is the nd module and x an NDArray with values,
so x.asnumpy() is a blocker that waits for x and hands a numpy copy to Python. After
hybridize() the first call runs hybrid_forward once on symbols, to write the graph down: x is
then a placeholder of the graph, with a shape but no value yet, and a graph has no step that
could hand data back to Python in the middle of it. MXNet fails with "AttributeError: 'Symbol'
object has no attribute 'asnumpy'"; this toolkit with a HybridizeError naming the block. The
same holds for every blocker (wait_to_read, asscalar, a print of values, an `if` on a value),
for in-place writes (a += b, a[:] = ..., which a graph cannot express: write a = a + b) and for
nd.array of host data. Inspect values outside the block, on its output, or do not hybridize
the block while debugging. Run `demo()` to see both calls."""


class AsnumpyNet(nn.HybridBlock):
    """8.1.3's HybridNet with `x.asnumpy()` added as the first line of hybrid_forward."""

    def __init__(self, hidden=10, outputs=2, **kwargs):
        super().__init__(**kwargs)
        self.hidden = nn.Dense(hidden)
        self.output = nn.Dense(outputs)

    def hybrid_forward(self, F, x):
        x.asnumpy()
        x = F.relu(self.hidden(x))
        return self.output(x)


def demo_asnumpy(num_inputs: int = 4) -> str:
    """HybridNet with x.asnumpy() called imperatively, then after hybridize(), on the engine."""
    import realexec

    lines = []
    with realexec.session(workers=1) as nd:
        net = AsnumpyNet()
        net.initialize()
        x = nd.random.normal(shape=(1, num_inputs))
        out = ", ".join(f"{v:.4f}" for v in net(x).asnumpy().ravel())
        lines.append(f"imperative call: net(x) = [{out}]")
        net.hybridize()
        try:
            net(x)
            lines.append("hybridized call: ran (unexpected)")
        except HybridizeError as exc:
            lines.append(f"hybridized call: HybridizeError: {exc}")
    return "\n".join(lines)


# -- 8.1-2 --------------------------------------------------------------------------------------
ANSWER_2 = """\
After hybridize(), hybrid_forward's Python runs once, at the trace, on symbols; the graph keeps
only the ops it issued, and every later call replays them without running the Python.
- A `for` loop with a count known in Python (range(self.depth)) is unrolled: the graph holds
  its body depth times. That works, but the graph grows with the count, and a count that
  depends on the input's shape is fixed for that shape (a new shape is traced again).
- An `if` on a Python value (an attribute, a counter, a flag) is decided once, at the trace:
  the branch taken then is frozen into the graph, and changing the value later has no effect,
  silently.
- An `if` (or a `while`) on the data itself (`if F.sum(x).asscalar() > 0:`) needs a value in
  the middle of the trace: it fails as asnumpy does (exercise 1).
MXNet offers graph-level control flow for the last case (F.contrib.cond, foreach, while_loop);
otherwise keep data-dependent control flow outside hybridized blocks. Run `demo()` to see the
three cases."""


class ControlFlowNet(nn.HybridBlock):
    """A `for` over a Python count and an `if` on a Python counter, or (`on_data`) on x."""

    def __init__(self, depth=3, width=4, on_data=False, **kwargs):
        super().__init__(**kwargs)
        self.dense = nn.Dense(width, in_units=width)
        self.depth, self.on_data, self.calls = depth, on_data, 0

    def hybrid_forward(self, F, x):
        self.calls += 1  # Python state: it only changes when the Python runs
        for _ in range(self.depth):
            x = F.relu(self.dense(x))
        if self.on_data:
            if F.sum(x).asscalar() > 0:
                return x
            return -x
        return x * 2 if self.calls % 2 else -x


def _graph_ops(depth: int, width: int) -> list[str]:
    """The ops of ControlFlowNet's graph, read off a recording."""
    def forwards(nd):
        net = ControlFlowNet(depth, width)
        net.initialize()
        net.hybridize()
        net(nd.ones((1, width)))

    graphs = [op.attrs["graph"] for op in record(forwards).ops if op.name == "graph"]
    return [op.name for op in graphs[0].ops]


def demo_control_flow(depth: int = 3, width: int = 4, calls: int = 4) -> str:
    """ControlFlowNet called `calls` times imperatively and hybridized (on the engine), its
    graph's ops, and the data-dependent `if` failing at the trace."""
    import realexec

    lines = [f"for _ in range({depth}): unrolled, the graph's ops are "
             f"{', '.join(_graph_ops(depth, width))}"]
    with realexec.session(workers=1) as nd:
        x = nd.ones((1, width))
        for hybridized in (False, True):
            net = ControlFlowNet(depth, width)
            net.initialize(init.Constant(0.1))  # positive weights: the two branches differ
            net(x)  # parameters made, imperatively
            net.calls = 0
            if hybridized:
                net.hybridize()
            sums = [round(float(net(x).sum().asscalar()), 4) for _ in range(calls)]
            how = "hybridized" if hybridized else "imperative"
            lines.append(f"if calls % 2, {how}: sum of each call's output {sums}; the Python "
                         f"ran {net.calls} time(s)")
        net = ControlFlowNet(depth, width, on_data=True)
        net.initialize()
        net.hybridize()
        try:
            net(x)
        except HybridizeError as exc:
            lines.append(f"if F.sum(x).asscalar() > 0, hybridized: HybridizeError: {exc}")
    return "\n".join(lines)


# -- 8.1-3 --------------------------------------------------------------------------------------
def lenet_predict(nd, hybridize=True, num_batches=20, batch_size=1):
    """8.1-3's answer: yes, where the frontend is the bottleneck. LeNet of 5.5, rebuilt as a
    HybridSequential (its layers are HybridBlocks), predicting one image at a time: each batch
    is some twenty small ops, so the frontend's issue cost per op dominates. Hybridized, a batch is
    one graph op: one issue, its kernels back to back on the worker. With large batches the
    worker computes for longer than the frontend issues, and hybridize gains nothing.
    """
    net = nn.HybridSequential()
    net.add(nn.Conv2D(6, kernel_size=5, padding=2, activation='sigmoid'),
            nn.AvgPool2D(pool_size=2, strides=2),
            nn.Conv2D(16, kernel_size=5, activation='sigmoid'),
            nn.AvgPool2D(pool_size=2, strides=2),
            nn.Dense(120, activation='sigmoid'), nn.Dense(84, activation='sigmoid'),
            nn.Dense(10))
    net.initialize()
    X = nd.random.normal(shape=(batch_size, 1, 28, 28))
    if hybridize:
        net.hybridize()
    net(X).wait_to_read()  # parameters made (and the graph traced) before the timing
    with nd.benchmark('predict'):
        for _ in range(num_batches):
            y = net(X)
        nd.waitall()
    del y


def _region(program, hybridize: bool) -> tuple[str, list]:
    label = facts.region_label(program, "predict")
    if label is None:
        raise Fail(f"with hybridize={hybridize} your workload has no region 'predict': time "
                   f"the batches in `with nd.benchmark('predict'):` (its regions: "
                   f"{', '.join(program.regions()) or 'none'})")
    ops = facts.ops_of(facts.region_instrs(program, label))
    if not ops:
        raise Fail(f"region '{label}' issues no op: predict the batches inside it")
    return label, ops


def _work(ops) -> float:
    return sum(op.attrs["graph"].flops if op.name == "graph" else op.flops for op in ops)


def _worker_share(trace, label: str) -> float:
    """The share of the region during which a worker (not the frontend) computed."""
    a, b = next((a, b) for name, a, b in trace.marks if name == label)
    spans = [(max(x, a), min(y, b)) for x, y in facts.busy(trace, lambda lane: lane != "frontend")
             if y > a and x < b]
    return facts.total(spans) / max(b - a, 1e-12)


def grade_hybrid(workload) -> Result:
    n = PARAMS_3["num_batches"]
    with contextlib.redirect_stdout(io.StringIO()):  # 8.1.3's prints are not the answer's
        hyb = record_answer(workload, hybridize=True, **PARAMS_3)
        plain = record_answer(workload, hybridize=False, **PARAMS_3)
    label_h, ops_h = _region(hyb, True)
    label_p, ops_p = _region(plain, False)
    if any(op.attrs.get("phase") == "backward" for op in ops_h):
        raise Fail(f"region '{label_h}' trains (autograd.record and backward): under "
                   f"autograd.record() this toolkit issues a hybridized graph's ops one by one, "
                   f"so that autograd can record them, and the model predicts no gain; time "
                   f"prediction instead (forward passes outside autograd.record())")
    graphs = [op for op in ops_h if op.name == "graph"]
    if not graphs:
        if any(op.name == "graph" for op in hyb.ops):
            raise Fail(f"with hybridize=True your net ran as a graph only outside region "
                       f"'{label_h}': call net.hybridize() before the region")
        raise Fail(f"with hybridize=True region '{label_h}' has no graph op: your net ran op by "
                   f"op ({len(ops_h) / n:.0f} ops per batch). Call net.hybridize() on a net "
                   f"built of HybridBlocks (nn.HybridSequential, or a HybridBlock with "
                   f"hybrid_forward): a Block's forward is never traced")
    if any(op.name == "graph" for op in ops_p):
        raise Fail("with hybridize=False your net still ran as a graph: hybridize only when "
                   "the parameter asks, so that the check can compare the two")
    work_h, work_p = _work(ops_h), _work(ops_p)
    if abs(work_h - work_p) > 0.01 * max(work_h, work_p):
        raise Fail(f"the two runs do different work: {work_h:.3g} flops hybridized against "
                   f"{work_p:.3g} not: give both the same net and the same batches")
    book = Profile.preset(PROFILE_3)
    pred_h, pred_p = predict(hyb, book), predict(plain, book)
    traces = {"predicted, hybridized": pred_h, "predicted, not hybridized": pred_p}
    t_h, t_p = pred_h.regions[label_h] / n, pred_p.regions[label_p] / n
    if t_h > (1 - MIN_GAIN) * t_p:
        share = _worker_share(pred_p, label_p)
        raise Fail(f"hybridized, a batch is predicted to take {ms(t_h)} against {ms(t_p)} op "
                   f"by op on the chapter's machine ({PROFILE_3}): not faster. Not hybridized, "
                   f"the CPU worker already computed for {share:.0%} of the region: the "
                   f"computation, not the frontend, is the bottleneck, and hybridize only "
                   f"saves the frontend's work (one issue per forward instead of one per op). "
                   f"Predict smaller batches (one example at a time, as a server does)", traces)
    per = len(graphs) / n
    pieces = "" if per <= 1 else (f" Your net is hybridized in {per:.0f} pieces (a Block or "
                                  f"Sequential hybridizes its children one by one); a "
                                  f"HybridSequential makes one graph of the whole forward.")
    return Result(True, f"hybridized, each batch issues {per:.0f} graph op(s) instead of "
                        f"{len(ops_p) / n:.0f} ops, and is predicted to take {ms(t_h)} against "
                        f"{ms(t_p)} op by op on the chapter's machine ({PROFILE_3}): "
                        f"{t_p / t_h:.1f}x faster.{pieces}", traces)


EXERCISES = [
    Exercise(
        "8.1-1", "x.asnumpy() inside hybrid_forward (open: worked answer and demo)",
        "Add x.asnumpy() to the first line of the hybrid_forward function of the HybridNet "
        "class in this section. Execute the code and observe the errors you encounter. Why do "
        "they happen?",
        _SRC.format(1), WorkedAnswer(ANSWER_1, demo_asnumpy), aliases=("12.1-1",)),
    Exercise(
        "8.1-2", "Python if and for inside hybrid_forward (open: worked answer and demo)",
        "What happens if we add control flow, i.e., the Python statements if and for in the "
        "hybrid_forward function?",
        _SRC.format(2), WorkedAnswer(ANSWER_2, demo_control_flow), aliases=("12.1-2",)),
    Exercise(
        "8.1-3", "an earlier chapter's model as HybridBlocks: faster? (graded on the model)",
        "Review the models that interest you in the previous chapters. Can you improve their "
        "computational performance by reimplementing them? (Answer with workload(nd, "
        "hybridize, num_batches=20) that builds the model of HybridBlocks, calls "
        "net.hybridize() when `hybridize` is true, and predicts num_batches minibatches on the "
        "CPU in a region 'predict' ending with nd.waitall().)",
        _SRC.format(3), lenet_predict, grade_hybrid, aliases=("12.1-3",)),
]
