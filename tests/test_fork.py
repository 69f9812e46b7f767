"""os.fork() with a session open: the child inherits the engine's state but not its worker
threads. Touching the inherited engine in the child (an op, a blocker) raises EngineStopped
saying so, and the child exits normally; the parent's session goes on unaffected.

Forking a process that runs threads is only safe in a fresh process, so each case runs a script
in a subprocess, with a timeout: a child that hangs fails the test.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    import realexec
    from realexec.engine import EngineStopped

    def child(nd, x):
        for what, call in [("op", lambda: x + 1), ("blocker", lambda: x.asnumpy()),
                           ("waitall", nd.waitall)]:
            try:
                call()
                print(f"child {what}: no error", flush=True)
            except EngineStopped as exc:
                print(f"child {what}: EngineStopped: {exc}", flush=True)
        {child_exit}

    with realexec.session(workers=2) as nd:
        x = nd.ones((3,)) + 1
        x.wait_to_read()
        y = x * 2  # maybe still queued at the fork
        pid = os.fork()
        if pid == 0:
            child(nd, x)
        else:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    print(f"child status {os.waitstatus_to_exitcode(status)}", flush=True)
                    break
                time.sleep(0.01)
            else:
                os.kill(pid, 9)
                print("child hung", flush=True)
            print("parent", (x + 1).asnumpy().tolist(), y.asnumpy().tolist(), flush=True)
    if pid == 0:
        print("child left the session", flush=True)
""")


def run_script(child_exit: str) -> str:
    result = subprocess.run([sys.executable, "-c", SCRIPT.replace("{child_exit}", child_exit)],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_fork_child_gets_a_clear_error_and_exits_normally():
    """In the child an op, a blocker and waitall each raise EngineStopped naming the fork; the
    child leaves the session block by sys.exit(0) and exits 0; the parent still computes."""
    out = run_script("sys.exit(0)")
    for what in ("op", "blocker", "waitall"):
        assert f"child {what}: EngineStopped" in out, out
    assert "os.fork()" in out
    assert "child status 0" in out, out
    assert "parent [3.0, 3.0, 3.0] [4.0, 4.0, 4.0]" in out


def test_a_fork_child_that_leaves_the_session_normally_exits_normally():
    """A child that leaves the session block normally (its close has nothing to drain: the
    engine is not its own) goes on and ends like any process."""
    out = run_script("pass")
    assert "child left the session" in out, out
    assert "child status 0" in out, out
    assert "parent [3.0, 3.0, 3.0] [4.0, 4.0, 4.0]" in out
