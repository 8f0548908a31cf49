"""`Trash`: a finished session's directory leaves the workdir's session
names at once and is removed from the trash after; nothing is left once
`run` returns, however it ends."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from runnerd.local.trash import Trash
from runnerd.local.workdir import TRASH_NAME


def make_session_dir(workdir: Path, name: str) -> Path:
    root = workdir / name
    (root / "app").mkdir(parents=True)
    (root / "work").mkdir()
    (root / "app" / "main.sh").write_text("exec sleep 3600\n")
    (root / "work" / "locked").mkdir(mode=0o000)  # a workload may leave this
    return root


async def test_a_discarded_directory_is_moved_out_then_removed(tmp_path: Path) -> None:
    roots = [make_session_dir(tmp_path, f"session{i:05d}") for i in range(20)]
    trash = Trash(tmp_path)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(trash.run)
            assert (tmp_path / TRASH_NAME).stat().st_mode & 0o777 == 0o700
            for root in roots:
                await trash.discard(root)
                assert not root.exists()  # out of the session names at once
            trash.close()
    assert os.listdir(tmp_path) == []  # every one removed, and the trash itself


@pytest.mark.parametrize("rm", ["/bin/false", "/no/such/rm"])
async def test_what_rm_cannot_remove_is_removed_after(tmp_path: Path, rm: str) -> None:
    # As for a daemon that is not root and a workload's `chmod 000` directory.
    roots = [make_session_dir(tmp_path, f"session{i:05d}") for i in range(5)]
    trash = Trash(tmp_path, rm=rm)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(trash.run)
            for root in roots:
                await trash.discard(root)
            trash.close()
    assert os.listdir(tmp_path) == []


async def test_without_run_a_discarded_directory_is_removed_in_place(tmp_path: Path) -> None:
    root = make_session_dir(tmp_path, "aaaabbbbcccc")
    await Trash(tmp_path).discard(root)
    assert os.listdir(tmp_path) == []


async def test_a_discard_after_close_is_removed_in_place(tmp_path: Path) -> None:
    trash = Trash(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(trash.run)
        trash.close()
    root = make_session_dir(tmp_path, "aaaabbbbcccc")
    await trash.discard(root)
    assert os.listdir(tmp_path) == []


async def test_cancelled_run_still_removes_what_it_was_given(tmp_path: Path) -> None:
    roots = [make_session_dir(tmp_path, f"session{i:05d}") for i in range(20)]
    trash = Trash(tmp_path)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(trash.run)
            for root in roots:
                await trash.discard(root)
            nursery.cancel_scope.cancel()  # before the removers had their turn
    assert os.listdir(tmp_path) == []


async def test_an_unusable_trash_falls_back_to_removing_in_place(tmp_path: Path) -> None:
    (tmp_path / TRASH_NAME).write_text("a file where the trash should be")
    trash = Trash(tmp_path)
    root = make_session_dir(tmp_path, "aaaabbbbcccc")
    async with trio.open_nursery() as nursery:
        await nursery.start(trash.run)
        await trash.discard(root)
        trash.close()
    assert os.listdir(tmp_path) == [TRASH_NAME]  # the file is not the trash's to remove
