"""A workspace checkpoint's file format: exactly the listed files, byte for byte.

Owns writing a checkpoint from a workspace (`write_checkpoint`) and reading
one back (`read_checkpoint`), streamed: neither holds more than one copy
buffer in memory, whatever the workspace's size. A checkpoint is opaque to
everyone else (`runnerd.local.workspace` restores it); it holds what
`GET /workspace` lists (every regular file outside the excluded trees),
binary included, with each file's permission bits, and nothing else.

Format (version 1), big-endian: the line `MAGIC`; per file `b"F"`, then
u32 path length, u32 mode (permission bits), u64 size, the data's SHA-256
(32 bytes), the path (UTF-8; a name that is not UTF-8 keeps its bytes) and
the data; at the end `b"E"`, u64 file count and u64 total data bytes. The
digest lets a restore leave a file that already holds those bytes alone,
and `check_checkpoint` verify every file before anything is changed.

A checkpoint is read as untrusted input (it lies in a directory a later
daemon trusts no more than the session): every path must be a workspace
path in its normal form and listed, none twice, none a file's parent; the
sizes must add up to at most the cap; each file's data must match its
digest; the end marker must match.

Error handling: `CheckpointError` (client-safe message) for a workspace
over the cap, a file changed while it was copied, or a checkpoint that is
not well formed; other `OSError`s propagate.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from runnerd.errors import RunnerdError
from runnerd.local.dirfd import walk_regular_files
from runnerd.watch.errors import WorkspacePathError
from runnerd.watch.paths import (
    EXCLUDED_DIRECTORIES,
    MAX_PATH_BYTES,
    is_listed,
    normalise_workspace_path,
)

MAGIC = b"runnerd workspace checkpoint 1\n"
_FILE = struct.Struct(">IIQ32s")
_END = struct.Struct(">QQ")
COPY_BYTES = 1024 * 1024


class CheckpointError(RunnerdError):
    """A checkpoint could not be taken or read; `message` says why."""

    log_as_error = True
    code = "checkpoint_failed"


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint holds: how many files, how many bytes of data."""

    files: int
    bytes: int


@dataclass(frozen=True)
class Entry:
    """One file of a checkpoint; its data follows at the reader's position."""

    path: str
    mode: int
    size: int
    digest: bytes  # SHA-256 of the data


