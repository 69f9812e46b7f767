"""Errors and shutdown: a failing kernel poisons what it writes, the error surfaces at the next
dependent blocker (naming the op, raised from the original exception), dependents do not run,
waitall re-raises, and the engine keeps working. Shape and device errors fail at the call.
Ctrl-C during a wait leaves the engine closable; no thread outlives its engine.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
import traceback

import numpy as np
import pytest
from test_realexec_memory import gated  # a kernel that waits for an event

import realexec
from asyncsim.nd.ops import ShapeError
from realexec import OpError
from realexec.cpu import kernels as cpu
from realexec.engine import EngineStopped


def broken_kernel(inputs, out, attrs):
    raise ZeroDivisionError("injected failure")


def test_engine_error_surfaces_at_the_dependent_blocker():
    """wait_for_var on a poisoned var raises OpError naming the op, from the original exception;
    an independent var reads fine; the dependent op never runs."""
    ran = []
    with realexec.Engine(workers=2) as engine:
        a, b, c = engine.new_var("a"), engine.new_var("b"), engine.new_var("c")
        engine.push(broken_kernel, (), (a,), name="explode", op_id=7, args=((), None, {}))
        engine.push(lambda: ran.append("dependent"), (a,), (c,), name="dependent")
        engine.push(lambda: ran.append("independent"), (), (b,), name="independent")
        engine.wait_for_var(b)
        with pytest.raises(OpError) as info:
            engine.wait_for_var(c)
        assert info.value.op_name == "explode" and info.value.op_id == 7
        assert "'explode' (#7)" in str(info.value)
        assert isinstance(info.value.__cause__, ZeroDivisionError)
        frames = traceback.extract_tb(info.value.__cause__.__traceback__)
        assert frames[-1].name == "broken_kernel"
        with pytest.raises(OpError):
            engine.wait_for_var(a)  # still poisoned: every read of it fails
        assert ran == ["independent"]
        with pytest.raises(OpError, match="explode"):
            engine.wait_all()
        engine.wait_all()  # reported once: the next waitall is clean
        d = engine.new_var("d")
        engine.push(lambda: ran.append("after"), (b,), (d,))
        engine.wait_for_var(d)
    assert ran == ["independent", "after"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_worker_stopped_by_an_error_of_the_engines_own_stops_the_blockers():
    """A kernel's error is its op's; an error of the engine's own code on a worker thread (one
    mutant of the light results left an op without its record) ends that thread, and the ops
    it held never finish: the next blocker says so (EngineStopped, naming the worker and the
    error) instead of waiting forever, and the engine still closes."""
    with realexec.session(workers=1) as nd:
        engine = nd._backend.engine

        def broken(slot, label, log):
            raise RuntimeError("an engine bug")

        engine._run_python = broken  # the worker's way into a Python kernel
        nd._backend.kernels = {**cpu.KERNELS, "relu": gated("relu", threading.Event())}
        x = nd.ones((3,))
        y = nd.relu(x)  # a Python kernel: the worker calls `_run_python`
        start = time.perf_counter()
        with pytest.raises(EngineStopped, match="engine's own.*an engine bug"):
            y.wait_to_read()
        assert time.perf_counter() - start < 5


def test_nd_error_names_the_op_and_the_engine_stays_usable():
    """Through nd: a failing relu surfaces at asnumpy of anything computed from it, waitall raises
    it, an unrelated array still reads, and new work runs afterwards."""
    with realexec.session(workers=2) as nd:
        nd._backend.kernels = {**cpu.KERNELS, "relu": broken_kernel}
        x = nd.ones((3, 3))
        y = nd.relu(x)
        z = y * 2 + 1
        w = x + 1
        np.testing.assert_array_equal(w.asnumpy(), np.full((3, 3), 2, np.float32))
        with pytest.raises(OpError, match="'relu'") as info:
            z.asnumpy()
        assert isinstance(info.value.__cause__, ZeroDivisionError)
        with pytest.raises(OpError, match="relu"):
            z.wait_to_read()
        with pytest.raises(OpError, match="relu"):
            nd.waitall()
        nd._backend.kernels = cpu.KERNELS
        assert (x + 4).sum().item() == 45.0
        nd.waitall()


def test_sync_mode_defers_errors_to_the_blocker_too():
    """In sync mode the op runs inside the push, but its error still surfaces at the blocker."""
    with realexec.session(mode="sync") as nd:
        nd._backend.kernels = {**cpu.KERNELS, "relu": broken_kernel}
        y = nd.relu(nd.ones((2,)))  # does not raise here
        with pytest.raises(OpError, match="relu"):
            y.wait_to_read()
        with pytest.raises(OpError):
            nd.waitall()


def test_run_reports_an_error_the_workload_never_waited_for(monkeypatch):
    """realexec.run ends with a waitall, so a failure the workload ignored is not lost."""
    def ignores(nd):
        nd.relu(nd.ones((2,)))

    monkeypatch.setitem(cpu.KERNELS, "relu", broken_kernel)
    with pytest.raises(OpError, match="relu"):
        realexec.run(ignores)


def test_shape_and_device_errors_fail_at_the_call():
    """A shape mismatch or an unavailable device raises in the frontend; nothing is pushed."""
    with realexec.session(workers=1) as nd:
        engine = nd._backend.engine
        a, b = nd.ones((2, 3)), nd.ones((4, 5))
        nd.waitall()
        pushed = len(engine.spans())
        with pytest.raises(ShapeError, match="dot"):
            nd.dot(a, b)
        with pytest.raises(ShapeError, match="div"):
            a / b
        with pytest.raises(ValueError, match=r"gpu\(7\)"):
            nd.ones((2,), ctx=nd.gpu(7))
        with pytest.raises(ValueError, match="gpu"):
            realexec.run(lambda nd: None, device="gpu0")
        assert len(engine.spans()) == pushed


def test_keyboard_interrupt_during_waitall_leaves_the_engine_closable():
    """Ctrl-C (SIGINT) while waitall sleeps raises KeyboardInterrupt there; once the op is let
    go, close() drains and joins the workers."""
    gate = threading.Event()
    main = threading.main_thread().ident
    engine = realexec.Engine(workers=2)
    engine.push(gate.wait, (), (engine.new_var(),), name="held")

    def interrupt():
        while not engine.blocked:
            time.sleep(0.001)
        signal.pthread_kill(main, signal.SIGINT)

    interrupter = threading.Thread(target=interrupt)
    interrupter.start()
    with pytest.raises(KeyboardInterrupt):
        engine.wait_all()
    interrupter.join()
    assert not engine.blocked
    gate.set()
    engine.close()
    assert engine.closed
    assert not [t for t in threading.enumerate() if t.name.startswith("realexec-")]


def test_no_thread_left_after_run_or_session():
    """run and session join every worker they started, even when the workload raises."""
    before = set(threading.enumerate())
    realexec.run(lambda nd: (nd.ones((3,)) + 1).asnumpy(), workers=3)
    with pytest.raises(RuntimeError, match="workload failed"):
        with realexec.session(workers=2) as nd:
            nd.ones((3,))
            raise RuntimeError("workload failed")
    assert set(threading.enumerate()) == before


def test_push_after_close_is_refused():
    """A closed engine refuses new ops with a clear message."""
    engine = realexec.Engine(workers=1)
    engine.close()
    engine.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        engine.push(lambda: None, (), (engine.new_var(),), name="late")


def test_engine_left_open_does_not_hang_interpreter_exit():
    """An engine never closed is closed by the exit hook, so the process ends (non-daemon
    workers would otherwise keep it alive forever)."""
    script = textwrap.dedent("""
        import realexec
        engine = realexec.Engine(workers=2)
        engine.push(lambda: None, (), (engine.new_var(),))
        print("done")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"


