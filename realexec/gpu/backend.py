"""The GPU half of `realexec.frontend.EngineBackend`: devices on demand, ops routed to the GPU
lanes, blockers and frees of GPU data.

A device is set up the first time the workload names it (`nd.gpu(i)`, or `run(device='gpu')`),
after `check_gpu` (through the frontend's `check_device`) has raised a ValueError, saying how to
run under the simulator, if it cannot be used.

Routing follows the lane rule of `asyncsim.simulate`, so a measured and a predicted trace put
every op on the same lane:
- an op on gpu{i} (a kernel, `nd.array(..., ctx=gpu)`, a copyto within gpu{i}) -> "gpu{i}/compute";
- a copyto between devices -> the copy lane of its GPU end, "gpu{i}/copy" (for gpu->gpu, the
  destination's);
- anything else runs on the CPU workers; a CPU op reading the buffer of a copy from a GPU first
  waits for that copy (`after_device`).

Vars that GPU streams touch are `StreamVar`s: GPU arrays from the device's `GpuPool`, and the CPU
targets of gpu->cpu copies, whose buffers are pinned host memory counted as live "cpu" bytes.
Blockers wait for the engine (the op enqueued), then for the device: `wait_to_read` on the last
write's event, `asnumpy`/`item`/`print` by copying the data back (`GpuDevice.readback`), `waitall`
on every stream. A freed StreamVar's buffer goes back to its pool once the events of the ops that
used it have completed (`Releases`, collected at allocations and blockers).
"""

from __future__ import annotations

import contextlib

from realexec.engine.deps import OpError
from realexec.gpu.device import GpuDevice, pinned_pool, warmup
from realexec.gpu.vars import Releases, StreamVar, host_wait, kernels


class GpuBackend:
    """Mixed into EngineBackend, which provides `engine`, `pools` and `vars`."""

    def _init_gpu(self) -> None:
        self.gpus: dict[str, GpuDevice] = {}
        self.releases = Releases()

    def _add_gpu(self, device: str) -> None:
        """Set up gpu{i} (a name the frontend's check_device has accepted) in this engine."""
        index = int(device[3:])
        if not kernels().on_simulator():
            warmup(index)  # compile before anything is timed
        gpu = GpuDevice(index, self.engine, self.releases, blocking=self.engine.mode == "sync")
        self.gpus[device] = gpu
        self.pools[device] = gpu.memory

    # -- ops -----------------------------------------------------------------------------------
    def _issue_gpu(self, op, out_var, host, t_issue: int) -> None:
        name, attrs, device = op.name, op.attrs, op.device
        src = attrs["src"] if name == "copyto" else device
        vars_ = self.vars
        out = self._new_stream_var(out_var) if out_var is not None else vars_[op.out]
        inputs = tuple([vars_[v] for v in op.reads])
        reads = tuple(dict.fromkeys(v for v in inputs if v is not out))
        if src == device:  # on one GPU: its compute stream
            gpu = self.gpus[device]
            lane = gpu.compute_lane
            if name == "array":
                fn, args = gpu.upload, (gpu.compute, host, out, name, op.id)
            else:
                kernel = kernels().GPU_KERNELS["copy" if name == "copyto" else name]
                fn, args = gpu.run_kernel, (kernel, inputs, out, attrs, name, op.id, reads)
        elif device == "cpu":
            gpu = self.gpus[src]
            lane, fn, args = gpu.copy_lane, gpu.download, (inputs[0], out, name, op.id)
        elif src == "cpu":
            gpu = self.gpus[device]
            lane, fn, args = gpu.copy_lane, gpu.upload, (gpu.copy, inputs[0], out, name, op.id)
        else:
            gpu = self.gpus[device]
            lane, fn, args = gpu.copy_lane, gpu.peer, (inputs[0], out, name, op.id)
        self.engine.push(fn, reads, (out,), lane, name, args, op.id, t_issue)

    def _new_stream_var(self, out_var) -> StreamVar:
        self.releases.collect()  # buffers whose users have finished can serve this one
        if out_var.device == "cpu":  # the target of a copy from a GPU: pinned, counted on cpu
            buf = pinned_pool().alloc(out_var.shape, out_var.dtype)
            self.pools["cpu"].track(out_var.nbytes)
        else:
            buf = self.pools[out_var.device].acquire(out_var.shape, out_var.dtype)
        var = StreamVar(out_var.device, buf)
        self.vars[out_var.id] = var
        return var

    # -- blockers and frees --------------------------------------------------------------------
    def _read_gpu(self, kind: str, var: StreamVar):
        """A blocker on a GPU var whose writes the engine has enqueued."""
        if kind == "wait_to_read":
            host_wait(var)
            return None
        return self.gpus[var.name].readback(var)

    def _settle(self) -> None:
        """Wait for every stream of every device; give back what finished."""
        for gpu in self.gpus.values():
            gpu.settle()
        self.releases.collect()

    def _free_stream_var(self, var: StreamVar) -> None:
        self.engine.delete_var(var, self._release_later, (var,))

    def _release_later(self, var: StreamVar) -> None:
        # runs once every op pushed on var is enqueued; its events say when they have run
        if var.name == "cpu":
            self.releases.later(var.events(), self._release_pinned, var.data)
        else:
            self.releases.later(var.events(), self.pools[var.name].release, var.data)

    def _release_pinned(self, array) -> None:
        pinned_pool().release(array)
        self.pools["cpu"].untrack(array.nbytes)

    def _close_gpus(self) -> None:
        with contextlib.suppress(OpError):  # close is also the error path's cleanup
            self._settle()
        self.releases.closed = True  # arrays that outlive the run go back when dropped

    def _gpu_spans(self) -> list[tuple]:
        """Spans timed by CUDA events (a real GPU), as the engine's raw ns tuples; waits for the
        streams first, since an event's time is known only once it has completed."""
        if not any(gpu.timed for gpu in self.gpus.values()):
            return []
        with contextlib.suppress(OpError):
            self._settle()
        return [s for gpu in self.gpus.values() for s in gpu.timed_spans()]

    def _gpu_meta(self) -> dict:
        return {name: gpu.description for name, gpu in self.gpus.items()}

    def gpu_clock_error(self) -> float:
        """Seconds by which a device span may sit off the host's clock (0 under the simulator)."""
        return max([getattr(gpu, "clock_error_ns", 0) * 1e-9 for gpu in self.gpus.values()],
                   default=0.0)
