"""Replace a small file atomically: what a successor daemon reads after a crash.

Owns `write_atomic`: the bytes go to a temporary file beside the target
(`.<name>.tmp`, mode 0600), are written whole and fsynced, then renamed over
the target, so a reader finds the old file or the new one, never a torn one,
and a host crash after the rename keeps the new one. Used for the state
directory's files (`runnerd.session.statefile`, `runnerd.kube.giveup`).
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` (mode 0600).

    Raises:
        OSError: the directory is missing or not writable, the disk is full...;
            `path` is then unchanged.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:  # os.write may write less than asked
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
