"""The matrix product the compiled worker calls without Python: numpy's own BLAS, found by address.

numpy's wheels bundle OpenBLAS with a 64-bit integer interface (`scipy_openblas64_`), whose
`scipy_cblas_sgemm64_` and `scipy_cblas_dgemm64_` take row-major operands and int64 sizes. So the
worker's product is numpy's `np.dot` itself, at its speed and with the threads `threadpoolctl`
gives it, called from compiled code (`realexec.engine.atomics.gemm`) with no GIL to take.

`addresses()` -> (sgemm, dgemm) function addresses, or None where numpy's BLAS is another one
(MKL, Accelerate, a 32-bit interface): `dot` then stays a Python op, as before. The addresses
are found once per process (threadpoolctl names the library numpy loaded) and passed to the
worker at run time, never compiled in, so numba's cache stays valid across processes.

`packed(m, k, n)` and its inverse in the worker: a product's sizes in one float64 (each under
2**17, so the three fit its 53 bits exactly); a larger product is left to Python.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np  # noqa: F401  (loads the BLAS whose symbols are looked up)

SIDE = 1 << 17  # sizes of a product the worker runs: each under this
_SYMBOLS = ("scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_")


@functools.cache
def addresses() -> tuple[int, int] | None:
    """(sgemm, dgemm) addresses of numpy's ILP64 OpenBLAS, or None."""
    try:
        from threadpoolctl import threadpool_info

        paths = [p["filepath"] for p in threadpool_info()
                 if p.get("user_api") == "blas" and p.get("internal_api") == "openblas"]
        for path in paths:
            lib = ctypes.CDLL(path)
            found = [ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                     for name in _SYMBOLS if hasattr(lib, name)]
            if len(found) == 2 and all(found):
                return found[0], found[1]
    except (ImportError, OSError):
        pass
    return None


def packed(m: int, k: int, n: int) -> float | None:
    """The sizes of an (m, k) x (k, n) product as one float, or None when one is too large."""
    if max(m, k, n) >= SIDE:
        return None
    return float((m * SIDE + k) * SIDE + n)


__all__ = ["SIDE", "addresses", "packed"]
