"""The resident-memory model (`asyncsim.model.rss`): RSS is live bytes plus a bounded cache of
freed buffers, read at a region's ends as the book's `ps` read it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncsim.lab.scenarios import get
from asyncsim.model import rss
from asyncsim.model.profile import Profile
from asyncsim.model.simulate import simulate
from asyncsim.nd.trace import Trace

MB = 1e6


@pytest.fixture(scope="module")
def loops():
    """12.2.4's two loops at the book's sizes, predicted on machine A's preset."""
    book = Profile.preset("book")
    return {name: simulate(get(name).record(), book)
            for name in ("memory_barrier", "memory_no_barrier")}, book


def test_rss_after_a_loop_is_below_the_peak_during_it(loops):
    """Once the final waitall has drained the queue, the predicted RSS is far below the peak the
    loop reached; without a per-batch blocker the peak is gigabytes, the increase is not."""
    traces, book = loops
    for name, trace in traces.items():
        memory = rss.across(trace, "time per epoch", book.rss_keep)
        assert memory.after < memory.peak, name
        assert memory.peak >= memory.live_peak
    no_barrier = rss.across(traces["memory_no_barrier"], "time per epoch", book.rss_keep)
    barrier = rss.across(traces["memory_barrier"], "time per epoch", book.rss_keep)
    assert no_barrier.peak - no_barrier.before > 1000 * MB
    assert no_barrier.increase < barrier.increase < 100 * MB


def test_the_barrier_loop_leaves_its_last_tape_behind(loops):
    """12.2.4's recorded loop keeps the last batch's saved activations through `l`: the
    predicted increase is their bytes (X, two pre-activations, two activations), less the
    warm-up's X and y, which the book keeps as globals until its loop's first batch rebinds
    them."""
    traces, book = loops
    memory = rss.across(traces["memory_barrier"], "time per epoch", book.rss_keep)
    batch, widths = 1024, (512, 2048, 2048, 512, 512)
    label, loss = batch * 4, batch * 4 * 3  # the last batch's y, and l with the loss's inputs
    tape = sum(batch * w * 4 for w in widths)
    warm = batch * 512 * 4 + label  # the warm-up's X and y
    assert memory.increase == pytest.approx(tape + label + loss - warm, rel=0.01)


def test_a_loop_starts_with_the_allocators_cache_full():
    """The book's warm-up batch frees more than the allocator keeps, so its cache is full when
    `ps` reads the memory before a loop, and the change across 8.2.4's no-barrier loop is the
    change of live bytes alone: 0 after the asscalar cell (the same X, y and l held before and
    after; the book: +0.016 MB), and the last loss (4 KB) as a first loop, whose warm-up X and
    y (held as the book's globals) give way to the last batch's."""
    zh = Profile.preset("book-zh")
    sc = get("train_no_barrier_8_2")

    def increase(previous_cell):
        trace = simulate(sc.record(quick=False, num_batches=4, previous_cell=previous_cell), zh)
        return rss.across(trace, "time per epoch", zh.rss_keep).increase

    assert increase(True) == pytest.approx(0.0, abs=1.0)
    assert increase(False) == pytest.approx(1024 * 4, rel=0.01)  # l: (1024,) float32


def _trace(levels, marks=((1, 3),)):
    memory = [(float(i), "cpu", b) for i, b in enumerate(levels)]
    mark_samples = []
    for begin, end in marks:
        mark_samples += [("r", True, begin), ("r", False, end)]
    return Trace(memory=memory, marks=[("r", float(marks[0][0]), float(marks[0][1]))],
                 meta={"mark_samples": mark_samples})


def test_without_a_cache_rss_is_live_bytes():
    """keep=0: every freed buffer goes back, RSS follows live bytes exactly."""
    trace = _trace([0, 100, 700, 50])
    assert rss.rss_curve(trace, 0.0)[1] == [0, 100, 700, 50]
    memory = rss.across(trace, "r", 0.0)
    assert (memory.before, memory.after, memory.peak) == (0, 700, 700)  # 1 sample before, 3


def test_a_freed_buffer_is_reused_before_new_memory():
    """Freed bytes wait in the cache (up to keep) and the next allocation takes them first."""
    times, values = rss.rss_curve(_trace([0, 500, 100, 300, 0]), 250.0)
    assert values == [0, 500, 350, 350, 250]


@settings(max_examples=60, deadline=None)
@given(levels=st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=40),
       keep=st.floats(min_value=0, max_value=10**9))
def test_rss_lies_between_live_and_live_plus_keep(levels, keep):
    """Whatever the allocations and frees: live <= RSS <= live + keep, and RSS never exceeds the
    most memory ever live plus keep."""
    trace = _trace(levels, marks=((0, len(levels)),))
    top = max(levels)
    for _, _, live, resident in rss.walk(trace, keep):
        assert live <= resident <= live + keep + 1e-6
        assert resident <= top + keep + 1e-6


def test_a_measured_trace_is_read_from_its_sampled_rss():
    """A measured trace has no mark indices; `across` reads the process RSS sampled just before
    the region and just after it."""
    trace = Trace(memory=[(0.9, "cpu:rss", 1000), (1.0, "cpu", 10), (1.5, "cpu", 90),
                          (1.5, "cpu:rss", 5000), (2.1, "cpu:rss", 1200)],
                  marks=[("r", 1.0, 2.0)])
    memory = rss.across(trace, "r")
    assert (memory.before, memory.after, memory.peak, memory.live_peak) == (1000, 1200, 5000, 90)
    assert memory.increase == 200


def test_rss_keep_is_a_profile_setting():
    """rss_keep survives a JSON round trip and `--set`, and the book presets declare one."""
    profile = Profile.preset("book").replace(rss_keep="1048576")
    assert profile.rss_keep == 2**20
    assert Profile.from_dict(profile.to_dict()).rss_keep == 2**20
    assert Profile.ideal().rss_keep == 0.0
    assert all(Profile.preset(n).rss_keep > 0 for n in ("book", "book-zh", "book-torch"))
