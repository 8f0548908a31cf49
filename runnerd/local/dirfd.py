"""File operations inside a directory a workload also writes, by directory fd.

Owns walking a tree that its session's own processes may be rearranging at
the same moment (a workspace: `runnerd.local.workspace`) without ever
leaving it: every path is opened one segment at a time relative to an
open directory fd, each with `O_NOFOLLOW` (a symlink, even one swapped in
for a directory between a check and its use, is refused, never followed)
and `O_NONBLOCK` (opening a FIFO never waits for a writer). No function
here takes a path through the tree as a string the kernel would resolve.

Synchronous; callers run it in a worker thread.

Error handling: `NotADirectoryInTree` names the prefix of a path that
exists but is not a directory (a file, a symlink, a FIFO); other `OSError`s
propagate (the caller words them).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Generator, Iterator
from dataclasses import dataclass

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# What opening an entry a walk listed may meet when the workload changed it
# meanwhile (gone, swapped for a symlink, a socket) or made it unreadable.
_SKIPPED = {errno.ENOENT, errno.ELOOP, errno.ENXIO, errno.ENOTDIR, errno.EACCES, errno.EPERM}
MAKE_ATTEMPTS = 8
Owner = tuple[int, int] | None  # (uid, gid) for what is created; None: the daemon's


class NotADirectoryInTree(Exception):
    """`prefix` (a `/`-joined path in the tree) exists and is not a directory."""

    def __init__(self, prefix: str) -> None:
        super().__init__(prefix)
        self.prefix = prefix


def _is_not_a_directory(exc: OSError) -> bool:
    # ELOOP: a symlink under O_NOFOLLOW; ENOTDIR: a file or FIFO under O_DIRECTORY.
    return exc.errno in (errno.ELOOP, errno.ENOTDIR)


def open_dir(parent: int, name: str) -> int:
    """The directory `name` in `parent`, opened.

    Raises:
        NotADirectoryInTree: `name` is not a directory (prefix: `name`).
        FileNotFoundError: there is no `name`.
    """
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if _is_not_a_directory(exc):
            raise NotADirectoryInTree(name) from None
        raise


def make_dir(parent: int, name: str, owner: Owner) -> int:
    """`name` in `parent`, created (0700, chowned to `owner`) if missing; opened.

    Raises:
        NotADirectoryInTree: `name` is something else.
        FileNotFoundError: `name` kept vanishing between its mkdir and open
            (a workload racing it, `MAKE_ATTEMPTS` times over).
    """
    for _ in range(MAKE_ATTEMPTS - 1):
        try:
            return _make_dir_once(parent, name, owner)
        except FileNotFoundError:
            continue  # removed between the mkdir and the open: again
    return _make_dir_once(parent, name, owner)


def _make_dir_once(parent: int, name: str, owner: Owner) -> int:
    try:
        return open_dir(parent, name)  # mostly there already: one call
    except FileNotFoundError:
        pass
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        return open_dir(parent, name)  # made meanwhile: whatever it is now decides
    fd = open_dir(parent, name)
    if owner is not None:
        os.fchown(fd, *owner)
    return fd


def open_parent(root: int, segments: list[str], owner: Owner | bool = False) -> int:
    """The directory that holds `segments[-1]` (`segments[:-1]` under
    `root`), opened; with an `owner` (True: the daemon's own), missing
    directories are created on the way.

    Raises:
        NotADirectoryInTree: a prefix is not a directory (its path named).
        FileNotFoundError: a directory on the way is missing (no `owner`).
    """
    fd = os.dup(root)
    try:
        for depth, name in enumerate(segments[:-1]):
            try:
                if owner is False:
                    sub = open_dir(fd, name)
                else:
                    sub = make_dir(fd, name, None if owner is True else owner)
            except NotADirectoryInTree:
                raise NotADirectoryInTree("/".join(segments[: depth + 1])) from None
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd


def kind_at(parent: int, name: str) -> str:
    """What `name` in `parent` is: "missing", "dir", "file" (regular) or "other"."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return "missing"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    return "file" if stat.S_ISREG(st.st_mode) else "other"


def open_regular(parent: int, name: str) -> tuple[int, os.stat_result] | None:
    """`name` in `parent` opened for reading and its status, if it is a
    regular file; None when it is missing or anything else."""
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in _SKIPPED:
            return None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st


@dataclass
class _Frame:
    fd: int
    prefix: str
    subdirs: Iterator[str]


def _scan(frame_fd: int) -> tuple[list[str], list[str]]:
    """The names of the directory that are UTF-8: (regular-looking files,
    subdirectories). A name that is not (os.scandir hands it over with
    surrogate escapes) is left out, a directory with all it holds: no path
    of it can be written as text, so none can be listed or named back."""
    files, dirs = [], []
    with os.scandir(frame_fd) as entries:
        for entry in entries:
            if not _is_utf8(entry.name):
                continue
            if entry.is_dir(follow_symlinks=False):
                dirs.append(entry.name)
            elif entry.is_file(follow_symlinks=False):
                files.append(entry.name)
    return files, dirs


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def walk_regular_files(
    root: int, *, prune: frozenset[str], max_path_bytes: int
) -> Generator[tuple[str, int, os.stat_result], None, None]:
    """Every regular file under `root`: its `/`-joined path, an fd open for
        reading (closed when the consumer asks for the next one) and its
        status. Depth first, in no particular order. Symlinks are neither
        listed nor followed; directories named in `prune` are skipped with all
        they hold, and so is any path longer than `max_path_bytes` (UTF-8), so
        the walk holds at most one fd per level of a path that short. Entries
        that vanish or change kind during the walk are skipped, and so are
        names that are not UTF-8 (with what they hold). Use it under
    `contextlib.closing`: closing it closes every fd it holds."""
    stack = [_Frame(os.dup(root), "", iter(()))]
    try:
        stack[0].subdirs = yield from _files_of(stack[0], prune, max_path_bytes)
        while stack:
            top = stack[-1]
            name = next(top.subdirs, None)
            if name is None:
                os.close(stack.pop().fd)
                continue
            try:
                fd = os.open(name, DIR_FLAGS, dir_fd=top.fd)
            except OSError as exc:
                if exc.errno in _SKIPPED:
                    continue
                raise
            frame = _Frame(fd, f"{top.prefix}{name}/", iter(()))
            stack.append(frame)
            frame.subdirs = yield from _files_of(frame, prune, max_path_bytes)
    finally:
        for frame in stack:
            os.close(frame.fd)


def _files_of(
    frame: _Frame, prune: frozenset[str], max_path_bytes: int
) -> Generator[tuple[str, int, os.stat_result], None, Iterator[str]]:
    """Yield the frame's files; return its subdirectories worth entering."""
    files, dirs = _scan(frame.fd)
    for name in files:
        path = frame.prefix + name
        if len(path.encode("utf-8", "surrogateescape")) > max_path_bytes:
            continue
        opened = open_regular(frame.fd, name)
        if opened is None:
            continue
        fd, st = opened
        try:
            yield path, fd, st
        finally:
            os.close(fd)
    return iter(
        name
        for name in dirs
        if name not in prune
        and len((frame.prefix + name).encode("utf-8", "surrogateescape")) < max_path_bytes
    )
