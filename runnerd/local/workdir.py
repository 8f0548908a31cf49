"""A session's directory on disk: `workdir/<session-id>/{app,work}`.

Owns creating it (the bundle written under `app/`, an empty `work/` that is
the workload's cwd and HOME) and deleting it. Directories are 0700 and files
0600: the bundle is the client's code and may hold secrets of theirs.

Synchronous filesystem code; the backend runs it in a worker thread.

Error handling: `prepare_session_dir` raises `WorkdirError` with a
client-safe message (no host paths) and the `OSError` chained; whatever it
had created is removed again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def _write_file(app: Path, relative: str, contents: str) -> None:
    target = _checked_relative(app, relative)
    directory = app
    for part in target.relative_to(app).parts[:-1]:
        directory = directory / part
        if not directory.is_dir():
            # mkdir, not makedirs: a name taken by a file is an error here.
            directory.mkdir(mode=0o700)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(target, flags, 0o600)
    with open(fd, "w", encoding="utf-8", newline="") as out:
        out.write(contents)


def prepare_session_dir(workdir: Path, session_id: str, bundle: BundleSpec | None) -> SessionDir:
    """Create `workdir/<session_id>` with the bundle under `app/` and an empty `work/`.

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
    layout = SessionDir(root=root, app=root / "app", work=root / "work", entry=None)
    try:
        layout.app.mkdir(mode=0o700)
        layout.work.mkdir(mode=0o700)
        if bundle is None:
            return layout
        for relative, contents in bundle.files:
            try:
                _write_file(layout.app, relative, contents)
            except UnicodeEncodeError as exc:
                # JSON can carry lone surrogates ("\ud800"): not writable as UTF-8.
                raise WorkdirError(f"bundle file '{relative}' is not valid Unicode text") from exc
            except OSError as exc:
                raise WorkdirError(
                    f"cannot write bundle file '{relative}': {exc.strerror}"
                ) from exc
        entry = _checked_relative(layout.app, bundle.entry)
        return SessionDir(root=root, app=layout.app, work=layout.work, entry=entry)
    except BaseException:
        remove_session_dir(root)
        raise


def remove_session_dir(root: Path) -> None:
    """Delete the session directory and everything in it. Never raises."""

    def make_writable_and_retry(func: Any, path: str, exc_info: Any) -> None:
        # A workload may leave read-only directories behind (chmod 500):
        # open up the parent and the path itself, then retry once.
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(path), 0o700)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, 0o700)
                shutil.rmtree(path, ignore_errors=True)
            else:
                func(path)

    try:
        if root.is_symlink():
            root.unlink()
        elif root.exists():
            shutil.rmtree(root, onerror=make_writable_and_retry)
    except OSError as exc:
        log.error(
            "could not delete session directory %s: %s",
            root,
            exc,
            extra={"session_id": root.name},  # the directory is named after it
        )
