"""The checked exercises: every reference answer passes, plausible wrong answers fail with a
reason that names what went wrong, open questions have a worked answer and a demonstration, and
the registry's keys and errors are as documented.

The wrong answers are what a student might write: the loop of the chapter left unchanged, a
blocker in the wrong place, a chain where independent ops were meant, the GPU where the CPU was
asked for. Checks run on the book's profile (deterministic) and, for questions about this
machine, on the engine at small sizes; no assertion here depends on a measured time.
"""

import pytest
from test_exercises_training import WRONG as TRAINING_WRONG  # 8.1, 8.4 and 8.5's wrong answers

from asyncsim import exercises
from asyncsim.lab.scenarios.auto_parallel import independent_products, small_ops
from asyncsim.lab.scenarios.memory import (
    cpu_gpu_minibatches,
    get_net,
    loss,
    memory_barrier,
    memory_no_barrier,
)
from asyncsim.lab.scenarios.pytorch_async import torch_warmup

KEYS = ["8.1-1", "8.1-2", "8.1-3", "12.2-1", "12.2-2", "12.2-3", "12.2-4", "8.3-1", "8.3-2",
        "8.3-3", "8.4-1", "8.4-2", "8.4-3", "8.4-4", "8.5-1", "8.5-2", "pytorch-1"]
GRADED = [k for k in KEYS if exercises.get(k).graded]


# -- plausible wrong answers ----------------------------------------------------------------------
def cpu_gpu_each_minibatch(nd, num_batches=20, batch_size=1024, num_inputs=512,
                           num_hiddens=(2048, 512)):
    """12.2-3 wrong: still a blocker after every minibatch, device after device."""
    devices = [nd.cpu(), nd.gpu(0)]
    nets = [get_net(nd, num_inputs, num_hiddens, ctx=ctx) for ctx in devices]
    for _ in range(num_batches):
        for net, ctx in zip(nets, devices, strict=True):
            X = nd.random.normal(shape=(batch_size, num_inputs), ctx=ctx)
            loss(nd.ones((batch_size, 1), ctx=ctx), net(X)).wait_to_read()


def cpu_gpu_at_the_end(nd, num_batches=20, batch_size=1024, num_inputs=512,
                       num_hiddens=(2048, 512)):
    """12.2-3 wrong: no blocker until the end of the epoch."""
    devices = [nd.cpu(), nd.gpu(0)]
    nets = [get_net(nd, num_inputs, num_hiddens, ctx=ctx) for ctx in devices]
    for _ in range(num_batches):
        for net, ctx in zip(nets, devices, strict=True):
            X = nd.random.normal(shape=(batch_size, num_inputs), ctx=ctx)
            loss(nd.ones((batch_size, 1), ctx=ctx), net(X))
    nd.waitall()


def wait_for_the_last(nd, n=10, size=1000):
    """12.2-4 wrong: the 'intermediate' result is the last op issued."""
    a = nd.random.normal(shape=(size, size))
    nd.waitall()
    with nd.benchmark('wait_to_read'):
        more = [nd.dot(a, a) for _ in range(n)]
        b = nd.dot(a, a)
        b.wait_to_read()
    nd.waitall()
    with nd.benchmark('waitall'):
        more = [nd.dot(a, a) for _ in range(n)]
        nd.waitall()
    del more


def no_drain_between(nd, n=10, size=1000):
    """12.2-4 wrong: the work queued behind wait_to_read lands in the waitall region."""
    a = nd.random.normal(shape=(size, size))
    nd.waitall()
    with nd.benchmark('wait_to_read'):
        b = nd.dot(a, a)
        more = [nd.dot(a, a) for _ in range(n)]
        b.wait_to_read()
    with nd.benchmark('waitall'):
        b = nd.dot(a, a)
        nd.waitall()
    del more


def unlabelled(nd, n=10, size=1000):
    """12.2-4 wrong: the chapter's unlabelled Benchmark() regions."""
    a = nd.random.normal(shape=(size, size))
    with nd.benchmark():
        b = nd.dot(a, a)
        b.wait_to_read()


def waitall_region_empty(nd, n=10, size=1000):
    """12.2-4 wrong: the 'waitall' region only waits, for nothing of its own."""
    a = nd.random.normal(shape=(size, size))
    nd.waitall()
    with nd.benchmark('wait_to_read'):
        b = nd.dot(a, a)
        more = [nd.dot(a, a) for _ in range(n)]
        b.wait_to_read()
    nd.waitall()
    with nd.benchmark('waitall'):
        nd.waitall()
    del more


def too_many_small_ops(nd, n=3000, size=4):
    """8.3-3 wrong: small ops, but so many that the check cannot afford them."""
    small_ops(nd, n, size)


def chained_both(nd, n=10, size=2000):
    """8.3-1 wrong: the 'independent' products each use the previous one."""
    x = nd.random.uniform(0, 2.0 / size, shape=(size, size))
    for label in ('independent products', 'dependent products'):
        with nd.benchmark(label):
            y = x
            for _ in range(n):
                y = nd.dot(y, x)
            nd.waitall()


def blocker_each_op(nd, n=10, size=2000):
    """8.3-1 wrong: independent products, but waited for one by one."""
    x = nd.random.uniform(0, 2.0 / size, shape=(size, size))
    with nd.benchmark('independent products'):
        for _ in range(n):
            nd.dot(x, x).wait_to_read()
    with nd.benchmark('dependent products'):
        y = x
        for _ in range(n):
            y = nd.dot(y, x)
        nd.waitall()


def chain_graph(nd, size=1000):
    """8.3-2 wrong: a plain chain, nothing to run side by side."""
    x = nd.random.uniform(0, 2.0 / size, shape=(size, size))
    y = nd.dot(x, x)
    z = nd.dot(y, x)
    return (z + 1).asnumpy()


