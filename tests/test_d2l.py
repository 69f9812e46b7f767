"""The book's helper package (`asyncsim.lab.d2l`): timing that is honest about the run's clock,
`sgd`, `evaluate_accuracy`, the devices helpers and 8.5's ResNet-18, on the recorder and on the
real engine.
"""

from __future__ import annotations

import math
import re
from math import prod

import numpy as np
import pytest
from conftest import gpu_count

import realexec
from asyncsim.gluon import utils as gutils
from asyncsim.lab import d2l
from asyncsim.model.profile import Profile
from asyncsim.model.simulate import simulate
from asyncsim.nd.program import Mark
from asyncsim.nd.record import record

_NUMBER = re.compile(r"\d")


def _timed(nd, prefix="Run on CPU.", n=3):
    with d2l.Benchmark(prefix) as bench:
        y = nd.ones((32, 32))
        for _ in range(n):
            y = y + 1
        nd.waitall()
    return bench


def test_benchmark_on_the_recorder_marks_a_region_and_prints_no_number(capsys):
    """Recorded, Benchmark opens and closes the region `prefix` around its ops, prints where the
    time will be (no number: nothing ran) and keeps seconds=None; the simulated program then
    has that region, covering the ops."""
    benches = []
    program = record(lambda nd: benches.append(_timed(nd)))
    out = capsys.readouterr().out.strip()
    assert out.startswith("Run on CPU. time: recorded") and "'Run on CPU.'" in out
    assert not _NUMBER.search(out)
    assert benches[0].seconds is None
    marks = [ins for ins in program.instrs if isinstance(ins, Mark)]
    assert [(m.label, m.begin) for m in marks] == [("Run on CPU.", True), ("Run on CPU.", False)]
    first, last = program.instrs.index(marks[0]), program.instrs.index(marks[1])
    assert any(getattr(ins, "name", None) == "add_scalar" for ins in program.instrs[first:last])
    trace = simulate(program, Profile.ideal(t1=1e-5, t2=1e-3, t3=2e-5))
    assert trace.regions["Run on CPU."] >= 3e-3


def test_benchmark_on_the_engine_prints_the_regions_wall_time(capsys):
    """On a real run Benchmark prints the book's line with its seconds, which lie inside the
    run's region of the same label; without a prefix the label is 'Done' and the line starts
    with 'time:'."""
    benches = []

    def workload(nd):
        benches.append(_timed(nd))
        benches.append(_timed(nd, prefix=None, n=1))

    trace = realexec.run(workload, workers=1)
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"Run on CPU\. time: \d+\.\d{4} sec", lines[0])
    assert re.fullmatch(r"time: \d+\.\d{4} sec", lines[1])
    assert 0 < benches[0].seconds <= trace.regions["Run on CPU."] + 1e-6
    assert 0 < benches[1].seconds <= trace.regions["Done"] + 1e-6


def test_timer_gives_wall_seconds_on_the_engine_and_nan_on_the_recorder():
    """Timer.stop() returns the seconds since start() on a real run (kept in `times`, with
    sum/avg/cumsum over them) and NaN on a recording, which has no clock."""
    measured = []

    def workload(nd):
        timer = d2l.Timer()
        nd.ones((8, 8)).wait_to_read()
        timer.stop()
        timer.start()
        timer.stop()
        measured.append(timer)

    realexec.run(workload, workers=1)
    timer = measured.pop()
    assert len(timer.times) == 2 and all(t > 0 and math.isfinite(t) for t in timer.times)
    assert timer.sum() == pytest.approx(sum(timer.times))
    assert timer.avg() == pytest.approx(timer.sum() / 2)
    assert timer.cumsum() == pytest.approx([timer.times[0], timer.sum()])
    record(workload)
    assert all(math.isnan(t) for t in measured.pop().times)


def test_sgd_matches_numpy():
    """d2l.sgd moves every parameter in place by lr * grad / batch_size, as numpy computes it."""
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (4,), (2, 1, 3, 3)]]
    grads = [rng.standard_normal(w.shape).astype(np.float32) for w in weights]
    with realexec.session(workers=1) as nd:
        params = [nd.array(w) for w in weights]
        handles = list(params)
        for p, g in zip(params, grads, strict=True):
            p.attach_grad()
            p.grad[:] = nd.array(g)
        d2l.sgd(params, 0.2, 8)
        assert all(p is h for p, h in zip(params, handles, strict=True))  # in place
        got = [p.asnumpy() for p in params]
    for w, g, p in zip(weights, grads, got, strict=True):
        np.testing.assert_allclose(p, w - 0.2 * g / 8, rtol=1e-6, atol=1e-7)


