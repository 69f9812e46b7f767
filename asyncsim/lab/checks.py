"""Checks of the command line's arguments, made before any work: each mistake is one line.

`check_param` holds a `--param` value to the kind of the scenario's default for it (an int, a
number, a tuple of ints, a bool, a string) and names the parameter; `check_outputs` refuses an
`--out` or `--chrome` that cannot be written (a missing or read-only directory, a file in the
way), so that a long command (`calibrate`, `compare --all`) does not fail after its work.
Both raise ValueError, which `asyncsim.lab.cli.main` prints as one line.
"""

from __future__ import annotations

import math
import os
from pathlib import Path


def _natural(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_param(key: str, value, default) -> None:
    """A ValueError naming the parameter when `value` is not of the kind its default is."""
    if isinstance(default, bool):
        ok, kind = isinstance(value, bool), "True or False"
    elif isinstance(default, int):
        ok, kind = _natural(value), "a non-negative int"
    elif isinstance(default, float):
        ok = (isinstance(value, int | float) and not isinstance(value, bool)
              and math.isfinite(value))
        kind = "a finite number"
    elif isinstance(default, tuple) and all(_natural(v) for v in default):
        ok = isinstance(value, tuple) and all(_natural(v) for v in value)
        kind = "a tuple of non-negative ints, e.g. (2, 3)"
    elif isinstance(default, str):
        ok, kind = isinstance(value, str), "a string"
    else:
        return
    if not ok:
        raise ValueError(f"--param {key}={value!r}: {key} takes {kind} (default {default!r})")


# where each command writes: (argument, "file" or "dir"); a dir is made with its parents, a
# file's directory must exist
_OUTPUTS = {"predict": ("chrome", "file"), "run": ("chrome", "file"),
            "compare": ("out", "dir"), "calibrate": ("out", "file"), "figures": ("out", "dir")}


def check_outputs(args) -> None:
    """A ValueError, before any work, when the command's output cannot be written."""
    arg, kind = _OUTPUTS.get(args.command, (None, None))
    path = getattr(args, arg, None) if arg else None
    if path:
        check_writable(path, kind, f"--{arg}")


def check_writable(path: str, kind: str, flag: str) -> None:
    """A ValueError naming `flag` if a `kind` ("file" or "dir") cannot be written at `path`."""
    target = Path(path)
    if kind == "file":
        if target.is_dir():
            raise ValueError(f"{flag} {path}: is a directory, not a file")
        if target.exists() and not os.access(target, os.W_OK):
            raise ValueError(f"{flag} {path}: the file is not writable")
        parent = target.parent
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"{flag} {path}: {parent} is a file, not a directory")
        if not parent.is_dir():
            raise ValueError(f"{flag} {path}: the directory {parent} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ValueError(f"{flag} {path}: the directory {parent} is not writable")
        return
    if target.exists() and not target.is_dir():
        raise ValueError(f"{flag} {path}: exists and is not a directory")
    ancestor = target
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"{flag} {path}: {ancestor} is a file, so the directory cannot be made")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: {ancestor} is not writable")
