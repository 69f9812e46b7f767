"""The notebooks (one per section, kept as jupytext percent-format sources in notebooks/) run
from top to bottom without an error, with the reference answers of their exercises passing.

Each is converted with jupytext and executed by nbclient in a fresh kernel, on the CPU only
(GPU cells predict and say so). The kernels share one calibration cache in a temporary folder,
which holds the run's quick calibration (tests/conftest.py), so none measures it again and
nothing is written to the user's cache. The notebooks run at the same time, one kernel per core
(each kernel is its own process; a kernel's start and a notebook's imports are single-threaded),
and each test reads its own notebook's outcome: one after another they took 59 s of the suite.
"""

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient

from realexec.calibration.calibrate import cache_path

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.py"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory, quick_profile):
    """The kernels' calibration cache, holding the run's quick calibration where a kernel's
    `realexec.calibrate(quick=True)` looks for it (its key: this machine, this code, the
    workers and the settings), so that no kernel measures it again."""
    folder = tmp_path_factory.mktemp("calibration-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(folder))
        path = cache_path(quick_profile.workers, quick=True)
    path.parent.mkdir()
    quick_profile.save(path)
    return folder


def test_there_is_a_notebook_per_section():
    """Hybridize (8.1), async computation, automatic parallelism, multiple devices (8.4, 8.5)
    and the PyTorch page each have a notebook."""
    names = {p.stem for p in NOTEBOOKS}
    assert {"hybridize", "async_computation", "auto_parallel", "multi_device",
            "pytorch_async"} <= names


def _execute(path: Path):
    """The notebook at `path` executed (its cells' outputs filled in), or the error that
    stopped it."""
    notebook = jupytext.read(path)
    client = NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except Exception as error:  # noqa: BLE001 - reported by the notebook's own test
        return error
    return notebook


@pytest.fixture(scope="module")
def executed(cache):
    """Every notebook executed, `os.cpu_count()` at a time: path -> notebook or error. The
    kernels inherit the environment as it is while they start."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(cache))
        patch.setenv("NUMBA_ENABLE_CUDASIM", os.environ.get("NUMBA_ENABLE_CUDASIM", "1"))
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            return dict(zip(NOTEBOOKS, pool.map(_execute, NOTEBOOKS), strict=True))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, executed):
    """Every cell runs without an error (its asserts included) and prints something."""
    notebook = executed[path]
    if isinstance(notebook, Exception):
        raise notebook
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code and all(c.get("outputs") is not None for c in code)
    printed = "".join(o.get("text", "") for c in code for o in c["outputs"])
    assert "passed:" in printed
