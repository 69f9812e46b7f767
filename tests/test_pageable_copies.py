"""Copies back to pageable host memory serialise with compute (the PyTorch/TensorFlow runs of 8.3).

With `Profile.pageable=1` a gpu->cpu copy runs on the GPU's compute stream and the frontend waits
for it, so "run and copy" costs run plus copy; with pinned buffers and a copy engine (the default,
and what realexec does) the copies hide behind the products.
"""

import pytest

from asyncsim import Profile, simulate
from asyncsim.lab import scenarios

REGION = "Run and copy in parallel."


@pytest.fixture(scope="module")
def traces():
    sc = scenarios.get("compute_copy_overlap")
    program = sc.record()
    book = Profile.preset("book").replace(gpus=1)
    return simulate(program, book), simulate(program, book.replace(pageable=1))


def test_pageable_copies_add_up_while_pinned_ones_overlap(traces):
    """Pinned: run-and-copy is well under run + copy. Pageable: it is at least run + copy."""
    pinned, pageable = traces
    run, copy = pinned.regions["Run on GPU."], pinned.regions["Then copy to CPU."]
    assert pinned.regions[REGION] < 0.8 * (run + copy)
    assert pageable.regions[REGION] >= 0.99 * (run + copy)


def test_pageable_copies_run_on_the_compute_stream(traces):
    """The copies' spans sit on gpu0/compute when pageable, on the copy engine when pinned."""
    pinned, pageable = traces
    assert {s.lane for s in pinned.spans if s.kind == "copy"} == {"gpu0/copy"}
    assert {s.lane for s in pageable.spans if s.kind == "copy"} == {"gpu0/compute"}
