"""Changing a workspace tree in place: put a file, delete a path, by dir fd.

Owns the write and delete steps of `runnerd.local.workspace` (which words
the contract around them), on an open workspace root and an open scratch
directory: a daemon-private directory on the same file system that the
workload cannot see. A file is written to a temporary name in the scratch
directory and renamed into place (a reader never sees half a file, no
temporary name shows in the tree); a directory to delete is renamed into
the scratch directory first (one atomic step) and removed there, where the
workload cannot rearrange it under the removal. Every path in the tree is
walked with `runnerd.local.dirfd` (never a symlink followed).

Synchronous; run in a worker thread.

Error handling: `PathConflict` names what is in the way (a write through a
non-directory, onto a directory); `OSError`s propagate.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from runnerd.local.dirfd import NotADirectoryInTree, Owner, kind_at, open_parent
from runnerd.local.workdir import remove_tree

COPY_BYTES = 1024 * 1024
NEW_FILE_MODE = 0o600
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class PathConflict(Exception):
    """What is in the way of a write; `str()` names it (tree paths only)."""


class TreeOps:
    """Writes and deletes in the tree at the open directory `root`."""

    def __init__(self, root: int, scratch: int, scratch_path: Path, owner: Owner) -> None:
        self._root = root
        self._scratch = scratch
        self._scratch_path = scratch_path
        # Directories are created as `owner`; True: as the daemon.
        self._owner: Owner | bool = owner if owner is not None else True
        self._file_owner = owner

    def check_writes(self, paths: Sequence[list[str]]) -> None:
        """Raise `PathConflict` (naming `write[i]`) if a write's parent is not
        a directory or its target is one, on disk or made so by an earlier
        write of the same set; changes nothing."""
        files: set[str] = set()
        dirs: set[str] = set()
        for i, segments in enumerate(paths):
            path = "/".join(segments)
            where = f"body.write[{i}].path {path[:80]!r}"
            prefixes = ["/".join(segments[:k]) for k in range(1, len(segments))]
            for prefix in prefixes:
                if prefix in files:
                    raise PathConflict(f"{where}: {prefix!r} is a file (an earlier write)")
            if path in dirs or self._kind(segments, where) == "dir":
                raise PathConflict(f"{where}: it is a directory")
            files.add(path)
            dirs.update(prefixes)

    def _kind(self, segments: list[str], where: str) -> str:
        try:
            parent = open_parent(self._root, segments)
        except NotADirectoryInTree as exc:
            raise PathConflict(f"{where}: {exc.prefix!r} is not a directory") from None
        except FileNotFoundError:
            return "missing"
        try:
            return kind_at(parent, segments[-1])
        finally:
            os.close(parent)

    def mode_of(self, segments: list[str]) -> int | None:
        """The permission bits of the regular file at `segments`, else None."""
        try:
            parent = open_parent(self._root, segments)
        except (NotADirectoryInTree, FileNotFoundError):
            return None
        try:
            st = os.stat(segments[-1], dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(parent)
        return st.st_mode & 0o777 if stat.S_ISREG(st.st_mode) else None

    def put(
        self,
        segments: list[str],
        fill: Callable[[int], None],
        mode: int | None = None,
        *,
        force: bool = False,
    ) -> None:
        """Make `segments` a regular file whose bytes `fill(fd)` writes, its
        parents created (0700, the owner's). `mode`: its permission bits
        (None: those of the regular file it replaces, else 0600). `force`:
        remove whatever is in the way (restore); otherwise that is a
        `PathConflict`."""
        parent = self._parent_for_write(segments, force=force)
        name = segments[-1]
        temp = f"write-{secrets.token_hex(8)}"
        try:
            if force and kind_at(parent, name) == "dir":
                self.discard(parent, name)
            fd = os.open(temp, _TEMP_FLAGS, 0o600, dir_fd=self._scratch)
            try:
                if self._file_owner is not None:
                    os.fchown(fd, *self._file_owner)
                os.fchmod(fd, _kept_mode(parent, name) if mode is None else mode)
                fill(fd)
            finally:
                os.close(fd)
            try:
                os.rename(temp, name, src_dir_fd=self._scratch, dst_dir_fd=parent)
            except IsADirectoryError:
                # Made a directory since the check: the workload's doing.
                raise PathConflict(f"{'/'.join(segments)[:80]!r} is a directory") from None
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp, dir_fd=self._scratch)
            raise
        finally:
            os.close(parent)

    def _parent_for_write(self, segments: list[str], *, force: bool) -> int:
        while True:
            try:
                return open_parent(self._root, segments, self._owner)
            except NotADirectoryInTree as exc:
                if not force:
                    raise PathConflict(
                        f"{'/'.join(segments)[:80]!r}: {exc.prefix!r} is not a directory"
                    ) from None
                blocker = exc.prefix.split("/")
                holder = open_parent(self._root, blocker, self._owner)
                try:
                    self.discard(holder, blocker[-1])
                finally:
                    os.close(holder)

    def delete(self, segments: list[str]) -> int:
        """Remove the file or directory tree at `segments`: 1, or 0 if there
        was nothing (a missing path, or one under a non-directory)."""
        try:
            parent = open_parent(self._root, segments)
        except (NotADirectoryInTree, FileNotFoundError):
            return 0
        try:
            name = segments[-1]
            kind = kind_at(parent, name)
            if kind == "missing":
                return 0
            if kind == "dir":
                self.discard(parent, name)
                return 1
            try:
                os.unlink(name, dir_fd=parent)
            except FileNotFoundError:
                return 0
            except IsADirectoryError:
                self.discard(parent, name)  # swapped for a directory meanwhile
            return 1
        finally:
            os.close(parent)

    def discard(self, parent: int, name: str) -> None:
        """Move `name` (in the open directory `parent`) out of the tree in
        one step, then remove it."""
        gone = f"deleted-{secrets.token_hex(8)}"
        os.rename(name, gone, src_dir_fd=parent, dst_dir_fd=self._scratch)
        remove_tree(self._scratch_path / gone)  # daemon-private: safe by path


def _kept_mode(parent: int, name: str) -> int:
    """The permission bits of the regular file being replaced, else 0600."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return NEW_FILE_MODE
    return st.st_mode & 0o777 if stat.S_ISREG(st.st_mode) else NEW_FILE_MODE


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def copy_exactly(source: BinaryIO, fd: int, size: int) -> None:
    """`size` bytes from `source` to `fd`. Raises EOFError if it has fewer."""
    left = size
    while left:
        chunk = source.read(min(COPY_BYTES, left))
        if not chunk:
            raise EOFError
        write_all(fd, chunk)
        left -= len(chunk)
