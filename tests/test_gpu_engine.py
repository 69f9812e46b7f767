"""realexec on the GPU: every op through `nd` on gpu(0), blockers, lanes, memory, sync mode.

Runs under numba's CUDA simulator (tests/conftest.py sets NUMBA_ENABLE_CUDASIM=1) or on a real
GPU with ASYNCSIM_REAL_GPU=1. The simulator runs each CUDA thread as a Python thread, so arrays
are tiny and values small integers, which every kernel computes exactly.
"""

import numpy as np
import pytest

import asyncsim
import realexec
from asyncsim.nd.program import Op
from realexec.gpu import kernels as gpu

if not gpu.available():
    pytest.skip(gpu.device_error(0), allow_module_level=True)

pytestmark = [pytest.mark.cudasim, pytest.mark.usefixtures("quick_simulator_barriers")]

A = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
B = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
ROW = np.array([1.0, -2.0, 3.0, 0.5], np.float32)


@pytest.fixture(scope="module")
def nd():
    """One session with gpu(0) for the op checks (the engine is started once)."""
    with realexec.session(workers=2) as nd:
        yield nd


def on_gpu(nd, host):
    return nd.array(host, ctx=nd.gpu(0))


def test_creation_ops_on_the_gpu(nd):
    """ones, zeros, full and array give numpy's values; uniform/normal stay in range, and every
    result lives on gpu(0)."""
    g = nd.gpu(0)
    made = {"ones": nd.ones((3, 4), ctx=g), "zeros": nd.zeros((3, 4), ctx=g),
            "full": nd.full((3, 4), 2.5, ctx=g), "array": on_gpu(nd, A)}
    for name, want in [("ones", np.ones((3, 4))), ("zeros", np.zeros((3, 4))),
                       ("full", np.full((3, 4), 2.5)), ("array", A)]:
        assert made[name].context == g
        np.testing.assert_array_equal(made[name].asnumpy(), want.astype(np.float32))
    u = nd.random.uniform(-1, 1, shape=(4, 8), ctx=g).asnumpy()
    assert u.dtype == np.float32 and u.shape == (4, 8) and (u >= -1).all() and (u < 1).all()
    n = nd.random.normal(2.0, 0.5, shape=(32,), ctx=g, dtype="float64").asnumpy()
    assert n.dtype == np.float64 and abs(n.mean() - 2.0) < 0.5


ARITH = [
    ("a + b", lambda a, b: a + b), ("a - b", lambda a, b: a - b),
    ("a * b", lambda a, b: a * b), ("a / b", lambda a, b: a / b),
    ("a + row", None), ("a + 2", lambda a, b: a + 2), ("a - 2", lambda a, b: a - 2),
    ("2 - a", lambda a, b: 2 - a), ("a * 3", lambda a, b: a * 3), ("a / 4", lambda a, b: a / 4),
    ("8 / b", lambda a, b: 8 / b), ("-a", lambda a, b: -a),
]


@pytest.mark.parametrize(("label", "fn"), ARITH, ids=[a[0] for a in ARITH])
def test_arithmetic_on_the_gpu_equals_numpy(nd, label, fn):
    """Elementwise ops with arrays, a broadcast row and scalars give numpy's float32 values."""
    a, b = on_gpu(nd, A), on_gpu(nd, B)
    if fn is None:
        got, want = a + on_gpu(nd, ROW), A + ROW
    else:
        got, want = fn(a, b), fn(A, B)
    assert got.context == nd.gpu(0)
    np.testing.assert_array_equal(got.asnumpy(), want.astype(np.float32))


def test_relu_dot_and_reductions_on_the_gpu(nd):
    """relu, 2-d and 1-d dot, sum, mean and norm match numpy; reductions are 0-d."""
    a, bt = on_gpu(nd, A), on_gpu(nd, B.T.copy())
    np.testing.assert_array_equal(nd.relu(a).asnumpy(), np.maximum(A, 0))
    np.testing.assert_array_equal(nd.dot(a, bt).asnumpy(), A @ B.T)
    np.testing.assert_array_equal(nd.dot(on_gpu(nd, ROW), bt).asnumpy(), ROW @ B.T)
    assert a.sum().shape == ()
    assert a.sum().item() == float(A.sum())
    assert a.mean().item() == pytest.approx(float(A.mean()))
    assert a.norm().item() == pytest.approx(float(np.linalg.norm(A)), rel=1e-6)


def test_slices_setitem_and_copies_on_the_gpu(nd):
    """Row slices, in-place row assignment (array, broadcast row, scalar) and copy match numpy."""
    a = on_gpu(nd, A)
    np.testing.assert_array_equal(a[1].asnumpy(), A[1])
    np.testing.assert_array_equal(a[1:3].asnumpy(), A[1:3])
    want = A.copy()
    a[0:2] = on_gpu(nd, B[0:2])
    want[0:2] = B[0:2]
    a[2:3] = on_gpu(nd, ROW)
    want[2:3] = ROW
    a[1] = 7.0
    want[1] = 7.0
    copied = a.copy()
    a += 1
    np.testing.assert_array_equal(copied.asnumpy(), want)
    np.testing.assert_array_equal(a.asnumpy(), want + 1)


