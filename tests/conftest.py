"""Test-session setup shared by every test file.

The GPU path is tested under numba's CUDA simulator unless ASYNCSIM_REAL_GPU=1 asks for the real
device: the simulator must be chosen before numba.cuda is first imported, so it is set here, at
collection time, before any test module imports realexec. Tests that need real hardware carry the
`gpu` marker and are skipped without it; tests that need two devices carry `two_gpus` (the
simulator offers two virtual ones; a real machine may have one), and tests of the simulator's own
messages carry `simulator`.

The Ctrl-C tests send SIGINT to this process and to child processes. A process started in the
background by a non-interactive shell inherits SIGINT ignored, and Python then leaves it ignored:
those tests would wait for a KeyboardInterrupt that never comes. So Python's own handler is put
back here (children then start with SIGINT at its default, and install theirs).
"""

import os
import signal
import sys

import pytest

if os.environ.get("ASYNCSIM_REAL_GPU") != "1":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REAL_GPU = os.environ.get("NUMBA_ENABLE_CUDASIM") != "1"


def gpu_count() -> int:
    """Devices that `nd.gpu(i)` can name here: the simulator's virtual ones, or the real ones."""
    from realexec.gpu import kernels as gpu
    from realexec.gpu.device import SIM_GPUS

    if not gpu.available():
        return 0
    return SIM_GPUS if gpu.on_simulator() else len(gpu.cuda.gpus)


def pytest_collection_modifyitems(config, items):
    skips = {}
    if not REAL_GPU:
        skips["gpu"] = "needs a real GPU: set ASYNCSIM_REAL_GPU=1 on a GPU machine"
    else:
        skips["simulator"] = "checks the CUDA simulator's own behaviour"
    if any("two_gpus" in item.keywords for item in items) and gpu_count() < 2:
        skips["two_gpus"] = f"needs two GPUs; this machine has {gpu_count()}"
    for item in items:
        for marker, reason in skips.items():
            if marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def quick_profile():
    """This machine's quick calibration of the CPU (`realexec.calibrate(quick=True)`, not
    cached), measured once for the run (it takes seconds) and taken again, up to three times,
    if other processes kept 0.2 cores busy meanwhile: test_calibrate checks it,
    test_model_vs_measurement predicts with it, and the notebooks' kernels find it in their
    calibration cache."""
    from realexec.calibration.calibrate import calibrate

    for _ in range(3):
        measured = calibrate(quick=True, cache=False, progress=False, gpu=False)
        if measured.meta["measurements"]["background load"] < 0.2:
            break
    return measured


@pytest.fixture(scope="module")
def quick_simulator_barriers():
    """A GIL switch interval of 0.1 ms for a module of GPU tests under the simulator, put back
    after it; nothing changes on a real GPU.

    The simulator's launching thread polls its block's threads for a syncthreads() in a loop
    that never blocks, so a thread woken at a barrier waits for the GIL until that loop is made
    to let go of it, up to CPython's switch interval of 5 ms each time (a batch norm gradient of
    10 values took 2.5 s a call, 0.5 s at 0.1 ms). The kernels run the same code on the same
    threads and give the same values; only how soon a waiting thread gets the GIL changes. For
    tests that check values, not times (a GPU's times mean nothing under the simulator)."""
    if REAL_GPU:
        yield
        return
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    try:
        yield
    finally:
        sys.setswitchinterval(before)
