"""numba.cuda as realexec uses it: importing it, which GPUs are usable, making one current on a
thread, and the stream-ordered work that is not a kernel (host<->device copies, cross-stream
events).

`cuda` is numba.cuda, or None where it cannot be imported (a broken CUDA install must not break
importing the engine; `device_error` then says why); every GPU module takes it from here,
directly or through `launch`. `available` and `device_error` never raise: `device_error(i)` says
in one line, naming the device, why gpu(i) cannot be used (where no GPU is, also how to run
under the simulator instead).

Assumptions. The simulator (NUMBA_ENABLE_CUDASIM=1, which must be set before numba is imported)
has exactly one device, gpu(0). Kernels, streams and allocations go to the device current on the
calling thread (`device_context`). A copy is asynchronous only when its host side is pinned (see
`realexec.gpu.memory.PinnedPool`). Units: devices are numba's indices, gpu(i) = `cuda.gpus[i]`;
shapes count elements.
"""

from __future__ import annotations

import contextlib
import sys
import threading

import numpy as np


def _one_line(exc: BaseException) -> str:
    """An exception as one line: driver errors come as several lines, some blank."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {text[:240]}"


try:
    from numba import cuda
    from numba.cuda.core import config as _cuda_config

    _IMPORT_ERROR = ""
except Exception as exc:  # a broken CUDA install must not break importing the engine
    cuda = None
    _cuda_config = None
    _IMPORT_ERROR = _one_line(exc)

_SIM_HINT = ("to run GPU code without one, set NUMBA_ENABLE_CUDASIM=1 before numba is imported "
             "(the numba CUDA simulator: slow, for tests)")


def on_simulator() -> bool:
    """True when numba.cuda was imported as the CUDA simulator."""
    return bool(cuda is not None and _cuda_config.ENABLE_CUDASIM)


def _shared_arrays_made_once() -> None:
    """Make the simulator's `cuda.shared.array` make a block's array once, under a lock.

    The simulator runs each CUDA thread of a block as a Python thread and keeps a block's shared
    arrays in a dict keyed by the calling line: a thread looks the line up and, not finding it,
    makes the array and stores it (numba-cuda 0.30's `FakeCUDAShared.array`). Two threads that
    both look before either stores make two arrays, and the threads that write one are read by
    the threads that read the other: values from `np.empty`, NaN or garbage, now and then (1 in
    100 launches of a 64-thread kernel at a 0.01 ms switch interval here; the GPU tests'
    0.1 ms interval met it in a convolution's gradient). Here the look-up and the store are one
    step under a lock, so a block's threads share one array per line, as on a GPU. The line is
    the caller's frame, the same key the simulator takes from a traceback (which read the
    source file at every call)."""
    try:
        from numba.cuda import types
        from numba.cuda.np.numpy_support import as_dtype
        from numba.cuda.simulator.kernelapi import FakeCUDAShared
    except ImportError:
        return
    made = FakeCUDAShared.array
    if getattr(made, "made_once", False):
        return
    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:  # dynamic shared memory is one buffer already
            return made(self, shape, dtype, alignment)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            arr = self._allocations.get(key)
            if arr is None:
                if isinstance(dtype, types.Type):  # a numba type, as kernels pass a.dtype
                    dtype = as_dtype(dtype)
                arr = self._allocations[key] = np.empty(shape, dtype)
        return arr

    array.made_once = True
    FakeCUDAShared.array = array


if on_simulator():
    _shared_arrays_made_once()


def available() -> bool:
    """A real GPU or the simulator is usable. Never raises."""
    if cuda is None:
        return False
    try:
        return bool(cuda.is_available())
    except Exception:
        return False


def _device_names() -> list[str]:
    names = []
    for dev in cuda.gpus:
        name = dev.name
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    return names


def device_error(i: int) -> str:
    """Why gpu(i) cannot be used, in one line naming the device; '' when it can."""
    if cuda is None:
        return f"gpu({i}): numba.cuda cannot be imported ({_IMPORT_ERROR}); {_SIM_HINT}"
    if on_simulator():
        if i == 0:
            return ""
        return (f"gpu({i}): the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) has one device, "
                f"gpu(0); use gpu(0)")
    try:
        if not cuda.is_available():
            try:
                len(cuda.gpus)  # raises with the driver's own reason when there is one
                reason = "numba.cuda finds no CUDA driver or device"
            except Exception as exc:
                reason = _one_line(exc)
            return f"gpu({i}): no usable CUDA GPU on this machine ({reason}); {_SIM_HINT}"
        names = _device_names()
    except Exception as exc:
        return f"gpu({i}): no usable CUDA GPU on this machine ({_one_line(exc)}); {_SIM_HINT}"
    if not 0 <= i < len(names):
        listed = ", ".join(f"gpu({j}) {n}" for j, n in enumerate(names))
        return f"gpu({i}): this machine has {len(names)} CUDA device(s): {listed}"
    return ""


_THREAD = threading.local()  # .device: the GPU this thread made current for good


def device_context(device_id: int = 0):
    """A context manager making gpu(device_id) current on this thread (kernels, streams and
    allocations then go to that device).

    Entering numba's `cuda.gpus[i]` pushes and pops the context (~6 us, on every launch of an
    engine lane), so: where gpu(device_id) is current already this does nothing, and a thread
    with no context current (an engine lane's, on its first op) makes gpu(device_id) current
    for good; only a thread that switches between devices pushes and pops."""
    if on_simulator():
        return contextlib.nullcontext()
    if getattr(_THREAD, "device", None) == device_id:
        return contextlib.nullcontext()
    from numba.cuda.cudadrv.driver import driver

    with driver.get_active_context() as active:
        if active and active.devnum == device_id:
            return contextlib.nullcontext()
        fresh = not active
    if fresh:
        cuda.select_device(device_id)
        _THREAD.device = device_id
        return contextlib.nullcontext()
    return cuda.gpus[device_id]


def lane_context(device_id: int):
    """For a thread that works for gpu(device_id) alone, for its whole life: the device made
    current, and numba's context lookup done once and kept (numba's `ensure_context`, which its
    API calls otherwise repeat with two driver queries each, several times per launch; a
    private helper of numba-cuda, so without it this only makes the device current)."""
    if on_simulator():
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(device_context(device_id))
        from numba.cuda.cudadrv.devices import _runtime

        ensure = getattr(_runtime, "ensure_context", None)
        if ensure is not None:
            stack.enter_context(ensure())
    except Exception:
        # only a speed-up: each launch still makes its device current, and a lane thread that
        # died here would leave its ops unfinished and their blockers waiting
        stack.close()
        return contextlib.nullcontext()
    return stack


# ---- copies and events -------------------------------------------------------------------
def _check_pair(name, a, b) -> None:
    if tuple(a.shape) != tuple(b.shape) or np.dtype(a.dtype) != np.dtype(b.dtype):
        raise ValueError(f"{name}: shapes/dtypes differ ({tuple(a.shape)} {a.dtype} vs "
                         f"{tuple(b.shape)} {b.dtype})")


def to_device(host: np.ndarray, out, stream) -> None:
    """Enqueue host -> out (device) on stream; asynchronous only when host is pinned."""
    _check_pair("to_device", host, out)
    if out.size:
        out.copy_to_device(host, stream=stream or 0)


def to_host(dev, out: np.ndarray, stream) -> None:
    """Enqueue dev -> out (host) on stream; out is valid after the stream is synchronised."""
    _check_pair("to_host", dev, out)
    if dev.size:
        dev.copy_to_host(out, stream=stream or 0)


def record_event(stream):
    """An event marking the work enqueued on stream so far."""
    event = cuda.event() if on_simulator() else cuda.event(timing=False)
    event.record(stream or 0)
    return event


def wait_event(event, stream) -> None:
    """Make later work on stream wait for event, without blocking the host."""
    event.wait(stream or 0)