def test_ctrl_c_inside_a_sync_mode_op_reaches_the_user():
    """In sync mode the op runs on the frontend thread: a KeyboardInterrupt there propagates from
    the push (it is the user's), the op's var is poisoned, and the engine keeps working."""
    def interrupted():
        raise KeyboardInterrupt

    with realexec.Engine(mode="sync") as engine:
        a, b = engine.new_var("a"), engine.new_var("b")
        with pytest.raises(KeyboardInterrupt):
            engine.push(interrupted, (), (a,), name="long op")
        with pytest.raises(OpError, match="long op"):
            engine.wait_for_var(a)
        engine.push(lambda: None, (), (b,))
        engine.wait_for_var(b)


def test_a_fast_push_whose_input_failed_meanwhile_passes_the_failure_on():
    """The fast push reads whether any var is poisoned before it pushes; the op writing its
    input may fail in between (its worker thread took the GIL). The compiled push then finds
    that op failed and holds the new op until its record is written: its result is poisoned,
    not computed from a buffer the failed op never wrote."""
    with realexec.session(workers=1) as nd:
        nd._backend.kernels = {**cpu.KERNELS, "relu": broken_kernel}
        x = nd.ones((3,))
        bad = nd.relu(x)
        with pytest.raises(OpError, match="relu"):
            bad.wait_to_read()
        nd._backend.engine._tainted = False  # as the push read it, before the failure
        y = bad + 1  # the fast push (`realexec.unary`)
        with pytest.raises(OpError, match="relu"):
            y.asnumpy()
        np.testing.assert_array_equal((x + 1).asnumpy(), np.full(3, 2, np.float32))


