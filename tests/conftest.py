"""Test-session setup shared by every test file.

The GPU path is tested under numba's CUDA simulator unless ASYNCSIM_REAL_GPU=1 asks for the real
device: the simulator must be chosen before numba.cuda is first imported, so it is set here, at
collection time, before any test module imports realexec. Tests that need real hardware carry the
`gpu` marker and are skipped without it.
"""

import os

import pytest

if os.environ.get("ASYNCSIM_REAL_GPU") != "1":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

REAL_GPU = os.environ.get("NUMBA_ENABLE_CUDASIM") != "1"


def pytest_collection_modifyitems(config, items):
    if REAL_GPU:
        return
    skip = pytest.mark.skip(reason="needs a real GPU: set ASYNCSIM_REAL_GPU=1 on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
