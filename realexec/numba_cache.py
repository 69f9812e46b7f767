"""numba's on-disk cache, made to notice a change in any module that a compiled function imports.

numba keeps a compiled function (`@njit(cache=True)`) in `__pycache__` and reuses it while the
function's own file is unchanged. It looks at no other file: the constants a function takes from
another module and the compiled functions it calls there are frozen into it (numba's docs: "Cache
invalidation fails to recognize changes in functions defined in a different file"). So after a
change to `realexec.engine.layout` alone (an edit, a `git pull`), the table's functions in
`realexec.engine.table` ran with the old offsets from the cache, and the workers with them.

Here every source file of the project that numba caches a function of gets a stamp covering its
own text and the text of each project module it imports, transitively (`stamp`): a change in
anything a function could have frozen in compiles it anew, and nothing else is touched. The
stamp is numba's own `get_source_stamp`, so numba's index does the rest. The locators are
numba's own, subclassed, and put first in numba's list of them (`CacheImpl._locator_classes`);
a user's NUMBA_CACHE_LOCATOR_CLASSES replaces that list, and with it this. A file is the
project's when it lies in a folder given to `watch` (on import: realexec, and asyncsim and
benchmarks where they lie beside it); the modules it imports are looked up by name from the
folder above realexec, and beside the file itself (a benchmark imports its neighbours so).

Assumes imports at a module's top level or inside functions, absolute or relative, as `ast`
sees them; a module reached some other way (`importlib`) is not followed.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os

from numba.core import caching

_ROOTS: list[str] = []  # the folders whose files are stamped
_BASE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where `realexec.x` lies


def watch(root: str) -> None:
    """Stamp the files in folder `root` with what they import (see the module docstring)."""
    root = os.path.abspath(root)
    if root not in _ROOTS:
        _ROOTS.append(root)


def _ours(path: str) -> bool:
    path = os.path.abspath(path)
    return any(path.startswith(root + os.sep) for root in _ROOTS)


@functools.cache
def _imports(path: str) -> tuple[str, ...]:
    """The files of the project that the module at `path` imports by name."""
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), path)
    here = os.path.dirname(path)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package this module is in
                package = here
                for _ in range(node.level - 1):
                    package = os.path.dirname(package)
                names += [(os.path.join(package, *base.split(".")) if base else package, a.name)
                          for a in node.names]
                continue
            names += [(base, a.name) for a in node.names]
    found = []
    for module, item in names:
        for candidate in _candidates(module, here):
            # `from package import module` names the module, not the package's __init__
            sub = _file(os.path.join(candidate, item)) if item else None
            file = sub or _file(candidate)
            if file is not None:
                found.append(file)
    return tuple(sorted(set(found)))


def _file(where: str) -> str | None:
    """The project's module file at dotted-path folder `where` (`where.py`, or a package's
    `__init__.py`), or None."""
    for file in (where + ".py", os.path.join(where, "__init__.py")):
        if os.path.isfile(file) and _ours(file):
            return os.path.abspath(file)
    return None


def _candidates(module: str, here: str) -> list[str]:
    """Where module `module` (dotted, or already a folder path) may lie: under each root, and
    beside the importing file."""
    if os.path.isabs(module):
        return [module]
    parts = module.split(".")
    return [os.path.join(_BASE, *parts), os.path.join(here, *parts)]


@functools.cache
def stamp(path: str) -> bytes:
    """A digest of the file at `path` and of every project file it imports, transitively."""
    seen, todo = set(), [os.path.abspath(path)]
    while todo:
        file = todo.pop()
        if file not in seen:
            seen.add(file)
            todo += _imports(file)
    digest = hashlib.sha256()
    for file in sorted(seen):
        with open(file, "rb") as f:
            digest.update(file.encode() + b"\0" + hashlib.sha256(f.read()).digest())
    return digest.digest()


class _Stamped:
    """A numba locator for the project's files, stamped with what they import."""

    def get_source_stamp(self):
        return stamp(self._py_file)

    @classmethod
    def from_function(cls, py_func, py_file):
        if not _ours(py_file):
            return None
        return super().from_function(py_func, py_file)


def _stamped(locator: type) -> type:
    return type(f"Stamped{locator.__name__}", (_Stamped, locator), {})


_LOCATORS = [_stamped(c) for c in (caching.UserProvidedCacheLocator,
                                   caching.InTreeCacheLocator, caching.UserWideCacheLocator)]
# numba's implementation of a cache, whose list of locators it tries in turn (`_CacheImpl` in
# older numba)
_IMPL = getattr(caching, "CacheImpl", None) or caching._CacheImpl
_IMPL._locator_classes[:0] = [c for c in _LOCATORS if c not in _IMPL._locator_classes]
for _name in ("realexec", "asyncsim", "benchmarks"):
    if os.path.isdir(os.path.join(_BASE, _name)):
        watch(os.path.join(_BASE, _name))
