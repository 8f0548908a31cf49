"""Dataclasses' generated methods, compiled once at install, not at every start.

CPython 3.11's `dataclasses` writes each generated method (`__init__`,
`__repr__`, `__eq__`, `__hash__`, a frozen class's `__setattr__` and
`__delattr__`) as source text and compiles it with `exec`: at a daemon's
start ~120 classes (runnerd's and the serving layer's), ~55 ms, about half
of it compiling (issue 22: start). This module gives `dataclasses` an `exec`
that takes the code object compiled from the very same text when a cache
has it, and compiles as before when it has not.

- The cache maps each source text to its code object: a marshal file beside
  runnerd's bytecode, named by the interpreter's cache tag and checked
  against its bytecode magic number. `make bytecode` writes it (`python -m
  runnerd.daemon.dataclasscache`: every runnerd module imported once,
  the texts recorded); the daemon only reads it.
- Keyed by the whole text, a hit is the code `exec` would have compiled:
  a stale, missing, unreadable or foreign cache costs the start its time,
  never a behaviour.
- Trust: the file is code the daemon runs, as the `.pyc` files beside it
  are; it is written where they are, at install, by whoever installs them.
- Only on CPython 3.11, where `dataclasses._create_fn` compiles through the
  module's `exec` name (checked here: elsewhere `install` does nothing).

`install()` before the daemon's imports, `release()` after them: the
texts and the code objects no class took are freed, and `dataclasses`
compiles with the builtin `exec` again.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import importlib
import importlib.util
import marshal
import sys
from pathlib import Path
from types import CodeType
from typing import Any

import runnerd

CACHE_PATH = (
    Path(runnerd.__file__).parent
    / "__pycache__"
    / f"dataclass-methods.{sys.implementation.cache_tag}.marshal"
)
# What `dataclasses` compiles its methods' texts as, by `exec(text, ...)`.
_FILENAME = "<string>"


class _Cache:
    """Each text's code object, marshalled (loaded when a class takes it:
    the cache holds the methods of modules a start may never import), and
    how many were taken and compiled."""

    def __init__(self, codes: dict[str, bytes], record: bool) -> None:
        self.codes, self.record = codes, record
        self.hits = self.misses = 0

    def exec(self, source: Any, globals_: Any = None, locals_: Any = None) -> None:
        code = self._cached(source) if isinstance(source, str) else None
        if code is None:
            self.misses += 1
            if isinstance(source, str):
                code = compile(source, _FILENAME, "exec")
                if self.record:
                    self.codes[source] = marshal.dumps(code)
            else:
                code = source
        else:
            self.hits += 1
        builtins.exec(code, globals_, locals_)

    def _cached(self, source: str) -> CodeType | None:
        data = self.codes.get(source)
        if data is None:
            return None
        try:
            code = marshal.loads(data)
        except (ValueError, EOFError, TypeError):
            return None
        return code if isinstance(code, CodeType) else None


_installed: _Cache | None = None


def supported() -> bool:
    """Whether this interpreter's `dataclasses` compiles through its
    module-level `exec` name, as CPython 3.11's `_create_fn` does."""
    create_fn = getattr(dataclasses, "_create_fn", None)
    return (
        sys.implementation.name == "cpython"
        and sys.version_info[:2] == (3, 11)
        and create_fn is not None
        and "exec" in create_fn.__code__.co_names
    )


def read_cache(path: Path = CACHE_PATH) -> dict[str, bytes]:
    """The cache at `path`, or an empty one when it is missing, unreadable
    or written by another interpreter (another magic number). Never raises."""
    try:
        data = path.read_bytes()
        magic = importlib.util.MAGIC_NUMBER
        if not data.startswith(magic):
            return {}
        codes = marshal.loads(data[len(magic) :])
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not isinstance(codes, dict):
        return {}
    return {
        text: code
        for text, code in codes.items()
        if isinstance(text, str) and isinstance(code, bytes)
    }


def install(path: Path = CACHE_PATH, *, record: bool = False) -> bool:
    """Hand `dataclasses` the cached `exec` (the cache read from `path`;
    `record`: every text compiled meanwhile is added, for `write`). False,
    and nothing done, where it is not `supported` or already installed."""
    global _installed
    if _installed is not None or not supported():
        return False
    _installed = _Cache({} if record else read_cache(path), record)
    dataclasses.exec = _installed.exec  # type: ignore[attr-defined]
    return True


def counts() -> tuple[int, int]:
    """(texts taken from the cache, texts compiled) since `install`."""
    return (0, 0) if _installed is None else (_installed.hits, _installed.misses)


def release() -> None:
    """`dataclasses` back on the builtin `exec`; the cache freed."""
    global _installed
    if _installed is None:
        return
    if getattr(dataclasses, "exec", None) == _installed.exec:
        del dataclasses.exec  # type: ignore[attr-defined]
    _installed = None


def write(path: Path = CACHE_PATH) -> int:
    """What the recording `install` compiled, written to `path` (atomically):
    how many texts."""
    if _installed is None:
        raise RuntimeError("install(record=True) first")
    codes = _installed.codes
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(importlib.util.MAGIC_NUMBER + marshal.dumps(codes))
    partial.replace(path)
    return len(codes)


def build(path: Path = CACHE_PATH) -> int:
    """Import every runnerd module (and so what they import) with the texts
    recorded, then write them to `path`: how many. Run by `make bytecode`
    in a fresh interpreter, before any dataclass of runnerd's is made."""
    import pkgutil

    if not install(record=True):
        return 0
    try:
        for module in pkgutil.walk_packages(runnerd.__path__, "runnerd."):
            if module.name.rsplit(".", 1)[-1] == "__main__":
                continue
            # One that cannot import here (an optional dependency missing)
            # is never imported by a daemon here either: nothing to cache.
            with contextlib.suppress(ImportError):
                importlib.import_module(module.name)
        # What the daemon's start imports of the serving layer's own.
        for name in ("quart_trio", "hypercorn.trio"):
            importlib.import_module(name)
        return write(path)
    finally:
        release()


if __name__ == "__main__":
    print(f"{CACHE_PATH}: {build()} dataclass method texts")
