"""Cancelling an engine: an error that leaves a session, a close after Ctrl-C reached a blocker,
and `close(cancel=True)` drop the ops not yet started instead of draining them, wake blockers
waiting in other threads (EngineStopped), and leave no worker behind.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest

import realexec
from realexec.cpu import kernels as cpu
from realexec.engine import EngineStopped


def counting_kernel(ran: list, seconds: float, name: str = "add_scalar"):
    real = cpu.KERNELS[name]

    def kernel(inputs, out, attrs):
        time.sleep(seconds)
        ran.append(1)
        real(inputs, out, attrs)

    return kernel


def test_an_error_in_a_session_reaches_the_caller_without_draining():
    """A workload that raises with 200 slow ops queued: the error propagates and the ops not
    yet started never run (the drain would run all of them)."""
    ran: list = []
    with pytest.raises(RuntimeError, match="workload failed"):
        with realexec.session(workers=1) as nd:
            nd._backend.kernels = {**cpu.KERNELS, "add_scalar": counting_kernel(ran, 0.01)}
            x = nd.ones((4,))
            for _ in range(200):
                x += 1
            raise RuntimeError("workload failed")
    time.sleep(0.05)  # a running op may still finish
    assert len(ran) < 200


def test_run_propagates_a_workload_error_without_draining(monkeypatch):
    """realexec.run: the same through the one-call entry point."""
    ran: list = []
    monkeypatch.setitem(cpu.KERNELS, "relu", counting_kernel(ran, 0.01, "relu"))

    def workload(nd):
        x = nd.ones((4,))
        for _ in range(200):
            x = nd.relu(x)
        raise ValueError("bad workload")

    with pytest.raises(ValueError, match="bad workload"):
        realexec.run(workload, workers=1)
    time.sleep(0.05)
    assert len(ran) < 200


def test_close_after_ctrl_c_in_a_blocker_drops_the_queue():
    """Ctrl-C while wait_all sleeps behind a held op and 100 queued ones: once the held op is
    let go, close() returns without running the queued ops."""
    gate = threading.Event()
    ran: list = []
    main = threading.main_thread().ident
    engine = realexec.Engine(workers=1)
    var = engine.new_var()
    engine.push(gate.wait, (), (var,), name="held")
    for _ in range(100):
        engine.push(lambda: ran.append(1), (), (var,), name="queued")

    def interrupt():
        while not engine.blocked:
            time.sleep(0.001)
        signal.pthread_kill(main, signal.SIGINT)

    interrupter = threading.Thread(target=interrupt)
    interrupter.start()
    with pytest.raises(KeyboardInterrupt):
        engine.wait_all()
    interrupter.join()
    gate.set()
    engine.close()
    assert engine.closed and engine.stopped
    assert len(ran) < 100
    with pytest.raises(EngineStopped):
        engine.push(lambda: None, (), (engine.new_var(),), name="late")


def test_cancel_wakes_a_blocker_in_another_thread():
    """close(cancel=True) while another thread waits on an op that will never run: that
    thread's blocker raises EngineStopped instead of waiting forever."""
    gate = threading.Event()
    engine = realexec.Engine(workers=1, spin_s=0)
    held, waited = engine.new_var("held"), engine.new_var("waited")
    engine.push(gate.wait, (), (held,), name="held")
    engine.push(lambda: None, (held,), (waited,), name="behind")
    raised: list = []

    def waiter():
        try:
            engine.wait_for_var(waited)
        except EngineStopped as exc:
            raised.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    while not engine.blocked:
        time.sleep(0.001)
    engine.close(cancel=True)
    thread.join(10)
    gate.set()
    assert not thread.is_alive()
    assert raised and "stopped" in str(raised[0])


def test_an_engine_with_block_left_by_an_error_cancels():
    """`with Engine() as e:` left by an exception drops the queued ops too."""
    ran: list = []
    with pytest.raises(ZeroDivisionError):
        with realexec.Engine(workers=1) as engine:
            var = engine.new_var()
            engine.push(time.sleep, (), (var,), name="first", args=(0.05,))
            for _ in range(50):
                engine.push(lambda: ran.append(1), (), (var,), name="queued")
            raise ZeroDivisionError("workload failed")
    assert engine.closed and len(ran) < 50


def test_a_cancelled_engine_abandons_a_long_op():
    """A running op that outlives the cancelling close's grace period is abandoned: close
    returns, and the abandoned worker is a daemon thread (the process can still exit)."""
    gate = threading.Event()
    engine = realexec.Engine(workers=1)
    engine.push(gate.wait, (), (engine.new_var(),), name="stuck")
    time.sleep(0.01)
    engine.close(cancel=True)
    stuck = [t for t in threading.enumerate() if t.name == "realexec-cpu/w0" and t.is_alive()]
    assert stuck and all(t.daemon for t in stuck)
    gate.set()
    for t in stuck:
        t.join(10)