def returns_nothing(nd, size=1000):
    """8.3-2 wrong: a fork and a join, but the result is never returned."""
    x = nd.random.uniform(0, 2.0 / size, shape=(size, size))
    a, b = nd.dot(x, x), nd.dot(x, x) + 1
    (a + b).wait_to_read()


def products_on_the_gpu(nd, n=10, size=1000):
    """pytorch-1 wrong: the page's code unchanged, on the GPU."""
    torch_warmup(nd, n, size, gpu=True, numpy_part=False)


def torch_region_waits(nd, n=10, size=1000):
    """pytorch-1 wrong: the 'torch' region synchronises, so it shows no queueing."""
    for label in ('torch', 'Done'):
        with nd.benchmark(label):
            for _ in range(n):
                b = nd.dot(nd.random.normal(shape=(size, size)), nd.random.normal(
                    shape=(size, size)))
            nd.waitall()
    del b


def broken(nd, **params):
    """Any exercise: a workload with a shape error."""
    nd.dot(nd.ones((2, 3)), nd.ones((2, 3)))


WRONG = [
    ("12.2-2", memory_barrier, "no two minibatches overlapped"),
    ("12.2-2", memory_no_barrier, "batch 3 began"),
    ("12.2-3", cpu_gpu_each_minibatch, "computed at the same time for only"),
    ("12.2-3", cpu_gpu_at_the_end, "minibatches were queued or running at once"),
    ("12.2-4", wait_for_the_last, "last op you issued"),
    ("12.2-4", no_drain_between, "still queued or running"),
    ("12.2-4", unlabelled, "no region labelled 'wait_to_read'"),
    ("12.2-4", waitall_region_empty, "issues no work of its own"),
    ("8.3-1", chained_both, "uses the result of op"),
    ("8.3-1", blocker_each_op, "waits (wait_to_read) before its last op"),
    ("8.3-2", chain_graph, "joins two branches"),
    ("8.3-2", returns_nothing, "returns nothing"),
    ("8.3-3", independent_products, "not small"),
    ("8.3-3", too_many_small_ops, "use fewer"),
    ("pytorch-1", products_on_the_gpu, "run on gpu0"),
    ("pytorch-1", torch_region_waits, "waits (waitall)"),
    ("12.2-2", broken, "your workload raised"),
    ("8.3-1", "not a function", "workload must be a function"),
    *TRAINING_WRONG,
]


# -- tests ---------------------------------------------------------------------------------------
def test_list_has_every_exercise_in_the_books_order():
    """list() gives every key, numbered as the book numbers them, with a one-line title
    each."""
    listed = exercises.list()
    assert list(listed) == KEYS
    assert all(title and "\n" not in title for title in listed.values())


@pytest.mark.parametrize("key", GRADED)
def test_reference_answer_passes(key):
    """The reference answer of every graded exercise passes, with a reason and the traces it
    was read from."""
    result = exercises.check(key, exercises.reference(key))
    assert result.passed, result.reason
    assert len(result.reason) > 40 and result.traces


@pytest.mark.parametrize("key, answer, words", WRONG,
                         ids=[f"{k}-{getattr(a, '__name__', 'str')}" for k, a, _ in WRONG])
def test_wrong_answer_fails_with_its_reason(key, answer, words):
    """A plausible wrong answer fails, and the reason names what went wrong."""
    result = exercises.check(key, answer)
    assert not result.passed
    assert words in result.reason, result.reason


def test_overlap_reason_names_the_batches():
    """12.2-2 without a barrier: the reason says which batch began before which finished, in
    the book's 1-based numbering (the issue's example sentence)."""
    reason = exercises.check("12.2-2", memory_no_barrier).reason
    assert "batch 3 began" in reason and "before batch 1 finished" in reason


def test_the_cpu_gpu_scenario_strategies_split_as_the_answer_says():
    """The three strategies of the 12.2-3 scenario: its whole workload (which also syncs after
    every minibatch and only at the end) is not the one-strategy answer the check wants."""
    result = exercises.check("12.2-3", cpu_gpu_minibatches)
    assert not result.passed


def test_open_question_has_worked_answer_and_demo():
    """12.2-1 is open: check refuses it, pointing at the reference; the reference explains the
    condition and its demo simulates the loop to the exact closed form on both sides of it."""
    with pytest.raises(exercises.OpenQuestionError, match="reference"):
        exercises.check("12.2-1", lambda nd: None)
    answer = exercises.reference("12.2-1")
    assert "999 t1" in answer.text and "t2 >= t1" in answer.text
    table = answer.demo(n=100, ratios=(0.5, 2.0)).splitlines()
    rows = [line.split() for line in table[2:]]
    assert [row[1] for row in rows] == ["no", "yes"]
    for row in rows:  # ratio, holds, book, us, exact, us, simulated, us, bound
        assert float(row[4]) == pytest.approx(float(row[6]), rel=1e-9)
    assert rows[0][8] == "frontend" and rows[1][8] == "backend"


def test_chinese_key_is_an_alias():
    """8.2's exercise is 12.2's first: "8.2-1" reaches the same exercise."""
    assert exercises.get("8.2-1") is exercises.get("12.2-1")


def test_unknown_key_lists_every_key():
    """An unknown key raises one error whose message lists every key."""
    with pytest.raises(exercises.UnknownExerciseError) as info:
        exercises.check("12.2-9", memory_barrier)
    for key in KEYS:
        assert key in str(info.value)


def test_result_prints_its_verdict():
    """str(Result) starts with the verdict, then the reason."""
    result = exercises.check("12.2-2", memory_barrier)
    assert str(result).startswith("not yet: no two minibatches")
