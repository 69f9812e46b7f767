"""Memory on the real engine: the pooled allocator and the DESIGN.md rule (reserved when an op is
issued; released when the last handle is dropped and every op reading it has finished), live and
peak bytes in the Trace, process RSS as "cpu:rss".
"""

from __future__ import annotations

import gc
import threading

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import realexec
from realexec.cpu import kernels as cpu
from realexec.engine.memory import ADDRESSES, BufferCache, Pool, RssProbe, size_class

MIB = 1 << 20


@given(st.integers(0, 1 << 34))
def test_size_class_fits_and_wastes_little(nbytes):
    """A class holds the request, wastes at most 2 MiB above 1 MiB and at most half below it."""
    size = size_class(nbytes)
    assert size >= nbytes
    if nbytes > MIB:
        assert size - nbytes < 2 * MIB
    else:
        assert size <= max(512, 2 * nbytes)
    assert size_class(size) == size  # classes are fixed points: a cached buffer fits again


def test_pool_reuses_buffers_of_the_same_class():
    """A released buffer serves the next request of its class; live/peak count requested bytes."""
    pool = Pool("cpu", BufferCache())
    a = pool.acquire((1000, 1000), "float32")
    assert a.shape == (1000, 1000) and a.dtype == np.float32 and a.flags.c_contiguous
    pool.release(a)
    b = pool.acquire((999, 1000), "float32")  # same 4 MiB class
    assert np.shares_memory(a, b)
    assert (pool.hits, pool.misses) == (1, 1)
    assert pool.live_bytes == 999 * 1000 * 4
    assert pool.peak_bytes == 1000 * 1000 * 4
    pool.release(b)
    assert pool.live_bytes == 0


def test_cache_drops_buffers_beyond_its_cap():
    """Past max_bytes, released buffers go back to the OS instead of the cache."""
    cache = BufferCache(max_bytes=4 * MIB)
    pool = Pool("cpu", cache)
    arrays = [pool.acquire((MIB,), "float32") for _ in range(3)]
    for a in arrays:
        pool.release(a)
    assert cache.cached_bytes == 4 * MIB


