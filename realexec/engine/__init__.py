"""The dependency engine: pushes, per-variable read/write queues (`deps`), worker lanes and
blockers (`core`), a GIL-free wait (`spin`) and the device memory pools (`memory`)."""

from realexec.engine.core import FRONTEND, Engine, default_workers
from realexec.engine.deps import OpError

__all__ = ["FRONTEND", "Engine", "OpError", "default_workers"]
