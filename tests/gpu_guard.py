"""The guard of the GPU kernel test modules: skip the whole module unless the CUDA simulator is
on (tests/conftest.py turns it on) or a real GPU is there, and return realexec's GPU kernels."""

from __future__ import annotations

import os

import pytest


def _usable() -> bool:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return True
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:
        return False


def require_gpu():
    """`realexec.gpu.kernels`, or a module-level skip saying what is missing."""
    if not _usable():
        pytest.skip("needs NUMBA_ENABLE_CUDASIM=1 or a CUDA GPU", allow_module_level=True)
    from realexec.gpu import kernels

    if not kernels.available():
        pytest.skip(kernels.device_error(0), allow_module_level=True)
    return kernels
