"""A watch session's workspace on the local backend: a directory of the session.

Owns the contract's workspace operations ("Watch sessions": `GET` and
`POST /workspace`, `GET /workspace/file`, checkpoints) on a directory the
session's own processes write too: `list`, `read`, `apply` (a change set),
`checkpoint` and `restore`. The directory is the session's `app/`
(`runnerd.local.workdir`: the bundle is its initial content, and it is
every app's cwd); this module adds no file of its own to it.

Safety: every walk goes by directory fd, one `O_NOFOLLOW` segment at a time
(`runnerd.local.dirfd`), so a symlink the workload planted, or swapped in
for a directory between a check and its use, is never followed out of the
workspace, and a FIFO is never waited on. New files and directories belong
to the session (`owner`: a root daemon's session uid), as the bundle does.
Writes and deletes go through `scratch`, a daemon-private directory on the
same file system that the workload cannot see (e.g.
`<workdir>/.trash/<session-id>.scratch`; see `runnerd.local.treeops`): a
reader never sees half a file, no temporary name ever shows in the
workspace, and a deleted tree is out of the workload's reach before it is
removed.

The semantics the contract leaves open, decided here:
- A write whose parent is a file, a symlink or anything but a directory,
  or whose target is a directory, is refused, `409 path_conflict`, and the
  whole change set with it: every write is checked before any is made.
  (Replacing it would silently discard what the workload made; following a
  symlink is never done.) A symlink or FIFO *at* a write's path is
  replaced by the file, as an existing file is.
- A replaced regular file keeps its permission bits; a new one is 0600.
- A file or directory that cannot be opened (a non-root daemon's workload
  made it unreadable), a path past the 1024-byte limit (no route could name
  it), a file or directory whose name is not UTF-8 (the workload made it:
  JSON text cannot carry it, and no route could name it back), and
  whatever is under the excluded trees are not listed, so not checkpointed
  either (nor removed by a `restore`).
- `restore` makes the listed files exactly the checkpoint's: listed files
  it does not hold are removed, and anything in the way of one it holds (a
  file where it needs a directory, a directory where it has a file) is
  removed. Empty directories and the excluded trees are left as they are
  (the contract leaves them unspecified).

Caps (`WorkspaceLimits`): a change set's data over `max_change_bytes`
(`server.max_body_bytes`) is `413 payload_too_large`; a file over
`max_read_bytes` (`server.max_body_bytes`) is not read, `413
file_too_large`; a checkpoint over `max_workspace_bytes` (the watch tier's
`ephemeral_storage`, i.e. `limits.app`) is a `CheckpointError` and writes
nothing. Nothing here holds more than one file's data (a change set's,
for `apply`) in memory.

Concurrency: each operation runs in a worker thread; the operations of one
`Workspace` run one at a time (a lock), and an operation that has started
finishes even if its caller is cancelled.

Error handling: refusals are `WatchError`s (their status and code are the
answer); an IO failure is `WorkspaceError` (500, client-safe message, no
host path).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import hashlib
import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import trio

import runnerd.local.checkpoint as ckpt
from runnerd.config.quantities import parse_quantity
from runnerd.errors import RunnerdError
from runnerd.local.dirfd import (
    DIR_FLAGS,
    NotADirectoryInTree,
    Owner,
    open_parent,
    open_regular,
    walk_regular_files,
)
from runnerd.local.treeops import COPY_BYTES, PathConflict, TreeOps, copy_exactly, write_all
from runnerd.watch.changes import ChangeSet
from runnerd.watch.errors import WatchError, WorkspacePathError
from runnerd.watch.paths import EXCLUDED_DIRECTORIES, MAX_PATH_BYTES

T = TypeVar("T")
CheckpointError = ckpt.CheckpointError
CheckpointInfo = ckpt.CheckpointInfo


class WorkspaceError(RunnerdError):
    """The workspace could not be read or changed (disk full, a directory
    the daemon cannot open, ...). `message` is client-safe."""

    log_as_error = True
    code = "workspace_failed"


@dataclass(frozen=True)
class WorkspaceLimits:
    """The caps of the module docstring, in bytes."""

    max_change_bytes: int
    max_read_bytes: int
    max_workspace_bytes: int

    @classmethod
    def from_config(cls, max_body_bytes: int, ephemeral_storage: str) -> WorkspaceLimits:
        """From `server.max_body_bytes` and the app tier's `ephemeral_storage`
        (a Kubernetes quantity, e.g. "1Gi")."""
        storage = int(parse_quantity(ephemeral_storage))
        return cls(max_body_bytes, max_body_bytes, max(1, storage))


@dataclass(frozen=True)
class ListedFile:
    """A `WorkspaceFile` of `GET /workspace`, with its size."""

    path: str
    hash: str  # lowercase hex SHA-256 of the bytes
    size: int


def _segments(path: str) -> list[str]:
    # Paths arrive normalised (`watch.changes.normalise_change_set`); this is
    # defence in depth, so a bug upstream can never step out of the tree.
    segments = path.split("/")
    if "\0" in path or any(s in ("", ".", "..") for s in segments):
        raise WorkspacePathError(f"path {path[:80]!r} is not in its normal form")
    return segments


class Workspace:
    """The workspace directory `root` (see the module docstring)."""

    def __init__(self, root: Path, *, scratch: Path, owner: Owner, limits: WorkspaceLimits) -> None:
        self.root = root
        self._scratch = scratch
        self._owner = owner
        self._limits = limits
        self._lock = trio.Lock()

    async def _run(self, fn: Callable[[], T]) -> T:
        async with self._lock:
            return await trio.to_thread.run_sync(fn)

    async def list(self) -> list[ListedFile]:
        """Every listed regular file, sorted by its path's bytes, hashed."""
        return await self._run(self._list)

    async def read(self, path: str) -> bytes:
        """The bytes of the regular file at the normal path `path`.

        Raises:
            WatchError: `404 file_not_found` (missing, or not a regular file
                reached through directories only), `413 file_too_large`.
        """
        return await self._run(lambda: self._read(path))

    async def is_file(self, path: str) -> bool:
        """Whether the normal path `path` is a regular file of the workspace,
        reached through directories only (an app's entry must be)."""
        return await self._run(lambda: self._is_file(path))

    async def apply(self, changes: ChangeSet) -> tuple[int, int]:
        """Apply a normalised change set: the writes in order, then the
        deletes; returns (written, deleted) as `POST /workspace` answers.

        Raises:
            WatchError: `413 payload_too_large`, `409 path_conflict` (before
                anything was written).
            WorkspaceError: an IO failure (what came before it is applied).
        """
        return await self._run(lambda: self._apply(changes))

    async def checkpoint(self, dest: Path) -> CheckpointInfo:
        """Write a checkpoint of the listed files to `dest` (a daemon-private
        path; replaced atomically, so an older one stays whole until then).

        Raises:
            CheckpointError: over `max_workspace_bytes`, or a file changed
                while it was copied (retry later); `dest` is untouched.
            WorkspaceError: an IO failure.
        """
        return await self._run(lambda: self._checkpoint(dest))

    async def restore(self, source: Path) -> CheckpointInfo:
        """Make the listed files exactly those of the checkpoint `source`
        (made by `checkpoint`), creating the workspace directory if it is
        gone; a file that already holds its bytes and mode is left alone.
        The checkpoint is checked whole (every digest) before anything
        changes.

        Raises:
            CheckpointError: `source` is not a well-formed checkpoint, or
                over `max_workspace_bytes`.
            WorkspaceError: an IO failure.
        """
        return await self._run(lambda: self._restore(source))

    # -- in the worker thread ------------------------------------------------

    @contextlib.contextmanager
    def _opened(self, path: Path, *, create: bool = False) -> Iterator[int]:
        """The directory `path` (the root or scratch: trusted paths) open;
        with `create`, made first if missing (the root as the owner's)."""
        try:
            if create and not os.path.lexists(path):
                os.mkdir(path, 0o700)
                if path == self.root and self._owner is not None:
                    os.chown(path, *self._owner, follow_symlinks=False)
            fd = os.open(path, DIR_FLAGS)
        except OSError as exc:
            raise WorkspaceError(f"cannot open the workspace: {exc.strerror}") from exc
        try:
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _tree(self, *, create: bool = False) -> Iterator[TreeOps]:
        with self._opened(self.root, create=create) as root:
            with self._opened(self._scratch, create=True) as scratch:
                yield TreeOps(root, scratch, self._scratch, self._owner)

    def _list(self) -> builtins.list[ListedFile]:
        files = []
        with self._opened(self.root) as root, _io("list the workspace"):
            walk = walk_regular_files(
                root, prune=EXCLUDED_DIRECTORIES, max_path_bytes=MAX_PATH_BYTES
            )
            with contextlib.closing(walk):
                for path, fd, _ in walk:
                    digest, size = _hash(fd)
                    files.append(ListedFile(path, digest, size))
        return sorted(files, key=lambda f: f.path.encode())

    def _read(self, path: str) -> bytes:
        segments = _segments(path)
        missing = WatchError(404, "file_not_found", f"{path[:80]!r} is not a file in the workspace")
        with self._opened(self.root) as root, _io(f"read {path[:80]!r}"):
            try:
                parent = open_parent(root, segments)
            except (NotADirectoryInTree, FileNotFoundError):
                raise missing from None
            try:
                opened = open_regular(parent, segments[-1])
            finally:
                os.close(parent)
            if opened is None:
                raise missing
            fd, _ = opened
            try:
                return _read_capped(fd, self._limits.max_read_bytes, path)
            finally:
                os.close(fd)

    def _is_file(self, path: str) -> bool:
        segments = _segments(path)
        with self._opened(self.root) as root, _io(f"look at {path[:80]!r}"):
            try:
                parent = open_parent(root, segments)
            except (NotADirectoryInTree, FileNotFoundError):
                return False
            try:
                opened = open_regular(parent, segments[-1])
            finally:
                os.close(parent)
            if opened is None:
                return False
            os.close(opened[0])
            return True

    def _apply(self, changes: ChangeSet) -> tuple[int, int]:
        writes = [(write.data, _segments(write.path)) for write in changes.writes]
        deletes = [_segments(path) for path in changes.deletes]
        size = sum(len(data) for data, _ in writes)
        cap = self._limits.max_change_bytes
        if size > cap:
            raise WatchError(
                413, "payload_too_large", f"the change set writes {size} bytes; at most {cap}"
            )
        with self._tree() as tree, _io("change the workspace"):
            try:
                tree.check_writes([segments for _, segments in writes])
                for data, segments in writes:
                    tree.put(segments, functools.partial(_write_to, data))
            except PathConflict as exc:
                raise WatchError(409, "path_conflict", str(exc)) from None
            deleted = sum(tree.delete(segments) for segments in deletes)
        return len(writes), deleted

    def _checkpoint(self, dest: Path) -> CheckpointInfo:
        temp = dest.with_name(f".{dest.name}.{secrets.token_hex(8)}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with self._opened(self.root) as root, _io("checkpoint the workspace"):
            try:
                with open(os.open(temp, flags, 0o600), "wb") as out:
                    info = ckpt.write_checkpoint(root, out, self._limits.max_workspace_bytes)
                os.replace(temp, dest)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
                raise
        return info

    def _restore(self, source: Path) -> CheckpointInfo:
        cap = self._limits.max_workspace_bytes
        try:
            checkpoint = open(source, "rb")  # noqa: SIM115 - closed by the with below
        except OSError as exc:
            raise CheckpointError(f"cannot open the checkpoint: {exc.strerror}") from exc
        with checkpoint:
            entries = ckpt.check_checkpoint(checkpoint, cap)
            with self._tree(create=True) as tree, _io("restore the workspace"):
                current = {listed.path: listed for listed in self._list()}
                for path in current.keys() - entries.keys():
                    tree.delete(_segments(path))
                files = total = 0
                for entry in ckpt.read_checkpoint(checkpoint, cap):
                    files, total = files + 1, total + entry.size
                    there = current.get(entry.path)
                    segments = _segments(entry.path)
                    if there is not None and there.hash == entry.digest.hex():
                        if tree.mode_of(segments) == entry.mode:
                            continue  # already holds exactly this (a resume, mostly)

                    def fill(fd: int, size: int = entry.size) -> None:
                        try:
                            copy_exactly(checkpoint, fd, size)
                        except EOFError:
                            raise CheckpointError("the checkpoint is truncated") from None

                    tree.put(segments, fill, entry.mode, force=True)
        return CheckpointInfo(files, total)


@contextlib.contextmanager
def _io(doing: str) -> Iterator[None]:
    """An `OSError` inside as a client-safe `WorkspaceError`."""
    try:
        yield
    except OSError as exc:
        raise WorkspaceError(f"cannot {doing}: {exc.strerror}") from exc


def _write_to(data: bytes, fd: int) -> None:
    write_all(fd, data)


def _hash(fd: int) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    while chunk := os.read(fd, COPY_BYTES):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def _read_capped(fd: int, cap: int, path: str) -> bytes:
    pieces = []
    size = 0
    while chunk := os.read(fd, min(COPY_BYTES, cap + 1 - size)):
        pieces.append(chunk)
        size += len(chunk)
        if size > cap:
            raise WatchError(
                413, "file_too_large", f"{path[:80]!r} is larger than {cap} bytes, the read limit"
            )
    return b"".join(pieces)
