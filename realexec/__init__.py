"""realexec: a real asynchronous dependency engine behind the same `nd` surface as asyncsim.

`run(workload, **params)` executes a workload on worker threads and returns its measured Trace;
`session()` gives an `nd` for interactive use; `NativeEngine` is the engine underneath (compiled
workers that run elementwise ops and products without taking the GIL), `Engine` its
Python-thread twin (`engine="python"`, the contrast the chapters draw);
`OpError` is what a blocker raises when an op it depends on failed; `calibrate()` measures this
machine into an `asyncsim.Profile` (cached). GPUs (`nd.gpu(i)`, or `device='gpu'`) run
numba.cuda kernels on a compute and a copy stream per device (`realexec.gpu.device`); without a
GPU, under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1).
"""

# first: numba's cache must know what each compiled module imports before any is compiled
from realexec import numba_cache  # noqa: F401
from realexec.calibration.calibrate import calibrate
from realexec.engine.core import Engine
from realexec.engine.deps import OpError
from realexec.engine.native import NativeEngine
from realexec.sessions import run, session

__all__ = ["Engine", "NativeEngine", "OpError", "calibrate", "run", "session"]
