"""How engines end: at close, on Ctrl-C, at interpreter exit and across `os.fork()`.

- `close()` drains: every op pushed runs, then the workers stop. After Ctrl-C reached one of the
  engine's blockers, after an error left the caller (`realexec.session` closes with
  `cancel=True`), or on `close(cancel=True)`, it *cancels* instead: ops not yet started are
  dropped, workers stop at their next op, and running ones get `JOIN_S` to finish before they
  are abandoned (workers are daemon threads, so one stuck in a long kernel does not keep the
  process alive). Blockers waiting in other threads raise `EngineStopped`.
- Interpreter exit: engines left open are closed by a hook that threading runs before it joins
  non-daemon threads (a plain atexit hook runs after that join). It drains them, as a program
  that never called close() expects; a Ctrl-C during that drain cancels this engine and every
  other one still open, and the process exits.
- `os.fork()`: the child inherits the engine's state but none of its worker threads. Each engine
  open at the fork is marked stopped in the child (with fresh locks: a lock a worker held at the
  fork would never be released there), so the child gets `EngineStopped` with a clear message
  when it touches one, and exits normally.

Units: seconds.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
import weakref
from collections import deque

JOIN_S = 0.25  # how long a cancelling close waits for running ops before abandoning them


class EngineStopped(RuntimeError):
    """The engine can no longer run what it was given: it was cancelled, or it belongs to the
    parent of this forked process."""


_open_engines: weakref.WeakSet = weakref.WeakSet()


def register(engine) -> None:
    """Close `engine` at interpreter exit unless it is closed before; forget it in a fork child."""
    _open_engines.add(engine)


def unregister(engine) -> None:
    _open_engines.discard(engine)


def trace_log(trace: bool | int):
    """Where an engine appends its spans: a list (trace=True), nothing (False: a deque that keeps
    none, so an append costs what it did), or the last `trace` spans (an int)."""
    if trace is True:
        return []
    if trace is False:
        return deque(maxlen=0)
    if isinstance(trace, int) and trace >= 0:
        return deque(maxlen=trace)
    raise ValueError(f"trace must be True, False or a number of spans to keep, got {trace!r}")


class Ending:
    """What both engines share about ending: `closed`, `stopped`, the context manager, and the
    warning for failures no blocker reported (the engine has `_closed`, `_stopped`, `_lock`,
    `_failures`, `_observed` and `close`)."""

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def stopped(self) -> bool:
        """Ops pushed here will never run: the engine was cancelled, or forked away from."""
        return self._stopped is not None

    def _warn_unreported(self) -> None:
        from realexec.engine.deps import OpError

        with self._lock:
            failures, self._failures = self._failures, []
        unseen = [f for f in failures if id(f) not in self._observed]
        if unseen:
            first = OpError.of(unseen[0], len(unseen) - 1)
            warnings.warn(f"realexec: a failure no blocker reported, dropped at close: {first}",
                          RuntimeWarning, stacklevel=4)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(cancel=exc_type is not None)  # an error leaves at once, not after the queue


def close_open_engines() -> None:
    """The exit hook: drain every engine left open; after a Ctrl-C, cancel the rest."""
    cancel = False
    for engine in list(_open_engines):
        try:
            engine.close(cancel=cancel)
        except KeyboardInterrupt:
            cancel = True
            with contextlib.suppress(BaseException):
                print("realexec: interrupted at exit; ops not yet started were dropped",
                      file=sys.stderr)
        except BaseException:  # nothing to report to at exit
            pass


def _forget_in_child() -> None:
    parent = os.getppid()
    for engine in list(_open_engines):
        engine._orphan(f"this engine was opened by process {parent} before os.fork(); a forked "
                       f"child cannot use it (its worker threads stay in the parent): open a new "
                       f"realexec.session() in the child")
    _open_engines.clear()


# threading's own exit hook runs before the interpreter joins non-daemon threads; a plain atexit
# hook would run only after that join
try:
    threading._register_atexit(close_open_engines)
except AttributeError:  # pragma: no cover - Python without the private hook
    import atexit

    atexit.register(close_open_engines)

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
