"""Workspace paths: normalisation, the listing filter and order. Pure.

Owns the contract's path rule for the workspace routes (`POST /workspace`,
`GET /workspace/file`): POSIX, relative to the workspace root, empty and
`.` segments dropped (`./a//b` is `a/b`). Refused with `400 invalid_path`:
a path that starts with `/`, has a `..` segment, contains NUL, is empty
once the empty and `.` segments are dropped, is longer than
`MAX_PATH_BYTES` or has a segment longer than `MAX_SEGMENT_BYTES` (UTF-8;
both measured on the normal form, which is what reaches the file system).

Unlike a bundle path (`runnerd.session.paths`), a leading `/` is refused
rather than stripped and `a/../b` is refused rather than folded: an editor
writing into a live workspace means exactly the path it names.

The listing (`GET /workspace`, and what a checkpoint holds) skips
everything under a directory named `node_modules`, `.telo` or `.git`, at
any depth: caches a workspace can always rebuild (the Telo runner skips the
same set). It is sorted by the paths' bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from runnerd.watch.errors import WatchError, WorkspacePathError

MAX_PATH_BYTES = 1024
MAX_SEGMENT_BYTES = 255
EXCLUDED_DIRECTORIES = frozenset({"node_modules", ".telo", ".git"})
Encoding = Literal["utf8", "base64"]
ENCODINGS: tuple[Encoding, ...] = ("utf8", "base64")


def _utf8_len(text: str) -> int:
    # surrogateescape: a name read from disk that is not UTF-8 counts by its bytes.
    return len(text.encode("utf-8", "surrogateescape"))


def _shown(path: str) -> str:
    return repr(path if len(path) <= 80 else path[:77] + "...")


def normalise_workspace_path(path: str) -> str:
    """The normal form of a client's workspace path (`./a//b` → `a/b`).

    Idempotent: a normal form normalises to itself.

    Raises:
        WorkspacePathError: `400 invalid_path`, naming the path and the rule.
    """
    if "\0" in path:
        raise WorkspacePathError(f"path {_shown(path)} contains a NUL byte")
    if path.startswith("/"):
        raise WorkspacePathError(
            f"path {_shown(path)} is absolute; paths are relative to the workspace"
        )
    segments = [segment for segment in path.split("/") if segment not in ("", ".")]
    if ".." in segments:
        raise WorkspacePathError(f"path {_shown(path)} has a '..' segment")
    if not segments:
        raise WorkspacePathError(f"path {_shown(path)} is empty")
    normal = "/".join(segments)
    if any(_utf8_len(segment) > MAX_SEGMENT_BYTES for segment in segments):
        raise WorkspacePathError(
            f"path {_shown(path)} has a segment longer than {MAX_SEGMENT_BYTES} bytes"
        )
    if _utf8_len(normal) > MAX_PATH_BYTES:
        raise WorkspacePathError(f"path {_shown(path)} is longer than {MAX_PATH_BYTES} bytes")
    return normal


def is_listed(path: str) -> bool:
    """Whether a workspace file at the normal path `path` is listed: not
    under a directory named in `EXCLUDED_DIRECTORIES`, at any depth (a
    *file* of such a name is listed)."""
    return EXCLUDED_DIRECTORIES.isdisjoint(path.split("/")[:-1])


def is_pruned(directory: str) -> bool:
    """Whether a walk of the workspace may skip the directory `directory`
    (its last segment) and all it holds."""
    return directory.rpartition("/")[2] in EXCLUDED_DIRECTORIES


def listing_order(paths: Iterable[str]) -> list[str]:
    """The listed paths of `paths`, sorted by their bytes (UTF-8), as
    `GET /workspace` returns them."""
    listed = (path for path in paths if is_listed(path))
    return sorted(listed, key=lambda path: path.encode("utf-8", "surrogateescape"))


def parse_file_query(path: str | None, encoding: str | None) -> tuple[str, Encoding]:
    """`GET /workspace/file`'s `path` and `encoding` (default `utf8`), checked
    in the contract's order: the path, then the encoding.

    Raises:
        WorkspacePathError: `path` missing or invalid (`400 invalid_path`).
        WatchError: `encoding` neither `utf8` nor `base64` (`400 invalid_request`).
    """
    if path is None:
        raise WorkspacePathError("query parameter 'path' is required")
    normal = normalise_workspace_path(path)
    chosen = encoding if encoding is not None else "utf8"
    for known in ENCODINGS:
        if chosen == known:
            return normal, known
    raise WatchError(
        400,
        "invalid_request",
        f"query parameter 'encoding' must be utf8 or base64, got {chosen[:40]!r}",
    )
