"""The CUDA simulator's shared arrays, as realexec.gpu.runtime mends them: one array per line and
block however its threads race to make it.

Without the mend, two of a block's threads that asked at once could each get an array of their
own, and a kernel then read values no thread wrote (NaN, now and then, in the GPU tests'
convolution gradients).
"""

import sys
import threading

import numpy as np
import pytest
from gpu_guard import require_gpu

gpu = require_gpu()

pytestmark = [pytest.mark.cudasim, pytest.mark.simulator]


def test_a_blocks_threads_share_one_array_however_they_race():
    """64 threads ask for the same line's array at once, 100 times, with thread switches every
    microsecond: every thread of a round gets the one array. (The simulator as shipped gave
    some round two or more arrays: 23 rounds of 200 in a run here.)"""
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(100):
            shared = FakeCUDAShared(0)
            start = threading.Barrier(64)
            got = []

            def ask(shared=shared, start=start, got=got):
                start.wait()
                got.append(shared.array((2, 3), np.float64))

            threads = [threading.Thread(target=ask) for _ in range(64)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len({id(a) for a in got}) == 1
    finally:
        sys.setswitchinterval(before)
    assert got[0].shape == (2, 3) and got[0].dtype == np.float64


def test_each_line_keeps_its_own_array_and_dynamic_memory_is_one_buffer():
    """Two lines give two arrays (keyed by the calling line, as the simulator keys them); the same
    line asked again gives the same one; shape 0 is the block's dynamic memory."""
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    shared = FakeCUDAShared(64)

    def two_lines():
        a = shared.array(4, np.float32)
        b = shared.array(4, np.float32)
        return a, b

    a, b = two_lines()
    again, _ = two_lines()
    assert a is not b and again is a and a.dtype == np.float32
    dynamic = shared.array(0, np.dtype(np.float64))
    assert dynamic.size == 8 and np.shares_memory(dynamic, shared.array(0, np.dtype(np.int32)))