def test_evaluate_accuracy_counts_argmax_hits():
    """On a tiny 'net' (the scores themselves), the accuracy is the share of rows whose largest
    score is the label, over batches of different sizes, with ctx a context or a list."""
    rng = np.random.default_rng(1)
    scores = [rng.standard_normal((n, 5)).astype(np.float32) for n in (6, 4, 3)]
    labels = [rng.integers(0, 5, len(s)).astype(np.float32) for s in scores]
    for s, y in zip(scores, labels, strict=True):
        y[:2] = s[:2].argmax(1)  # some hits for sure
    expected = np.mean(np.concatenate([s.argmax(1) == y for s, y in zip(scores, labels,
                                                                        strict=True)]))
    with realexec.session(workers=1) as nd:
        batches = [(nd.array(s), nd.array(y)) for s, y in zip(scores, labels, strict=True)]
        as_list = d2l.evaluate_accuracy(batches, lambda X: X, [nd.cpu()])
        as_context = d2l.evaluate_accuracy(batches, lambda X: X, nd.cpu())
        as_default = d2l.evaluate_accuracy(batches, lambda X: X)
    assert as_list == as_context == as_default == pytest.approx(expected)
    with realexec.session(workers=1), pytest.raises(ValueError, match="no examples"):
        d2l.evaluate_accuracy([], lambda X: X)


def test_evaluate_accuracy_splits_each_batch_over_the_contexts():
    """Given two contexts, each batch is split between them (recorded: a slice and a copy per
    device) and a recording's accuracy is 0, since nothing has values."""
    accuracy = []

    def workload(nd):
        batches = [(nd.ones((4, 3)), nd.zeros((4,)))]
        accuracy.append(d2l.evaluate_accuracy(batches, lambda X: X, [nd.cpu(0), nd.gpu(0)]))

    program = record(workload)
    copies = [op for op in program.instrs if getattr(op, "name", None) == "copyto"]
    assert {op.attrs["dst"] for op in copies} >= {"gpu0", "cpu"}
    assert accuracy == [0.0]


def _expected_resnet18_sizes(in_channels=1, num_classes=10) -> tuple[int, int]:
    """(trainable, all) parameter elements of 8.5's ResNet-18, counted from the chapter's text:
    a 3x3 convolution to 64 channels and batch norm, four stages of two residual blocks (64, 128,
    256, 512 channels; a 1x1 convolution on the shortcut of each stage's first block but the
    first stage's), global average pooling and a dense layer. A batch norm has 2 trainable
    vectors and 2 running statistics."""
    def conv(c_in, c_out, k):
        return c_out * c_in * k * k + c_out

    trainable = conv(in_channels, 64, 3) + 2 * 64
    stats = 2 * 64
    c_in = 64
    for stage, channels in enumerate((64, 128, 256, 512)):
        for block in range(2):
            shortcut = stage > 0 and block == 0
            trainable += conv(c_in, channels, 3) + conv(channels, channels, 3) + 4 * channels
            trainable += conv(c_in, channels, 1) if shortcut else 0
            stats += 4 * channels
            c_in = channels
    trainable += 512 * num_classes + num_classes
    return trainable, trainable + stats


def test_resnet18_runs_forward_and_has_the_chapters_parameters():
    """resnet18(10) on the real engine maps (2, 1, 28, 28) to finite (2, 10) scores, and its
    parameters, once inferred, add up to the chapter's architecture (about 11.2 M trainable)."""
    net = d2l.resnet18(10)
    net.initialize()
    with realexec.session(workers=1) as nd:
        out = net(nd.random.uniform(shape=(2, 1, 28, 28))).asnumpy()
    assert out.shape == (2, 10) and np.isfinite(out).all()
    params = net.collect_params().values()
    trainable = sum(prod(p.shape) for p in params if p.grad_req == "write")
    every = sum(prod(p.shape) for p in params)
    assert (trainable, every) == _expected_resnet18_sizes()
    assert len(net) == 9 and [len(net[i]) for i in range(3, 7)] == [2, 2, 2, 2]


def test_residual_keeps_or_halves_the_shape():
    """As in 5.11: Residual(3) keeps (4, 3, 6, 6); Residual(6, use_1x1conv=True, strides=2) gives
    (4, 6, 3, 3). Recorded: shapes only."""
    shapes = []

    def workload(nd):
        X = nd.random.uniform(shape=(4, 3, 6, 6))
        for blk in (d2l.Residual(3), d2l.Residual(6, use_1x1conv=True, strides=2)):
            blk.collect_params().initialize()
            shapes.append(blk(X).shape)

    record(workload)
    assert shapes == [(4, 3, 6, 6), (4, 6, 3, 3)]


def test_try_gpus_follow_the_active_nd():
    """On the engine: the GPUs this machine (or the CUDA simulator) has, else [cpu(0)]. On a
    recording every GPU name is accepted, so try_all_gpus gives `max_gpus` of them."""
    found = {}

    def workload(nd):
        found["all"], found["one"] = d2l.try_all_gpus(), d2l.try_gpu()

    realexec.run(workload, workers=1)
    n = gpu_count()
    assert [str(c) for c in found["all"]] == ([f"gpu({i})" for i in range(n)] or ["cpu(0)"])
    assert str(found["one"]) == ("gpu(0)" if n else "cpu(0)")
    record(lambda nd: found.update(all=d2l.try_all_gpus(max_gpus=3)))
    assert [str(c) for c in found["all"]] == ["gpu(0)", "gpu(1)", "gpu(2)"]


def test_split_and_load_is_gluons():
    """d2l.split_and_load is Gluon's (the book's 8.5 helper)."""
    assert d2l.split_and_load is gutils.split_and_load
