"""The memory pool survives a collection that starts inside one of its locked sections: under a
tracer (a debugger, coverage, hypothesis explaining a failure) Python code runs at every line,
and the NDArray.__del__ of a collected cycle releases its buffer on that same thread. The pool's
lock is re-entrant, so that release completes instead of deadlocking the thread (which held the
process-wide buffer cache's lock, so every later op of the process hung too).

Run in a subprocess with a timeout: a deadlock fails the test instead of hanging the suite.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import gc, linecache, sys
    import realexec
    from realexec.engine import memory

    INSIDE = ("self.hits += 1", "self.misses += 1")  # lines within `with cache.lock:`
    fired = []

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != memory.__file__:
            return None

        def local(frame, event, arg):
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
            if event == "line" and not fired and any(s in line for s in INSIDE):
                fired.append(line.strip())
                gc.collect()  # the cycle's NDArray is freed here, on this thread
            return local

        return local

    with realexec.session(workers=1, engine="native") as nd:
        nd.waitall()
        gc.disable()  # the cycle below is collected in the section, not before
        garbage = [nd.ones((4,))]
        garbage.append(garbage)  # a cycle: only the collector frees it
        del garbage
        nd.waitall()  # its op has run: its free releases at once, on the collecting thread
        sys.settrace(tracer)
        x = nd.ones((4,)) + 1
        sys.settrace(None)
        gc.enable()
        nd.waitall()
        live = nd._backend.pools["cpu"].live_bytes  # x's alone: the garbage's went back
        print("fired", bool(fired), x.asnumpy().tolist(), live, flush=True)
""")


def test_a_release_inside_a_locked_pool_section_does_not_deadlock():
    """A collection started (by a tracer) inside Pool.acquire's locked section frees an array;
    its release completes and the session computes on."""
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "fired True [2.0, 2.0, 2.0, 2.0] 16"
