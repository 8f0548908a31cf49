"""A session's directory on disk: `workdir/<session-id>/{app,work}`.

Owns creating it (the bundle written under `app/`, the workload's cwd; an
empty `work/`, its HOME) and deleting it. Directories are 0700 and files
0600: the bundle is the client's code and may hold secrets of theirs. With
an `owner` (a root daemon's session uid) every one of them is chowned to
it, so the session can read its bundle and write its HOME, and nothing
else of the host's is its own.

Synchronous filesystem code; the backend runs it in a worker thread.

Error handling: `prepare_session_dir` raises `WorkdirError` with a
client-safe message (no host paths) and the `OSError` chained; whatever it
had created is removed again.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from runnerd.backend import BundleSpec

log = logging.getLogger(__name__)


class WorkdirError(Exception):
    """The session directory could not be prepared. `str()` is client-safe."""


@dataclass(frozen=True)
class SessionDir:
    root: Path
    app: Path
    work: Path
    entry: Path | None  # absolute path of the bundle entry; None without a bundle


def _checked_relative(app: Path, relative: str) -> Path:
    # Paths arrive normalised (admission rejects traversal with a 400); this is
    # defence in depth, so a bug upstream can never write outside `app/`.
    parts = relative.split("/")
    if "\0" in relative or any(p in ("", ".", "..") for p in parts):
        raise WorkdirError(f"bundle path '{relative}' is not a plain relative path")
    target = app.joinpath(*parts)
    if not target.resolve().is_relative_to(app.resolve()):
        raise WorkdirError(f"bundle path '{relative}' resolves outside the bundle")
    return target


Owner = tuple[int, int] | None  # (uid, gid) to chown to; None: the daemon's


def _mkdir(directory: Path, owner: Owner) -> None:
    # mkdir, not makedirs: a name taken by a file is an error here.
    directory.mkdir(mode=0o700)
    if owner is not None:
        os.chown(directory, *owner, follow_symlinks=False)


def _write_file(app: Path, relative: str, contents: str, owner: Owner) -> None:
    target = _checked_relative(app, relative)
    directory = app
    for part in target.relative_to(app).parts[:-1]:
        directory = directory / part
        if not directory.is_dir():
            _mkdir(directory, owner)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(target, flags, 0o600)
    if owner is not None:
        os.fchown(fd, *owner)
    with open(fd, "w", encoding="utf-8", newline="") as out:
        out.write(contents)


def prepare_session_dir(
    workdir: Path, session_id: str, bundle: BundleSpec | None, owner: Owner = None
) -> SessionDir:
    """Create `workdir/<session_id>` with the bundle under `app/` and an
    empty `work/`, all of it owned by `owner` when given.

    Raises:
        WorkdirError: unwritable workdir, a session dir that already exists,
            a bundle path that is not plain or collides with another.
    """
    root = workdir / session_id
    try:
        workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        root.mkdir(mode=0o700)
    except OSError as exc:
        raise WorkdirError(f"cannot create the session directory: {exc.strerror}") from exc
    layout = session_layout(root)
    try:
        if owner is not None:
            os.chown(root, *owner)
        _mkdir(layout.app, owner)
        _mkdir(layout.work, owner)
        return write_bundle(layout, bundle, owner)
    except BaseException:
        remove_session_dir(root)
        raise


def session_layout(root: Path) -> SessionDir:
    """The paths of the session directory `root` (nothing is created)."""
    return SessionDir(root=root, app=root / "app", work=root / "work", entry=None)


def write_bundle(layout: SessionDir, bundle: BundleSpec | None, owner: Owner = None) -> SessionDir:
    """`layout` with `bundle` written under its (empty) `app/`, owned by
    `owner` when given; nothing is removed on failure (the caller's).

    Raises:
        WorkdirError: a bundle path that is not plain or collides with
            another, or a file that cannot be written.
    """
    if bundle is None:
        return layout
    for relative, contents in bundle.files:
        try:
            _write_file(layout.app, relative, contents, owner)
        except UnicodeEncodeError as exc:
            # JSON can carry lone surrogates ("\ud800"): not writable as UTF-8.
            raise WorkdirError(f"bundle file '{relative}' is not valid Unicode text") from exc
        except OSError as exc:
            raise WorkdirError(f"cannot write bundle file '{relative}': {exc.strerror}") from exc
    entry = _checked_relative(layout.app, bundle.entry)
    return SessionDir(root=layout.root, app=layout.app, work=layout.work, entry=entry)


def remove_session_dir(root: Path) -> None:
    """Delete the session directory and everything in it. Never raises."""
    try:
        remove_tree(root)
    except OSError as exc:
        log.error(
            "could not delete session directory %s: %s",
            root,
            exc,
            extra={"session_id": root.name},  # the directory is named after it
        )


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_subdir(parent_fd: int, name: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except PermissionError:
        # A workload may leave `chmod 000` directories behind: open it up.
        os.chmod(name, 0o700, dir_fd=parent_fd)
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)


def _clear_files(fd: int) -> str | None:
    """Unlink every non-directory in the open directory `fd`; return the
    name of one subdirectory left in it, or None when it is empty."""
    with os.scandir(fd) as entries:
        names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in names:
        if is_dir:
            return name
        try:
            os.unlink(name, dir_fd=fd)
        except PermissionError:
            os.fchmod(fd, 0o700)  # `chmod 500` on the directory: open it up
            os.unlink(name, dir_fd=fd)
    return None


def remove_tree(root: Path) -> None:
    """Delete `root` and everything under it, without recursion: one
    directory fd open at a time and a stack of names, so a bundle nested
    thousands of levels deep (or past PATH_MAX) is removed like a flat one.
    Symlinks are removed, never followed. A missing `root` is no error.

    Raises:
        OSError: something could not be removed.
    """
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        root.unlink()
        return
    try:
        fd = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        return
    names: list[str] = []
    try:
        while True:
            child = _clear_files(fd)
            if child is not None:
                sub = _open_subdir(fd, child)
                os.close(fd)
                fd = sub
                names.append(child)
                continue
            if not names:
                break
            up = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = up
            os.rmdir(names.pop(), dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(root)


# A session directory's name is its session id (`admission.new_session_id`),
# or a warm sandbox's before a session takes it (`runnerd.local.warm`).
_SESSION_DIR = re.compile(r"[a-z2-7]{12}")
WARM_PREFIX = ".warm-"
LOCK_NAME = ".runnerd.lock"
# Finished sessions' directories awaiting removal (`runnerd.local.trash`).
TRASH_NAME = ".trash"


def claim_workdir(workdir: Path) -> int:
    """Create `workdir` (0700) if needed and take the exclusive lock on it:
    one daemon per workdir. Returns the lock's fd (close-on-exec), held for
    the process's life.

    Raises:
        WorkdirError: the workdir cannot be created, or another runnerd holds it.
    """
    try:
        workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(workdir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise WorkdirError(f"cannot use {str(workdir)!r}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise WorkdirError(
            f"{str(workdir)!r} is in use by another runnerd (it holds {LOCK_NAME})"
        ) from exc
    return fd


def sweep_workdir(workdir: Path) -> list[str]:
    """Remove every session directory in `workdir` (call with the lock held
    and before any session starts: then none is live). Only names shaped
    like a session id are touched, and the trash (`TRASH_NAME`: what a
    killed daemon had not removed yet), so a workdir pointed at a shared
    directory by mistake loses nothing else; and warm sandboxes'
    (`WARM_PREFIX`, no session's yet). Returns the session names removed."""
    removed = []
    for entry in sorted(os.listdir(workdir)):
        path = workdir / entry
        if not path.is_dir() or path.is_symlink():
            continue
        if _SESSION_DIR.fullmatch(entry):
            remove_session_dir(path)
            removed.append(entry)
        elif entry.startswith(WARM_PREFIX):
            remove_session_dir(path)  # no session's: not counted
        elif entry == TRASH_NAME:
            removed += sorted(name for name in os.listdir(path) if _SESSION_DIR.fullmatch(name))
            remove_session_dir(path)
    return removed
