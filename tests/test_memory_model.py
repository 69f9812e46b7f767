"""The memory ledger: bytes reserved when an op's issue starts, released once the var is freed and
every op touching it has finished; queue depth drives the peak of a training-style loop."""

import pytest

from asyncsim import Profile, predict

B = 1000 * 4  # bytes of a float32 array of 1000 elements


def _samples(trace):
    return [(round(t, 9), b) for t, d, b in trace.memory if d == "cpu"]


def test_release_waits_for_the_last_reader():
    """x freed while y = x * 2 still reads it goes back when that read ends, not at the free."""

    def reader(nd):
        x = nd.ones((1000,))
        y = x * 2
        del x
        return y

    trace = predict(reader, Profile.ideal(t1=0.1, t2=1.0, t3=0.0))
    # ones issues at 0 and runs 0.1..1.1; the multiply issues at 0.1 and runs 1.1..2.1
    assert _samples(trace) == [(0.0, 0), (0.0, B), (0.1, 2 * B), (2.1, B), (2.1, 0)]


def test_freed_and_idle_is_released_at_the_free():
    """A var whose ops are all done goes back the moment the frontend drops it."""

    def idle(nd):
        x = nd.ones((1000,))
        nd.waitall()
        del x
        nd.waitall()

    trace = predict(idle, Profile.ideal(t1=0.1, t2=1.0, t3=0.5))
    assert _samples(trace) == [(0.0, 0), (0.0, B), (1.6, 0)]


def test_in_place_updates_reserve_nothing():
    """x += 1 writes an existing buffer: live bytes do not change."""

    def inplace(nd):
        x = nd.ones((1000,))
        for _ in range(5):
            x += 1
        nd.waitall()
        return x

    trace = predict(inplace, Profile.ideal())
    assert max(b for _, _, b in trace.memory) == B


def test_devices_have_separate_ledgers():
    """A copy to gpu0 reserves on gpu0; the host ledger is unchanged by it."""

    def move(nd):
        x = nd.ones((1000,))
        y = x.copyto(nd.gpu(0))
        nd.waitall()
        return x, y

    trace = predict(move, Profile.ideal())
    assert trace.peak_bytes("cpu") == B and trace.peak_bytes("gpu0") == B


def train(nd, batches=10, barrier=False, size=64):
    """A training-style loop: each batch makes X, a few ops on it, and drops them."""
    w = nd.ones((size, size))
    for _ in range(batches):
        X = nd.random.normal(shape=(size, size))
        h = nd.dot(X, w).relu()
        loss = (h * h).mean()
        if barrier:
            loss.wait_to_read()
    nd.waitall()


FAST_FRONTEND = Profile.ideal(t1=1e-6, t2=1e-3, t3=1e-6)


def test_no_barrier_memory_grows_with_queue_depth():
    """Without a per-batch blocker the frontend queues every batch and the peak grows with the
    number of batches; with one the peak stays the same however many batches run."""
    free_10 = predict(train, FAST_FRONTEND, batches=10).peak_bytes()
    free_20 = predict(train, FAST_FRONTEND, batches=20).peak_bytes()
    held_10 = predict(train, FAST_FRONTEND, batches=10, barrier=True).peak_bytes()
    held_20 = predict(train, FAST_FRONTEND, batches=20, barrier=True).peak_bytes()
    assert free_20 > free_10 > held_10
    assert held_20 == held_10


@pytest.mark.parametrize("batches", [10, 20])
def test_max_inflight_caps_the_peak_between_the_two(batches):
    """max_inflight=k bounds the queue: the peak sits between the blocking loop's and the free
    loop's, and grows with k."""
    free = predict(train, FAST_FRONTEND, batches=batches).peak_bytes()
    held = predict(train, FAST_FRONTEND, batches=batches, barrier=True).peak_bytes()
    capped = [predict(train, FAST_FRONTEND, max_inflight=k, batches=batches).peak_bytes()
              for k in (4, 8, 16)]
    assert held <= capped[0] <= capped[1] <= capped[2] < free


def test_samples_are_in_time_order_and_end_at_the_unfreed_bytes():
    """Memory samples never go back in time; after the run only never-freed vars stay live."""

    def keep_one(nd):
        kept = nd.ones((1000,))
        for _ in range(3):
            tmp = kept * 2
            del tmp
        nd.waitall()
        return kept

    trace = predict(keep_one, Profile.ideal())
    times = [t for t, _, _ in trace.memory]
    assert times == sorted(times)
    assert trace.memory[-1][2] == 0  # the workload returned, so even `kept` was dropped
    assert trace.peak_bytes() == 4 * B  # the three temporaries were queued behind `ones`
