"""Frees that the cyclic garbage collector triggers: an NDArray kept alive only by a reference
cycle is freed whenever the GC happens to run, on whatever thread allocates at that moment, even
inside the engine's own critical sections. That must neither deadlock nor free too early.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np

import realexec


def test_free_inside_a_critical_section_does_not_deadlock():
    """A delete_var issued while this thread holds the engine's lock (what a GC-run __del__ does
    when the GC starts inside a section) goes through: the lock is re-entrant."""
    released = []
    engine = realexec.Engine(workers=1)
    busy, idle = engine.new_var("busy"), engine.new_var("idle")
    engine.push(lambda: None, (), (busy,))

    def free_inside_section():
        with engine._lock:  # stands for "the GC ran inside push or complete"
            engine.delete_var(idle, released.append, ("idle",))
            engine.delete_var(busy, released.append, ("busy",))

    # in a daemon thread, so a regression shows as a failure instead of a hung suite
    attempt = threading.Thread(target=free_inside_section, daemon=True)
    attempt.start()
    attempt.join(timeout=30)
    assert not attempt.is_alive(), "delete_var deadlocked inside the engine's lock"
    engine.wait_all()
    engine.close()
    assert sorted(released) == ["busy", "idle"]


def test_arrays_freed_by_the_cyclic_gc_under_pressure():
    """With the GC running at almost every allocation, arrays held only by cycles are freed on
    random threads mid-run; the run finishes (no deadlock), with the right values and no memory
    left live. Run in a subprocess so a deadlock shows as a timeout, not a hung suite."""
    script = textwrap.dedent("""
        import gc
        import realexec

        class Holder:
            def __init__(self, arr):
                self.arr, self.me = arr, self

        def work(nd, out, n=1500):
            x = nd.ones((4, 4))
            for i in range(n):
                Holder(x + i)
                y = x * 2
                y += 1
            out.append(y.asnumpy())
            del x, y
            gc.collect()
            nd.waitall()
            out.append(nd._backend.pools["cpu"].live_bytes)

        gc.set_threshold(1, 1, 1)
        for workers in (1, 2, 4):
            out = []
            realexec.run(work, workers=workers, out=out)
            assert (out[0] == 3).all() and out[1] == 0, out
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_cycle_freed_array_stays_valid_until_its_readers_ran():
    """An array in a cycle, dropped while an op still reads it and collected at once, is not
    recycled before that op ran (its values come out right)."""
    import gc

    class Holder:
        def __init__(self, arr):
            self.arr, self.me = arr, self

    with realexec.session(workers=2) as nd:
        for _ in range(20):
            a = nd.array(np.arange(16, dtype=np.float32).reshape(4, 4))
            holder = Holder(a)
            product = nd.dot(a, a)
            del a, holder
            gc.collect()
            filler = nd.zeros((4, 4))  # would take a's buffer if it were released early
            expected = np.arange(16, dtype=np.float32).reshape(4, 4)
            np.testing.assert_array_equal(product.asnumpy(), expected @ expected)
            del filler
