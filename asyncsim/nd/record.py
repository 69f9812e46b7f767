"""Recording: run a workload against an `nd` that carries shapes, devices and dtypes but no data.

`record(workload, **params)` calls `workload(nd, **params)` once. Every op, blocker, benchmark
region and free (the last Python handle dropped, in program order) becomes an instruction of the
returned `Program`. Blockers hand back zeros of the right shape (a read-only view that takes no
memory), so a workload that inspects its results keeps running; nothing is computed.

A Program is a pure function of the workload and its parameters. Two things would make it depend
on what ran before instead, so both are ruled out:
- the cyclic garbage collector, run whenever enough objects have been made, would free the arrays
  held by reference cycles (a Gluon block and its parameters) at that arbitrary point; it is off
  while the workload runs, so frees come in the order reference counting gives them, as in a
  measured run (`asyncsim.lab.jobs` turns it off too);
- such arrays, freed by a collection after `record` returned, would append their frees to the
  finished Program (a prediction of one scenario then changed with the scenarios predicted before
  it); the recorder is closed when the workload returns, and ignores them.
"""

from __future__ import annotations

import gc
import inspect

import numpy as np

from asyncsim.nd.frontend import ND
from asyncsim.nd.program import BLOCKERS, Call, Free, Mark, Program, Sync

_DEVICE_HELP = "devices are 'cpu', 'cpuN' and 'gpuN' (from nd.cpu(N) and nd.gpu(N))"


class Recorder:
    """The backend that writes instructions into a Program instead of running them."""

    def __init__(self, program: Program):
        self.program = program
        self.closed = False  # the workload has returned: its Program is final

    def close(self) -> None:
        """End the recording: frees of handles that die later are not the Program's."""
        self.closed = True

    def _open(self) -> Program:
        if self.closed:
            raise RuntimeError(f"the recording of {self.program.name!r} is over: an array it made "
                               f"was used after the workload returned")
        return self.program

    def check_device(self, device: str) -> None:
        ok = device == "cpu" or (device[:3] in ("cpu", "gpu") and device[3:].isdigit())
        if not ok:
            raise ValueError(f"unknown device {device!r}: {_DEVICE_HELP}")

    def issue(self, op, out_var, host) -> None:
        program = self._open()
        if out_var is not None:
            program.vars[out_var.id] = out_var
        program.instrs.append(op)

    def sync(self, kind: str, var: int | None):
        assert kind in BLOCKERS, kind
        self._open().instrs.append(Sync(kind, var))
        if var is None:
            return None
        v = self.program.vars[var]
        # zeros of the right shape that take no memory (a read-only view of one zero): the
        # recorder must not allocate what a real run would, however large the array
        zeros = np.broadcast_to(np.zeros((), dtype=v.dtype), v.shape)
        return str(zeros) if kind == "print" else zeros

    def free(self, var: int) -> None:
        if not self.closed:
            self.program.instrs.append(Free(var))

    def note(self, kind: str, block: str = "") -> None:
        self._open().instrs.append(Call(kind, block))

    def mark(self, label: str, begin: bool) -> None:
        self._open().instrs.append(Mark(label, begin))


def check_workload(workload) -> str:
    """The workload's name, or a TypeError saying what a workload must be."""
    if not callable(workload) or isinstance(workload, type):
        raise TypeError(f"a workload must be a function workload(nd, **params), "
                        f"got {type(workload).__name__} {workload!r:.60}")
    return getattr(workload, "__name__", type(workload).__name__)


def check_params(workload, params: dict) -> None:
    """A TypeError naming the parameters the workload does not take."""
    try:
        sig = inspect.signature(workload)
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return
    unknown = sorted(set(params) - set(list(sig.parameters)[1:]))
    if unknown:
        accepted = ", ".join(list(sig.parameters)[1:]) or "none"
        raise TypeError(f"{check_workload(workload)}: unknown parameter(s) {', '.join(unknown)}; "
                        f"it takes: {accepted}")


def record(workload, seed: int = 0, device: str = "cpu", **params) -> Program:
    """Run `workload(nd, **params)` without data and return its Program; arrays made without a
    ctx live on `device` ("cpu", or "gpu" for gpu(0))."""
    name = check_workload(workload)
    check_params(workload, params)
    program = Program(name=name, params=dict(params))
    recorder = Recorder(program)
    collecting = gc.isenabled()
    gc.disable()  # see the module docstring
    try:
        workload(ND(recorder, seed=seed, device=device), **params)
    finally:
        recorder.close()
        if collecting:
            gc.enable()
    return program
