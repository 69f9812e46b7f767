"""Calibration's crowding (`realexec.calibration.host.concurrency`): the runs one at a time and W
at once differ only in running at once. Each op writes a buffer of its own in both halves; when
the one-at-a-time half let each output go, its ops took turns on two warm buffers while the other
half wrote count * W of them, and cold outputs were taken for crowding."""

from __future__ import annotations

import weakref

from hypothesis import given, settings
from hypothesis import strategies as st

from realexec.calibration import host


class FakeBench:
    """What `concurrency` uses of `realexec.calibration.microbench._Bench`, with no engine: each
    op "runs" for a fixed time, so only the handling of the outputs is under test."""

    def __init__(self, workers: int):
        self.workers = workers
        self.nd = self
        self.held = 0

    def waitall(self) -> None:
        pass

    def mark(self) -> int:
        return 0

    def hold(self, arrays=(), seconds: float = 0.0) -> None:
        self.held += 1

    def spans(self, since, kind, name):
        return [(None, None, 0.0, 1e-3)]


class Output:
    def wait_to_read(self) -> None:
        pass


@settings(max_examples=20, deadline=None)
@given(workers=st.integers(1, 4), count=st.integers(1, 6), rounds=st.integers(1, 4))
def test_both_halves_keep_as_many_outputs_alive(workers, count, rounds):
    """At the last op of each half, all `count * workers` outputs of that half are alive: the
    same number of buffers both ways, whatever the counts."""
    bench = FakeBench(workers)
    alive: list = []  # weak references to every output made
    peaks: list[int] = []  # outputs alive when each op is made (itself included)

    def make():
        y = Output()
        alive.append(weakref.ref(y))
        peaks.append(sum(r() is not None for r in alive))
        return y

    alone, together = host.concurrency(bench, make, count, "op", rounds=rounds)
    per_half = count * workers
    assert len(peaks) == 2 * rounds * per_half
    for half in range(2 * rounds):
        ops = peaks[half * per_half:(half + 1) * per_half]
        assert ops[-1] == per_half, (half, ops)
    assert bench.held == rounds  # the W-at-once half holds the workers once per round
    assert alone == together == 1e-3
