"""A Kubernetes watch session's checkpoints: workspace snapshots kept in the
state dir, so they outlive the pod (a suspend deletes it) and the daemon (a
successor resumes from them).

Owns where a checkpoint lives (`<state_dir>/watch-checkpoints/`, 0700; each
snapshot a 0600 tar there, named `<session id>-<16 hex>.tar`, fresh per
snapshot), `FileCheckpoint` (the `runnerd.backend.watch.Checkpoint` of one
such file: its counts, `discard`, `saved()`), and reading a saved one back
(`load_checkpoint`): only a path inside that directory, a regular file no
symlink leads to, with the counts it was saved with, is taken; anything
else is None and logged (a hand-edited or stale record never makes the
daemon read outside its own directory).

The tar is what the workspace API's `GET /workspace/snapshot` streams (the
listed files, ustar); `workspaceapi` writes it and seeds a new
pod from it. Nothing here holds a secret: a snapshot is the session's files.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

import trio

log = logging.getLogger(__name__)

DIR_NAME = "watch-checkpoints"


def checkpoint_dir(state_dir: Path) -> Path:
    """`<state_dir>/watch-checkpoints`, made 0700 if missing (blocking: call
    it in a thread)."""
    path = state_dir / DIR_NAME
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def new_checkpoint_path(state_dir: Path, session_id: str) -> Path:
    """A fresh file name for one snapshot of `session_id` (not created)."""
    return checkpoint_dir(state_dir) / f"{session_id}-{secrets.token_hex(8)}.tar"


@dataclass(frozen=True)
class FileCheckpoint:
    """One snapshot tar in the checkpoint directory (see the module docstring)."""

    path: Path
    files: int
    size_bytes: int

    async def discard(self) -> None:
        """Remove the tar; idempotent, never raises (a failure is logged)."""
        try:
            await trio.to_thread.run_sync(self.path.unlink, True)
        except OSError as exc:
            log.warning("could not remove checkpoint %s: %s", self.path, exc)

    def saved(self) -> dict[str, object]:
        """Its path and counts, for the core's watch record (no secret)."""
        return {"path": str(self.path), "files": self.files, "bytes": self.size_bytes}


def load_checkpoint(state_dir: Path, saved: dict[str, object]) -> FileCheckpoint | None:
    """The checkpoint `saved` describes, or None (logged) when it is not a
    regular file directly in the checkpoint directory or its counts are
    garbled. Blocking (a stat): cheap, called once per suspended session at
    start."""
    path, files, size = saved.get("path"), saved.get("files"), saved.get("bytes")
    if not (isinstance(path, str) and _count(files) and _count(size)):
        log.warning("a saved checkpoint is garbled: %r", sorted(saved))
        return None
    where = Path(path)
    if where.parent != state_dir / DIR_NAME or not where.name.endswith(".tar"):
        log.warning("a saved checkpoint is outside %s: %s", state_dir / DIR_NAME, where)
        return None
    try:
        mode = where.lstat().st_mode
    except OSError as exc:
        log.warning("a saved checkpoint is gone: %s (%s)", where, exc.strerror)
        return None
    if not stat.S_ISREG(mode):
        log.warning("a saved checkpoint is not a regular file: %s", where)
        return None
    assert isinstance(files, int) and isinstance(size, int)  # `_count` checked
    return FileCheckpoint(where, files, size)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
