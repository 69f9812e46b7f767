"""How realexec orders GPU work: CUDA events across streams, host waits only at blockers,
deferred buffer reuse, errors, and the message for a machine without a GPU.

Under the simulator every stream is synchronous, so ordering is checked by watching which event
waits and host synchronisations the engine asks for (spies on realexec.gpu.kernels.wait_event and
realexec.gpu.vars.synchronize), not by timing.
"""

import gc

import numpy as np
import pytest

import realexec
from realexec import OpError
from realexec.gpu import device as gpu_device
from realexec.gpu import kernels as gpu
from realexec.gpu import runtime as gpu_runtime
from realexec.gpu import vars as gpu_vars

if not gpu.available():
    pytest.skip(gpu.device_error(0), allow_module_level=True)

pytestmark = [pytest.mark.cudasim, pytest.mark.usefixtures("quick_simulator_barriers")]


@pytest.fixture
def spies(monkeypatch):
    """Record every event wait (event, stream) and every host synchronisation, in order."""
    calls = []
    wait, sync = gpu.wait_event, gpu_vars.synchronize

    def spy_wait(event, stream):
        calls.append(("wait", event, stream))
        wait(event, stream)

    def spy_sync(event, name, op_id):
        calls.append(("host", name, op_id))
        sync(event, name, op_id)

    monkeypatch.setattr(gpu, "wait_event", spy_wait)
    monkeypatch.setattr(gpu_vars, "synchronize", spy_sync)
    monkeypatch.setattr(gpu_device, "synchronize", spy_sync)
    return calls


def test_cross_stream_dependencies_use_events_not_host_waits(spies):
    """A copy of y on the copy stream waits on the event ending y's product (read-after-write);
    overwriting y on the compute stream waits on the copy's event (write-after-read); ops on
    one stream wait on nothing; the host synchronises only in the final blocker."""
    with realexec.session(workers=1) as nd:
        g = nd.gpu(0)
        x = nd.ones((4, 4), ctx=g)
        y = nd.dot(x, x)
        z = y + 1  # same stream: no wait
        nd.waitall()
        spies.clear()
        host = y.copyto(nd.cpu())
        y[:] = 0.0
        nd.waitall()
        dev = nd._backend.gpus["gpu0"]
        calls = list(spies)
        np.testing.assert_array_equal(host.asnumpy(), np.full((4, 4), 4.0, np.float32))
        np.testing.assert_array_equal(y.asnumpy(), np.zeros((4, 4), np.float32))
        del z
    waits = [(c[2]) for c in calls if c[0] == "wait"]
    assert waits == [dev.copy, dev.compute]
    first_host = next(i for i, c in enumerate(calls) if c[0] == "host")
    assert all(c[0] == "host" for c in calls[first_host:])  # only waitall's synchronisations


def test_cpu_ops_on_a_copied_buffer_wait_for_the_copy(spies):
    """A CPU op reading the CPU copy of a GPU array synchronises on that copy's event first
    (named after the copy), and sees its values."""
    with realexec.session(workers=1) as nd:
        y = nd.ones((3,), ctx=nd.gpu(0)) * 5
        nd.waitall()
        spies.clear()
        total = (y.copyto(nd.cpu()) + 1).asnumpy()
    assert ("host", "copyto", 2) in spies
    np.testing.assert_array_equal(total, np.full(3, 6.0, np.float32))


def test_a_gpu_kernel_error_surfaces_at_the_next_dependent_blocker(monkeypatch):
    """A kernel that raises fails its op: the next blocker on it, or on an op that depends on
    it, raises OpError naming the op; waitall reports it too."""
    def broken(inputs, out, attrs, stream):
        raise RuntimeError("launch failed")

    monkeypatch.setitem(gpu.GPU_KERNELS, "relu", broken)
    with realexec.session(workers=1) as nd:
        x = nd.ones((2, 2), ctx=nd.gpu(0))
        y = nd.relu(x)
        z = y + 1
        with pytest.raises(OpError, match="relu") as info:
            z.asnumpy()
        assert "launch failed" in str(info.value)
        with pytest.raises(OpError, match="relu"):
            nd.waitall()
        np.testing.assert_array_equal(x.asnumpy(), np.ones((2, 2), np.float32))