@pytest.mark.two_gpus
def test_copyto_and_as_in_context_between_devices(nd):
    """cpu -> gpu0 -> gpu1 -> cpu round trips keep the values; as_in_context on the same device
    is the array itself, copyto within one device a new array."""
    cpu, g0, g1 = nd.cpu(), nd.gpu(0), nd.gpu(1)
    x = nd.array(A)
    on0 = x.copyto(g0)
    on1 = on0.as_in_context(g1)
    back = (on1 * 2).copyto(cpu) + 1  # a CPU op on the buffer a GPU copy fills
    assert (on0.context, on1.context, back.context) == (g0, g1, cpu)
    assert on0.as_in_context(g0) is on0
    same = on0.copyto(g0)
    assert same is not on0 and same.context == g0
    np.testing.assert_array_equal(back.asnumpy(), A * 2 + 1)
    np.testing.assert_array_equal(same.asnumpy(), A)


def test_blockers_on_gpu_arrays(nd):
    """wait_to_read returns, asnumpy gives a fresh numpy array, item a float, print the values
    with the device."""
    y = on_gpu(nd, A) + 1
    y.wait_to_read()
    first = y.asnumpy()
    first[:] = 0  # a copy: the device array is untouched
    np.testing.assert_array_equal(y.asnumpy(), A + 1)
    assert (y.sum() * 1).item() == float((A + 1).sum())
    text = repr(y)
    assert "@gpu(0)" in text and "6." in text


def workload_with_every_lane(nd):
    g = nd.gpu(0)
    x = nd.ones((4, 4), ctx=g)
    y = x + 1
    c = y.copyto(nd.cpu())
    d = c * 2
    e = d.copyto(g)
    f = e - 1
    nd.waitall()
    return f


def test_trace_has_cpu_gpu_compute_and_copy_lanes_like_the_model():
    """Each op's span is on the lane the model puts it on: GPU kernels on gpu0/compute (exec),
    copies between devices on gpu0/copy (copy), CPU ops on a CPU worker (exec)."""
    meas = realexec.run(workload_with_every_lane, workers=2)
    program = asyncsim.record(workload_with_every_lane)
    pred = asyncsim.simulate(program, asyncsim.Profile.ideal(workers=2, gpus=1))

    def lanes(trace):
        return {s.op_id: (s.lane.split("/")[0] if s.lane.startswith("cpu/") else s.lane, s.kind)
                for s in trace.spans if s.kind in ("exec", "copy")}

    assert lanes(meas) == lanes(pred)
    names = {op.id: op.name for op in program.instrs if isinstance(op, Op)}
    got = {names[op_id]: lane for op_id, lane in lanes(meas).items()}
    assert got["add_scalar"] == ("gpu0/compute", "exec")
    assert got["mul_scalar"] == ("cpu", "exec")
    assert got["copyto"] == ("gpu0/copy", "copy")
    assert {"frontend", "gpu0/compute", "gpu0/copy"} <= set(meas.lanes)
    assert meas.meta["gpus"]["gpu0"]


def memory_workload(nd):
    g = nd.gpu(0)
    x = nd.ones((4, 4), ctx=g)  # 64 bytes on gpu0
    y = x + 1  # 128
    c = y.copyto(nd.cpu())  # 64 bytes of pinned host memory, counted on cpu
    nd.waitall()
    del x, y  # gpu0 back to 0
    c.wait_to_read()
    del c  # cpu back to 0
    nd.waitall()


def test_gpu_memory_is_in_the_trace_and_matches_the_model():
    """gpu0's live bytes are sampled as device 'gpu0' (peak 128, back to 0); the pinned copy
    target counts on 'cpu'; peaks equal the model's; x's and y's bytes go back only after the
    ops reading them have run."""
    meas = realexec.run(memory_workload)
    pred = asyncsim.predict(memory_workload, asyncsim.Profile.ideal(gpus=1))
    assert "gpu0" in meas.devices
    for device, peak in [("gpu0", 128), ("cpu", 64)]:
        assert meas.peak_bytes(device) == pred.peak_bytes(device) == peak
        assert meas.memory_curve(device)[1][-1] == 0
    t, live = meas.memory_curve("gpu0")
    copy_end = max(s.end for s in meas.spans if s.name == "copyto")
    peak_at = int(np.argmax(live))
    assert all(when >= copy_end for when in t[peak_at + 1:])  # released after their last reader


def test_sync_mode_runs_each_gpu_op_inside_its_call():
    """mode='sync' (NaiveEngine): each GPU op and copy runs to completion inside its issuing
    call, so its span lies inside the frontend's wait for that op (on a real GPU, to within the
    error of mapping the device's clock to the host's); values are unchanged."""
    meas = realexec.run(workload_with_every_lane, mode="sync")
    slack = meas.meta["gpu_clock_error_s"]
    waits = {s.op_id: s for s in meas.spans_of("frontend", "wait") if s.op_id >= 0}
    device_spans = [s for s in meas.spans if s.lane.startswith("gpu0/")]
    assert device_spans
    for span in device_spans:
        wait = waits[span.op_id]
        assert wait.start - slack <= span.start and span.end <= wait.end + slack
    with realexec.session(mode="sync") as nd:
        np.testing.assert_array_equal(workload_with_every_lane(nd).asnumpy(),
                                      np.full((4, 4), 3.0, np.float32))


def test_run_on_device_gpu_puts_arrays_without_ctx_on_gpu0():
    """run(device='gpu'): arrays made without a ctx live on gpu(0), so their ops run on its
    compute lane and no CPU worker runs anything."""
    seen = []

    def workload(nd):
        a = nd.ones((2, 3))
        seen.append(a.context)
        (a * 2).wait_to_read()

    meas = realexec.run(workload, device="gpu")
    assert seen == [asyncsim.nd.ndarray.Context("gpu", 0)]
    assert {s.lane for s in meas.spans if s.kind == "exec"} == {"gpu0/compute"}
    with pytest.raises(ValueError, match="'cpu' or 'gpu'"):
        realexec.run(workload, device="gpu0")
