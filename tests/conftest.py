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
