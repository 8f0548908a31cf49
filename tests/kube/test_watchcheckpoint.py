"""runnerd.kube.watchcheckpoint: snapshots kept 0600 in the state dir, found
again from what `saved()` wrote, and nothing outside that directory taken."""

from __future__ import annotations

import stat
from pathlib import Path

import trio

from runnerd.kube.watchcheckpoint import (
    FileCheckpoint,
    checkpoint_dir,
    load_checkpoint,
    new_checkpoint_path,
)


def test_watchcheckpoint_a_saved_checkpoint_is_found_again(tmp_path: Path) -> None:
    path = new_checkpoint_path(tmp_path, "abc")
    assert stat.S_IMODE(checkpoint_dir(tmp_path).stat().st_mode) == 0o700
    path.write_bytes(b"tar")
    saved = FileCheckpoint(path, 2, 3).saved()
    assert saved == {"path": str(path), "files": 2, "bytes": 3}
    assert load_checkpoint(tmp_path, saved) == FileCheckpoint(path, 2, 3)


def test_watchcheckpoint_a_garbled_moved_or_gone_one_is_none(tmp_path: Path) -> None:
    inside = new_checkpoint_path(tmp_path, "abc")
    outside = tmp_path / "elsewhere.tar"
    outside.write_bytes(b"x")
    link = checkpoint_dir(tmp_path) / "abc-link.tar"
    link.symlink_to(outside)
    for saved in (
        {"path": str(inside), "files": 1, "bytes": 1},  # gone
        {"path": str(outside), "files": 1, "bytes": 1},  # not in the directory
        {"path": str(link), "files": 1, "bytes": 1},  # a symlink out of it
        {"path": str(inside), "files": "1", "bytes": 1},
        {"path": str(inside), "files": True, "bytes": -1},
        {},
    ):
        assert load_checkpoint(tmp_path, saved) is None


async def test_watchcheckpoint_discard_removes_it_and_is_idempotent(tmp_path: Path) -> None:
    path = new_checkpoint_path(tmp_path, "abc")
    path.write_bytes(b"tar")
    checkpoint = FileCheckpoint(path, 1, 3)
    with trio.fail_after(10):
        await checkpoint.discard()
        await checkpoint.discard()
    assert not path.exists()
