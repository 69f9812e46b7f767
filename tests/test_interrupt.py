"""Ctrl-C (SIGINT) stops a process that uses the engine promptly, wherever it lands: in a
blocker, in a push held by max_inflight, in a session's closing drain, in the exit drain of a
session left open, twice in a row, in the `asyncsim` command, and in an array's free. The ops
not yet started are dropped (they would take a minute here); a running op that does not finish
is abandoned.

Each case but the last runs a script in a fresh Python process, waits for it to print "ready",
sends SIGINT and waits with a generous timeout that is still far shorter than the queued work: a
process that drained its queue, or hung, fails the test. How fast it stops is measured by
benchmarks/interrupt.py, not here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

# every script starts so: queue(nd) pushes N in-place additions of 20 ms each (a minute of
# work), counting those that ran; the count is printed at exit
PRELUDE = """
import atexit, sys, time
import realexec
from realexec.cpu import kernels as cpu
from realexec.cpu import warm

N = 3000
ran = [0]
atexit.register(lambda: print(f"ran {ran[0]}", flush=True))

def slow(inputs, out, attrs):
    time.sleep(0.02)
    ran[0] += 1
    cpu.KERNELS["add_scalar"](inputs, out, attrs)

def queue(nd, n=N):
    nd._backend.kernels = {**cpu.KERNELS, "add_scalar": slow}
    x = nd.ones((4,))
    for _ in range(n):
        x += 1
    return x
"""
TIMEOUT_S = 30  # the queue alone takes 60 s


def start(script: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(script)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the script did not get ready: {line}{out}{err}")
    time.sleep(0.3)  # into the blocker, asleep
    return proc


def interrupt(proc: subprocess.Popen, times: int = 1) -> tuple[int, str, str]:
    """SIGINT `times` times (50 ms apart); the exit status, stdout and stderr. Fails if the
    process is still alive after TIMEOUT_S."""
    for i in range(times):
        if i:
            time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running {TIMEOUT_S} s after Ctrl-C: {err[-2000:]}")
    return proc.returncode, out, err


def ran(out: str) -> int:
    return int(out.split("ran ")[-1].split()[0])


def test_ctrl_c_in_waitall_drops_the_queue():
    """Ctrl-C while waitall sleeps behind a minute of queued ops: KeyboardInterrupt, and the
    session's close drops the queue instead of draining it."""
    proc = start("""
        with realexec.session(workers=2) as nd:
            x = queue(nd)
            print("ready", flush=True)
            nd.waitall()
    """)
    status, out, err = interrupt(proc)
    assert "KeyboardInterrupt" in err
    assert status != 0
    assert ran(out) < 3000


def test_ctrl_c_in_a_push_held_by_max_inflight_abandons_a_long_op():
    """Ctrl-C while a push waits for room under max_inflight, behind an op that would run for
    two minutes: the process ends, abandoning that op."""
    proc = start("""
        with realexec.session(workers=1, max_inflight=2) as nd:
            nd._backend.kernels = {**cpu.KERNELS, "ones": lambda *args: time.sleep(120)}
            x = nd.ones((4,))
            print("ready", flush=True)
            while True:
                y = x + 1
    """)
    status, out, err = interrupt(proc)
    assert "KeyboardInterrupt" in err
    assert status != 0


def test_ctrl_c_in_the_closing_drain_of_a_session():
    """A `with realexec.session()` block that ends with a minute queued drains it in its close;
    Ctrl-C there drops the rest."""
    proc = start("""
        with realexec.session(workers=2) as nd:
            x = queue(nd)
            print("ready", flush=True)
    """)
    status, out, err = interrupt(proc)
    assert "KeyboardInterrupt" in err
    assert ran(out) < 3000


def test_ctrl_c_in_the_exit_drain_of_a_session_left_open():
    """A session never closed is drained at interpreter exit; Ctrl-C there cancels it and the
    process ends, saying so in one line."""
    proc = start("""
        open_session = realexec.session(workers=2)
        nd = open_session.__enter__()
        x = queue(nd)
        print("ready", flush=True)
    """)
    status, out, err = interrupt(proc)
    assert "interrupted at exit" in err
    assert ran(out) < 3000


def test_a_second_ctrl_c_never_hangs():
    """Two Ctrl-C 50 ms apart (the second lands in the cancelling close, or after it): the
    process still ends."""
    proc = start("""
        with realexec.session(workers=2) as nd:
            x = queue(nd)
            print("ready", flush=True)
            nd.waitall()
    """)
    status, out, err = interrupt(proc, times=2)
    assert status != 0
    assert "KeyboardInterrupt" in err


def test_ctrl_c_in_the_cli_is_one_line_and_status_130():
    """`asyncsim run` interrupted: one line on stderr, no traceback, exit status 130."""
    proc = start("""
        from asyncsim.lab import cli

        # compile the kernels first: a SIGINT that lands inside numba's first compilation (a
        # fresh clone has no cache) is raised in an llvmlite callback, which can crash the process
        warm.warmup()
        real_run = cli.run_one

        def announced(*args, **kwargs):
            print("ready", flush=True)
            return real_run(*args, **kwargs)

        cli.run_one = announced
        sys.exit(cli.main(["run", "sync_vs_async_12_2", "--param", "n=1000000"]))
    """)
    status, out, err = interrupt(proc)
    assert status == 130, err
    assert err.strip() == "asyncsim run: interrupted"


def test_a_ctrl_c_inside_an_arrays_free_reaches_the_main_thread():
    """CPython drops what a finalizer raises, so a Ctrl-C landing in an NDArray's free (its
    `__del__`) was lost and the run went on. It is raised again in the main thread."""
    import realexec

    with realexec.session(workers=1) as nd:
        x = nd.ones((2,))
        real = nd._free

        def interrupted(var):
            nd._free = real
            real(var)
            raise KeyboardInterrupt

        nd._free = interrupted
        start = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            del x
            time.sleep(5)  # the Ctrl-C comes back within milliseconds, and ends the sleep
        assert time.perf_counter() - start < 2.5


def test_a_ctrl_c_in_an_arrays_finalizer_is_sent_again_and_not_lost(monkeypatch):
    """The command line's SIGINT handler (`ndarray.interrupts_outside_finalizers`): in the
    frame of a `__del__` it raises nothing (CPython would drop it) and sends the signal again
    for after the finalizer; anywhere else it raises KeyboardInterrupt; and the previous
    handler is back once it ends."""
    from types import SimpleNamespace

    from asyncsim.nd import ndarray

    sent = []
    monkeypatch.setattr(ndarray, "_interrupt_again", lambda: sent.append("again"))
    previous = signal.getsignal(signal.SIGINT)
    with ndarray.interrupts_outside_finalizers():
        handler = signal.getsignal(signal.SIGINT)
        handler(signal.SIGINT, SimpleNamespace(f_code=SimpleNamespace(co_name="__del__")))
        assert sent == ["again"]
        with pytest.raises(KeyboardInterrupt):
            handler(signal.SIGINT, SimpleNamespace(f_code=SimpleNamespace(co_name="loop")))
    assert signal.getsignal(signal.SIGINT) is previous and sent == ["again"]