class _FaultyEvent:
    """An event whose synchronisation reports a device fault, as the driver would."""

    def synchronize(self):
        raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS")

    def query(self):
        return True


def test_a_device_fault_names_the_op_whose_event_reports_it():
    """A fault reported when a blocker synchronises on an op's event is an OpError naming it."""
    with realexec.session(workers=1) as nd:
        y = nd.ones((2,), ctx=nd.gpu(0)) + 1
        nd.waitall()
        var = nd._backend.vars[y.var]
        var.write = var.write._replace(event=_FaultyEvent())
        with pytest.raises(OpError, match="add_scalar.*ILLEGAL_ADDRESS"):
            y.wait_to_read()
        var.write = None


class _Event:
    def __init__(self):
        self.finished = False

    def query(self):
        return self.finished


def test_freed_buffers_wait_for_their_events(monkeypatch):
    """A freed buffer goes back at the frontend's next collect once every event of the ops that
    used it has completed, not before; after the run is closed, at once."""
    monkeypatch.setattr(gpu_vars, "event_done", lambda event: event.query())
    given = []
    releases = gpu_vars.Releases()
    first, second = _Event(), _Event()
    releases.later([first, second], given.append, "a")
    releases.later([], given.append, "b")
    assert given == [] and len(releases) == 2
    releases.collect()
    assert given == ["b"] and len(releases) == 1
    first.finished = True
    releases.collect()
    assert given == ["b"]
    second.finished = True
    releases.collect()
    assert given == ["b", "a"] and len(releases) == 0
    releases.closed = True
    releases.later([_Event()], given.append, "c")
    assert given == ["b", "a", "c"]


def test_no_gpu_and_no_simulator_gives_one_clear_error(monkeypatch):
    """Without a GPU or the simulator, nd.gpu(0) and run(device='gpu') fail at the call with one
    line naming gpu(0) and saying how to run under the simulator."""
    monkeypatch.setattr(gpu, "available", lambda: False)
    monkeypatch.setattr(gpu_runtime, "cuda", None)
    with realexec.session() as nd:
        with pytest.raises(ValueError) as info:
            nd.gpu(0)
    message = str(info.value)
    assert "gpu(0)" in message and "NUMBA_ENABLE_CUDASIM=1" in message and "\n" not in message
    with pytest.raises(ValueError, match="NUMBA_ENABLE_CUDASIM=1"):
        realexec.run(lambda nd: None, device="gpu")


@pytest.mark.simulator
def test_unusable_gpu_under_the_simulator_says_which_exist(monkeypatch):
    """The simulator offers SIM_GPUS virtual devices; asking for another names the range; with
    the simulator reported unavailable the message still says how to run under it."""
    with realexec.session() as nd:
        with pytest.raises(ValueError, match=r"gpu\(5\).*gpu\(0\) to gpu\(1\)"):
            nd.gpu(5)
    if gpu.on_simulator():
        monkeypatch.setattr(gpu, "available", lambda: False)
        with pytest.raises(ValueError, match="gpu\\(0\\).*NUMBA_ENABLE_CUDASIM=1"):
            gpu_device.check_gpu(0)


def test_warmup_launches_every_kernel_and_returns_its_buffers():
    """warmup compiles every kernel once on tiny arrays and gives its buffers back."""
    gc.collect()  # arrays that earlier tests left in cycles would go back in the middle
    pool = gpu_device.device_pool(0)
    before = pool.live_bytes
    gpu_device.warmup(0, ("float32",))
    assert pool.live_bytes == before
    assert (0, ("float32",)) in gpu_device._warm
