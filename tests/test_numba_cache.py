"""`realexec.numba_cache`: a compiled function cached on disk is compiled anew when a module it
imports changes (numba alone looks at the function's own file only), and loaded from the cache
while nothing it imports has changed. Each run is a fresh process, as a user's next session is.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

RUN = textwrap.dedent("""
    import sys
    import realexec.numba_cache as cache
    cache.watch(sys.argv[1])
    sys.path.insert(0, sys.argv[1])
    import fn
    print(fn.f(), sum(fn.f.stats.cache_hits.values()))
""")


def _run(folder) -> tuple[int, int]:
    """f() and how many of its compilations were loaded from the cache, in a fresh process."""
    done = subprocess.run([sys.executable, "-c", RUN, str(folder)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    value, hits = done.stdout.split()
    return int(value), int(hits)


@pytest.mark.parametrize("how", ["from consts import K", "import consts as c"])
def test_a_constant_changed_in_an_imported_module_is_compiled_in(tmp_path, how):
    name = "K" if how.startswith("from") else "c.K"
    (tmp_path / "consts.py").write_text("K = 1\n")
    (tmp_path / "fn.py").write_text(f"from numba import njit\n{how}\n\n\n"
                                    f"@njit(cache=True)\ndef f():\n    return {name}\n")
    assert _run(tmp_path) == (1, 0)  # compiled and cached
    assert _run(tmp_path) == (1, 1)  # nothing changed: loaded from the cache
    (tmp_path / "consts.py").write_text("K = 2\n")  # fn.py itself is untouched
    assert _run(tmp_path) == (2, 0)
    assert _run(tmp_path) == (2, 1)


def test_a_file_outside_the_watched_folders_keeps_numbas_own_rule(tmp_path):
    """A module numba caches that is not the project's gets numba's own locator."""
    import realexec.numba_cache as cache

    assert not cache._ours(str(tmp_path / "fn.py"))
    assert cache._ours(cache.__file__)
    table = cache._BASE + "/realexec/engine/table.py"
    assert cache._BASE + "/realexec/engine/layout.py" in cache._imports(table)