def test_a_full_cache_gives_back_the_classes_released_least_recently_first():
    """A release that does not fit makes room: the buffers of the size class given back least
    recently go back to the OS first (its oldest first), not the one being released, and a class
    given back since keeps its buffers."""
    cache = BufferCache(max_bytes=10 * MIB)
    pool = Pool("cpu", cache)
    old = [pool.acquire((MIB,), "float32") for _ in range(2)]  # the 4 MiB class, twice
    recent = pool.acquire((MIB // 2,), "float32")  # the 2 MiB class
    new = pool.acquire((MIB // 4,), "float32")  # the 1 MiB class
    first = old[0].base
    for a in (*old, recent):
        pool.release(a)
    assert cache.cached_bytes == 10 * MIB
    pool.release(new)  # 1 MiB more: the 4 MiB class goes first, its oldest buffer
    assert cache.cached_bytes == 7 * MIB
    kept = cache.free[4 * MIB]
    assert len(kept) == 1 and kept[0].base is old[1].base and kept[0].base is not first
    assert len(cache.free[2 * MIB]) == 1 and len(cache.free[MIB]) == 1


def test_a_buffers_address_is_known_while_it_exists():
    """Every buffer a Pool makes is listed with its address (the compiled push reads it there)
    for as long as the buffer exists, whether an array of it is live or cached, and not after:
    an id that Python reuses for another object finds nothing."""
    cache = BufferCache(max_bytes=8 * MIB)  # room for both classes below
    pool = Pool("cpu", cache)
    a = pool.acquire((MIB,), "float32")
    key = id(a.base)
    assert ADDRESSES[key] == a.ctypes.data
    pool.release(a)
    b = pool.acquire((1000,), "float64")  # another class: the cached buffer stays listed
    assert ADDRESSES[key] == a.ctypes.data
    pool.release(b)
    del a, b
    assert key in ADDRESSES  # cached still
    cache.clear()
    gc.collect()
    assert key not in ADDRESSES


def gated(name, gate):
    real = cpu.KERNELS[name]

    def kernel(inputs, out, attrs):
        gate.wait()
        real(inputs, out, attrs)

    return kernel


def test_memory_is_reserved_at_issue():
    """Ops queued behind a held op already hold their outputs: live bytes grow with each issue
    (the no-sync loop's memory growth), and fall back once they ran and were dropped."""
    gate = threading.Event()
    n, nbytes = 5, 100 * 100 * 4
    with realexec.session(workers=1) as nd:
        nd._backend.kernels = {**cpu.KERNELS, "ones": gated("ones", gate)}
        pool = nd._backend.pools["cpu"]
        x = nd.ones((100, 100))
        for _ in range(n):
            y = x + 1
        assert pool.live_bytes == (n + 1) * nbytes  # every y is reserved, none could run
        gate.set()
        nd.waitall()
        assert pool.live_bytes == 2 * nbytes  # x and the last y
        del x, y
        nd.waitall()
        assert pool.live_bytes == 0
        assert pool.peak_bytes == (n + 1) * nbytes


def test_release_waits_for_readers():
    """Dropping an array that a pending op still reads keeps it live until that op ran, and its
    buffer is not handed out again meanwhile (the reader sees the right values)."""
    gate = threading.Event()
    nbytes = 64 * 64 * 4
    with realexec.session(workers=2) as nd:
        nd._backend.kernels = {**cpu.KERNELS, "dot": gated("dot", gate)}
        pool = nd._backend.pools["cpu"]
        a = nd.ones((64, 64))
        a.wait_to_read()
        product = nd.dot(a, a)
        del a  # the dot still reads it
        assert pool.live_bytes == 2 * nbytes
        b = nd.zeros((64, 64))  # same size class: must not get a's buffer yet
        b.wait_to_read()
        gate.set()
        np.testing.assert_array_equal(product.asnumpy(), np.full((64, 64), 64, np.float32))
        nd.waitall()
        assert pool.live_bytes == 2 * nbytes  # product and b


def test_sync_loop_peak_in_the_trace():
    """y = x + 1 with a wait each iteration peaks at three arrays (x, the old y, the new y): the
    trace's memory curve says so, and it carries RSS samples as device "cpu:rss"."""
    def loop(nd, n=5, shape=(200, 300)):
        x = nd.ones(shape)
        for _ in range(n):
            y = x + 1
            y.wait_to_read()
        del y
        nd.waitall()

    trace = realexec.run(loop, workers=2)
    nbytes = 200 * 300 * 4
    assert trace.peak_bytes("cpu") == 3 * nbytes
    times, live = trace.memory_curve("cpu")
    assert live[-1] == 0 and np.all(np.diff(times) >= 0)
    assert "cpu:rss" in trace.devices and trace.peak_bytes("cpu:rss") > 0


def test_rss_probe_reads_a_plausible_size():
    """The RSS probe reports at least the size of an array we just touched."""
    probe = RssProbe()
    try:
        before = probe.read()
        if before is None:
            return  # no /proc here: nothing to compare
        big = np.ones(16 * MIB // 8)
        assert probe.read() >= big.nbytes
    finally:
        probe.close()


def test_rss_reads_stay_outside_the_regions_they_sample(monkeypatch):
    """An RSS read (slow with cold caches) is taken before a region's start is stamped and after
    its end, and at most once per 10 ms at blockers: with reads made to take 20 ms, a region
    holding one short blocker still measures under 20 ms, and its start and end carry samples."""
    import time

    read = RssProbe.read

    def slow_read(self):
        time.sleep(0.02)
        return read(self)

    monkeypatch.setattr(RssProbe, "read", slow_read)

    def region(nd):
        x = nd.ones((8,))
        with nd.benchmark("short"):
            (x + 1).wait_to_read()

    trace = realexec.run(region, workers=1)
    assert trace.regions["short"] < 0.02
    (_, start, end), = [m for m in trace.marks if m[0] == "short"]
    rss_times = [t for t, dev, _ in trace.memory if dev == "cpu:rss"]
    assert any(t <= start for t in rss_times) and any(t >= end for t in rss_times)


def test_samples_read_after_a_sample_cut_in_two():
    """A Ctrl-C between a sample's two appends (time, then live bytes) leaves the times one
    longer; the samples both have are still read, where reading them used to raise."""
    pool = Pool("cpu", BufferCache())
    a = pool.acquire((256,), "float32")
    pool._times.append(pool._times[-1] + 1)  # the time of a sample whose live bytes never came
    samples = pool.samples
    assert [live for _, _, live in samples] == [0, 1024]
    pool.release(a)
