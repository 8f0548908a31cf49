"""Bundle path normalisation: the traversal guard. Pure.

Owns `normalise_bundle_path`, the one place that decides whether a client's
bundle path (`entryRelativePath` or a file's `relativePath`) stays inside the
bundle. It runs at admission (a bad path is a `400 invalid_bundle` before any
backend sees it) and again wherever a backend writes or packs files, so a
path that reaches disk or a tarball has always been through it.
"""

from __future__ import annotations

import posixpath

# Limits a path must meet at admission, so it can be written, walked and
# removed without hitting a file-system or recursion limit: Linux's NAME_MAX
# per component, and a depth and length far beyond any real bundle.
MAX_PATH_BYTES = 1024
MAX_PATH_DEPTH = 32
MAX_NAME_BYTES = 255


class BundlePathError(ValueError):
    """A bundle path that is empty or escapes the bundle. The message names it."""


def normalise_bundle_path(path: str) -> str:
    """The bundle-relative POSIX form of `path`.

    Leading `/` are stripped (a bundle is rooted at itself), then the path is
    POSIX-normalised (`a/./b//c` → `a/b/c`, `a/../b` → `b`). Rejected:
    - empty, or nothing left after normalising (`/`, `.`, `a/..`): not a file;
    - anything whose normal form starts with `..`: escapes the bundle;
    - a NUL byte: no file system can hold it, and C APIs would truncate at it;
    - a backslash: legal in a POSIX name, but always a Windows separator a
      client meant as `/`; taking it literally would give a file named `a\\b`;
    - longer than MAX_PATH_BYTES, deeper than MAX_PATH_DEPTH, or a name
      longer than MAX_NAME_BYTES: no real bundle needs it, and the file
      system (or a cleanup walking it) would fail on it after the 201.

    Raises:
        BundlePathError: e.g. `bundle path '../x' escapes the bundle`.
    """
    if "\0" in path:
        raise BundlePathError(f"bundle path {path!r} contains a NUL byte")
    if "\\" in path:
        raise BundlePathError(f"bundle path {path!r} contains a backslash; use '/'")
    stripped = path.lstrip("/")
    if not stripped:
        raise BundlePathError(f"bundle path {path!r} is empty")
    normal = posixpath.normpath(stripped)
    if normal == ".":
        raise BundlePathError(f"bundle path {path!r} names the bundle root, not a file")
    if normal == ".." or normal.startswith("../"):
        raise BundlePathError(f"bundle path {path!r} escapes the bundle")
    _check_size(normal)
    return normal


def _check_size(normal: str) -> None:
    shown = normal if len(normal) <= 80 else normal[:77] + "..."
    parts = normal.split("/")
    if len(parts) > MAX_PATH_DEPTH:
        raise BundlePathError(
            f"bundle path {shown!r} is nested deeper than {MAX_PATH_DEPTH} directories"
        )
    if any(len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES for part in parts):
        raise BundlePathError(
            f"bundle path {shown!r} has a name longer than {MAX_NAME_BYTES} bytes"
        )
    if len(normal.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise BundlePathError(f"bundle path {shown!r} is longer than {MAX_PATH_BYTES} bytes")
