"""What both engines share: the frontend's lane name, the modes, the worker count, and `Lane`.

`realexec.engine.core.Engine` (Python worker threads, `engine="python"`) and
`realexec.engine.native.NativeEngine` (compiled workers, the default) take the same settings
and build their lanes from the same `Lane`, so either serves `realexec.session` and both read as
one design with `asyncsim.simulate`, whose vocabulary this is:
- lanes: "frontend" (the thread that pushes, t1), the CPU lane "cpu" whose workers are the span
  lanes "cpu/w0".. (t2); `add_lane` adds others (a GPU's "gpu0/compute" and "gpu0/copy", one
  worker each) without touching the engine. A lane added with `log=False` records no spans of
  its own: its ops time themselves (a GPU op's span is the device's, from CUDA events);
- mode "async" (MXNet's ThreadedEngine) or "sync" (NaiveEngine: each op runs inside its push, on
  the frontend thread; its "exec" span is reported on the lane's first worker and a "wait" span
  named after the op covers it on the frontend);
- `max_inflight`: push blocks while that many ops are pending;
- blockers `wait_for_var` / `wait_all` return when the op is done and the frontend runs again (t3).

Assumes one worker per core by default: the cores this process may run on (its affinity mask,
or the CPU count where there is none). A `Lane`'s queue is the Python engine's ready queue (the
compiled engine keeps its queues in its op table). Units: counts (workers, ops).
"""

from __future__ import annotations

import os
import threading
from queue import SimpleQueue

FRONTEND = "frontend"
MODES = ("async", "sync")


def default_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def settings(workers, mode: str, max_inflight) -> int:
    """The worker count an engine gets; ValueError, naming it, for a setting out of range."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if max_inflight is not None and max_inflight < 1:
        raise ValueError(f"max_inflight must be at least 1, got {max_inflight}")
    count = default_workers() if workers is None else int(workers)
    if count < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    return count


class Lane:
    """A ready queue and the worker threads that drain it; `labels` name their trace lanes."""

    __slots__ = ("name", "kind", "labels", "queue", "threads", "log")

    def __init__(self, name: str, workers: int, kind: str = "exec", labels=None, log=True):
        self.name, self.kind, self.log = name, kind, log
        if labels is None:
            labels = [f"{name}/w{i}" for i in range(workers)]
        self.labels = list(labels)
        self.queue: SimpleQueue = SimpleQueue()
        self.threads: list[threading.Thread] = []
