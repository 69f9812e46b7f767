"""The dependency engine, in two builds behind one API:

- `native` (the default): the frontend orders ops with `asyncsim.nd.deps` and records them
  (`pushes`) in a compiled op table (`table`, over the CPU and OS primitives of `atomics`);
  worker threads live in a compiled loop (`realexec.cpu.worker`) that runs elementwise kernels,
  bias adds, products and hybridized graphs of them (`realexec.cpu.native_ops`) and completes
  ops without the GIL, and hands every other op back to Python; a worker that the OS left on
  a busy worker's core moves itself to a free one (`placement`); with `light=True`, small
  results of elementwise ops live in compiled state alone (`light`, ordered by the compiled
  analysis by var slot, `slotdeps`), so that such a push is one compiled call;
- `core` (`engine="python"`): Python worker threads, per-variable read/write queues (`deps`) and
  a GIL-free wait for blockers (`spin`).

Both: their settings, lanes and vocabulary (`lanes`), the device memory pools (`memory`) and
how engines end (`shutdown`: close, Ctrl-C, interpreter exit, fork).

The kernel convention, for every CPU kernel whichever engine runs it:
`realexec.cpu.kernels.KERNELS[name](inputs, out, attrs)` computes op `name` of `asyncsim.nd.ops`
into the preallocated C-contiguous `out` (inputs: numpy arrays; attrs: the op's dict), with its
loops `@njit(nogil=True, cache=True)`. An op the compiled worker runs itself is also encoded by
`realexec.cpu.worker.native_op` as (kind, op code, scalar) over flat buffers (a product's
sizes and a bias's repetition packed into the scalar), and listed in `asyncsim.nd.ops.COMPILED`
(the model's native workers price it without the GIL); a hybridized graph of such ops is one op
of kind GRAPH (`realexec.cpu.graph.program`, `asyncsim.nd.jit.Graph.compiled`)."""

from realexec.engine.core import Engine
from realexec.engine.deps import OpError
from realexec.engine.lanes import FRONTEND, default_workers
from realexec.engine.shutdown import EngineStopped

# `realexec.engine.native.NativeEngine` is not imported here: it needs `realexec.cpu.worker`,
# which needs this package's table first (`realexec.NativeEngine` is the way in)
__all__ = ["FRONTEND", "Engine", "EngineStopped", "OpError", "default_workers"]