@pytest.mark.parametrize("engine, kernel", [("native", "compiled"), ("native", "python"),
                                            ("python", "python")])
def test_an_op_after_a_failed_read_of_its_var_still_runs(engine, kernel):
    """A failure passes to the ops that read or write the failed op's outputs, as MXNet passes
    it through vars. An op that only overwrites a var the failed op read waits for that read
    (write-after-read) but touches nothing poisoned: it runs, and the var reads its new value,
    whether the compiled worker runs its kernel or Python does."""
    gate = threading.Event()
    add = cpu.KERNELS["add_scalar"]
    with realexec.session(workers=1, engine=engine) as nd:
        kernels = {**cpu.KERNELS, "relu": broken_kernel, "ones": gated("ones", gate)}
        if kernel == "python":  # not the shipped kernel: it runs in Python
            kernels["add_scalar"] = lambda inputs, out, attrs: add(inputs, out, attrs)
        nd._backend.kernels = kernels
        x = nd.ones((3,))  # held: the ops below wait, so the failure passes along an edge
        bad = nd.relu(x)
        x += 1  # waits for relu's read of x
        gate.set()
        np.testing.assert_array_equal(x.asnumpy(), np.full(3, 2, np.float32))
        with pytest.raises(OpError, match="relu"):
            bad.asnumpy()


def test_a_general_push_whose_input_failed_meanwhile_passes_the_failure_on():
    """As for the fast push: a product pushed after its input's op failed, the frontend's look
    for poisoned vars taken before that failure, is poisoned rather than run on a buffer the
    failed op never wrote; an op that only overwrites a var the failed op read still runs."""
    with realexec.session(workers=1) as nd:
        nd._backend.kernels = {**cpu.KERNELS, "relu": broken_kernel}
        x, w = nd.ones((2, 3)), nd.ones((4, 3))
        bad = nd.relu(x)
        with pytest.raises(OpError, match="relu"):
            bad.wait_to_read()
        engine = nd._backend.engine
        engine._tainted = False  # as the push read it, before the failure
        z = nd.dot(bad, w, transpose_b=True)  # the general push
        engine._tainted = False
        x += 1  # overwrites what relu read: runs
        with pytest.raises(OpError, match="relu"):
            z.asnumpy()
        np.testing.assert_array_equal(x.asnumpy(), np.full((2, 3), 2, np.float32))


def test_sync_mode_passes_a_failure_on_to_the_elementwise_ops_after_it():
    """Sync mode's `y = x + 1` (`realexec.unary`, no analysis) poisons the result of an op that
    reads a failed op's output, and still computes one whose input is sound."""
    with realexec.session(mode="sync") as nd:
        nd._backend.kernels = {**cpu.KERNELS, "relu": broken_kernel}
        x = nd.ones((2,))
        bad = nd.relu(x)
        after = bad + 1
        sound = x + 1
        assert sound.asnumpy().tolist() == [2.0, 2.0]
        with pytest.raises(OpError, match="relu"):
            after.wait_to_read()
        with pytest.raises(OpError):
            nd.waitall()