def _encode(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def _copy_exactly(src: int, out: BinaryIO, size: int, path: str) -> bytes:
    """Copy `size` bytes of `src` to `out`; their SHA-256."""
    digest = hashlib.sha256()
    left = size
    while left:
        chunk = os.read(src, min(COPY_BYTES, left))
        if not chunk:
            raise CheckpointError(f"file {path!r} changed while it was checkpointed")
        out.write(chunk)
        digest.update(chunk)
        left -= len(chunk)
    return digest.digest()


def _write_file(out: BinaryIO, path: str, fd: int, st: os.stat_result) -> None:
    """One file's record; the digest, known once the data is copied, is
    written into its header after."""
    name = _encode(path)
    mode = st.st_mode & 0o777
    out.write(b"F")
    header_at = out.tell()
    out.write(_FILE.pack(len(name), mode, st.st_size, bytes(32)) + name)
    digest = _copy_exactly(fd, out, st.st_size, path)
    after = os.fstat(fd)
    if (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
        raise CheckpointError(f"file {path!r} changed while it was checkpointed")
    end = out.tell()
    out.seek(header_at)
    out.write(_FILE.pack(len(name), mode, st.st_size, digest))
    out.seek(end)


def write_checkpoint(root: int, out: BinaryIO, max_bytes: int) -> CheckpointInfo:
    """Write every listed file under the directory fd `root` to `out` (a
    seekable file).

    Raises:
        CheckpointError: the files add up to more than `max_bytes`, or one
            changed (size or mtime) while it was copied.
    """
    out.write(MAGIC)
    files = total = 0
    walk = walk_regular_files(root, prune=EXCLUDED_DIRECTORIES, max_path_bytes=MAX_PATH_BYTES)
    with contextlib.closing(walk):
        for path, fd, st in walk:
            total += st.st_size
            if total > max_bytes:
                raise CheckpointError(
                    f"the workspace holds more than {max_bytes} bytes, its storage limit"
                )
            _write_file(out, path, fd, st)
            files += 1
    out.write(b"E" + _END.pack(files, total))
    return CheckpointInfo(files, total)


def _read(source: BinaryIO, size: int) -> bytes:
    data = source.read(size)
    if len(data) != size:
        raise CheckpointError("the checkpoint is truncated")
    return data


def _entry(source: BinaryIO) -> Entry:
    length, mode, size, digest = _FILE.unpack(_read(source, _FILE.size))
    if length > MAX_PATH_BYTES:
        raise CheckpointError("the checkpoint holds a path longer than a workspace path")
    path = _read(source, length).decode("utf-8", "surrogateescape")
    try:
        normal = normalise_workspace_path(path)
    except WorkspacePathError as exc:
        raise CheckpointError(f"the checkpoint holds a bad path: {exc.message}") from None
    if normal != path or not is_listed(path):
        raise CheckpointError(f"the checkpoint holds a path no listing has: {path[:80]!r}")
    return Entry(path, mode & 0o777, size, digest)


def read_checkpoint(source: BinaryIO, max_bytes: int) -> Iterator[Entry]:
    """The checkpoint's files in order. After each is yielded, its `size`
    bytes of data are next in `source`: the consumer reads them, or they
    are skipped (by seeking) when it asks for the next one. Checked as it
    is read: a consumer that must not act on a bad checkpoint reads it
    through once first (`check_checkpoint`).

    Raises:
        CheckpointError: not a checkpoint, truncated, a bad or repeated
            path, more than `max_bytes` of data, or an end that does not
            match.
    """
    if source.read(len(MAGIC)) != MAGIC:
        raise CheckpointError("not a workspace checkpoint (or of another version)")
    files = total = 0
    while True:
        kind = _read(source, 1)
        if kind == b"E":
            if _END.unpack(_read(source, _END.size)) != (files, total):
                raise CheckpointError("the checkpoint's end does not match its files")
            if source.read(1):
                raise CheckpointError("the checkpoint has data past its end")
            return
        if kind != b"F":
            raise CheckpointError("the checkpoint is damaged")
        entry = _entry(source)
        total += entry.size
        if total > max_bytes:
            raise CheckpointError(f"the checkpoint holds more than {max_bytes} bytes")
        files += 1
        start = source.tell()
        yield entry
        source.seek(start + entry.size)


def check_checkpoint(source: BinaryIO, max_bytes: int) -> dict[str, Entry]:
    """Read the whole checkpoint, each file's data checked against its
    digest; its entries by path. Leaves `source` at its start.

    Raises:
        CheckpointError: as `read_checkpoint`, for data that does not match
            its digest, and for a path given twice or one that is another
            file's parent directory.
    """
    entries: dict[str, Entry] = {}
    parents: set[str] = set()
    for entry in read_checkpoint(source, max_bytes):
        segments = entry.path.split("/")
        prefixes = {"/".join(segments[:k]) for k in range(1, len(segments))}
        if entry.path in entries or entry.path in parents or prefixes & entries.keys():
            raise CheckpointError(f"the checkpoint holds {entry.path[:80]!r} twice over")
        if _digest_of(source, entry.size) != entry.digest:
            raise CheckpointError(f"the checkpoint's copy of {entry.path[:80]!r} is damaged")
        entries[entry.path] = entry
        parents |= prefixes
    source.seek(0)
    return entries


def _digest_of(source: BinaryIO, size: int) -> bytes:
    digest = hashlib.sha256()
    left = size
    while left:
        chunk = source.read(min(COPY_BYTES, left))
        if not chunk:
            raise CheckpointError("the checkpoint is truncated")
        digest.update(chunk)
        left -= len(chunk)
    return digest.digest()
