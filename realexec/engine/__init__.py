"""The dependency engine: pushes, per-variable read/write queues (`deps`), worker lanes and
blockers (`core`), a GIL-free wait (`spin`), the device memory pools (`memory`) and how engines
end (`shutdown`: close, Ctrl-C, interpreter exit, fork)."""

from realexec.engine.core import FRONTEND, Engine, default_workers
from realexec.engine.deps import OpError
from realexec.engine.shutdown import EngineStopped

__all__ = ["FRONTEND", "Engine", "EngineStopped", "OpError", "default_workers"]
