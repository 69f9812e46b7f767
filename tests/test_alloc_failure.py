"""An allocation that fails (an array larger than this machine, or one numpy refuses) is a
MemoryError at the call naming the op and the shape, nothing of it stays counted as live
memory, and the session goes on working.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import realexec
from realexec.engine import memory
from realexec.engine.memory import BufferCache, Pool

HUGE = (10**6, 10**6)  # 4 TB of float32
OVERFLOW = (10**10, 10**10)  # its bytes do not fit in int64


@pytest.mark.parametrize("shape", [HUGE, OVERFLOW])
def test_a_failed_allocation_is_not_counted_and_the_session_goes_on(shape):
    """nd.ones of a shape no machine here can hold: an error at the call naming the op, live
    bytes and samples as before, and later ops compute and are counted as usual."""
    with realexec.session(workers=1) as nd:
        pool = nd._backend.pools["cpu"]
        x = nd.ones((2, 3))
        nd.waitall()
        live, samples = pool.live_bytes, len(pool.samples)
        with pytest.raises((MemoryError, ValueError), match="ones"):
            nd.ones(shape)
        assert pool.live_bytes == live
        assert len(pool.samples) == samples
        np.testing.assert_array_equal((x + 1).asnumpy(), np.full((2, 3), 2, np.float32))
        nd.waitall()  # the dropped x + 1 comes back with the next run of drops, or here
        assert pool.live_bytes == live


def test_pool_refuses_more_than_this_machine_before_asking():
    """Pool.acquire of more bytes than physical memory: MemoryError saying so, nothing
    counted (an overcommitting OS would otherwise hand out pages it cannot back)."""
    pool = Pool("cpu", BufferCache())
    with pytest.raises(MemoryError, match="memory"):
        pool.acquire(HUGE, "float32")
    assert pool.live_bytes == 0 and pool.misses == 0 and len(pool.samples) == 1


def test_pool_turns_numpy_refusals_into_memory_errors(monkeypatch):
    """Where physical memory is unknown, numpy's own refusal (a size beyond intp) is a
    MemoryError too, and the pool's accounting stays usable (it was left at 4e20 bytes, and
    every later sample overflowed)."""
    monkeypatch.setattr(memory, "_PHYSICAL", None)
    pool = Pool("cpu", BufferCache())
    with pytest.raises(MemoryError):
        pool.acquire(OVERFLOW, "float32")
    a = pool.acquire((4,), "float32")
    assert pool.live_bytes == 16
    pool.release(a)
    assert pool.live_bytes == 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 64)), max_size=20))
def test_live_bytes_are_exactly_the_arrays_held(requests):
    """Any mix of requests that succeed and that fail: live bytes equal the bytes of the
    arrays handed out and not released."""
    pool = Pool("cpu", BufferCache())
    held = []
    for fails, n in requests:
        if fails:
            with pytest.raises(MemoryError):
                pool.acquire((n, 10**9, 10**9), "float64")
        else:
            held.append(pool.acquire((n,), "float32"))
        assert pool.live_bytes == sum(a.nbytes for a in held)
    for a in held:
        pool.release(a)
    assert pool.live_bytes == 0


def test_an_array_on_a_cpu_device_goes_back_to_its_own_pool():
    """An array on cpu(1) is counted on cpu1's pool and given back to it when dropped: both
    pools end at zero (it was given back to cpu(0)'s, which went negative)."""
    with realexec.session(workers=1) as nd:
        x = nd.ones((1000,), ctx=nd.cpu(1))
        nd.waitall()
        pools = nd._backend.pools
        assert pools["cpu1"].live_bytes == 4000
        del x
        nd.waitall()
        assert pools["cpu"].live_bytes == 0 and pools["cpu1"].live_bytes == 0
