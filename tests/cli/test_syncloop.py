"""`runnerd watch`'s sync task on a real directory with a real watcher
(watchfiles, inotify); the daemon's side is a recorder of change sets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from runnerd.client.bundle import collect_bundle
from runnerd.client.sync import SyncState
from runnerd.client.syncloop import NotRunning, RateLimited, Syncer, SyncRefused


class Recorder:
    """A SyncTarget: records what it is sent; `answers` are raised in turn first."""

    def __init__(self, answers: list[Exception] | None = None) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.answers = answers or []
        self.waits: list[bool] = []
        self.on_post: list[Any] = []
        self._changed = trio.Event()

    async def post_changes(self, body: dict[str, Any]) -> None:
        if self.on_post:
            self.on_post.pop(0)()
        if self.answers:
            raise self.answers.pop(0)
        self.bodies.append(body)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_running(self, refused: bool) -> None:
        self.waits.append(refused)
        await trio.lowlevel.checkpoint()

    def note(self, text: str) -> None:
        self.notes.append(text)

    async def until(self, count: int) -> list[dict[str, Any]]:
        with trio.fail_after(10):
            while len(self.bodies) < count:
                await self._changed.wait()
        return self.bodies


def project(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    root.mkdir()
    (root / "main.sh").write_text("echo one")
    (root / "keep.txt").write_text("k")
    (root / ".gitignore").write_text("*.log\n")
    return root


async def test_syncloop_an_edit_and_a_delete_reach_the_workspace(tmp_path: Path) -> None:
    root = project(tmp_path)
    target = Recorder()
    syncer = Syncer(root, SyncState.seed_from_bundle(collect_bundle(root)), target, None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(syncer.run)
        await syncer_idle(syncer)
        assert target.bodies == []  # the bundle is the first state: nothing to write
        (root / "debug.log").write_text("ignored")
        (root / "main.sh").write_text("echo two")
        (root / "keep.txt").unlink()
        bodies = await target.until(1)
        nursery.cancel_scope.cancel()
    assert bodies == [{"write": [{"path": "main.sh", "content": "echo two"}],
                       "delete": ["keep.txt"]}]  # fmt: skip
    assert "synced: wrote main.sh; deleted keep.txt" in target.notes


async def syncer_idle(syncer: Syncer) -> None:
    """Until the watcher is in place and the first pass has run."""
    with trio.fail_after(10):
        await syncer.ready.wait()


async def test_syncloop_a_burst_of_saves_is_one_change_set(tmp_path: Path) -> None:
    root = project(tmp_path)
    target = Recorder()
    syncer = Syncer(root, SyncState.seed_from_bundle(collect_bundle(root)), target, None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(syncer.run)
        await syncer_idle(syncer)
        for i in range(20):
            (root / "main.sh").write_text(f"echo {i}")
        bodies = await target.until(1)
        nursery.cancel_scope.cancel()
    assert bodies == [{"write": [{"path": "main.sh", "content": "echo 19"}]}]


async def test_syncloop_rate_limited_changes_coalesce_and_none_is_lost(tmp_path: Path) -> None:
    root = project(tmp_path)
    # The first send is refused 429; meanwhile the file changes again and
    # another one appears: the retry carries the latest of both, once.
    target = Recorder([RateLimited(0.0)])
    target.on_post.append(lambda: (root / "b.txt").write_text("b"))
    syncer = Syncer(root, SyncState.seed_from_bundle(collect_bundle(root)), target, None)
    (root / "main.sh").write_text("echo two")
    with trio.fail_after(10):
        await syncer.sync_once()
    assert target.bodies == [{"write": [{"path": "b.txt", "content": "b"},
                                        {"path": "main.sh", "content": "echo two"}]}]  # fmt: skip
    assert any("rate limited" in note for note in target.notes)


async def test_syncloop_not_running_waits_for_the_workspace_then_sends(tmp_path: Path) -> None:
    root = project(tmp_path)
    target = Recorder([NotRunning()])
    syncer = Syncer(root, SyncState.seed_from_bundle(collect_bundle(root)), target, None)
    (root / "main.sh").write_text("echo two")
    with trio.fail_after(10):
        await syncer.sync_once()
    assert target.waits == [False, True, False]
    assert target.bodies == [{"write": [{"path": "main.sh", "content": "echo two"}]}]


async def test_syncloop_a_refused_set_is_said_once_and_not_resent(tmp_path: Path) -> None:
    root = project(tmp_path)
    target = Recorder([SyncRefused("a write's parent is a file (409 path_conflict)")])
    syncer = Syncer(root, SyncState.seed_from_bundle(collect_bundle(root)), target, None)
    (root / "main.sh").write_text("echo two")
    with trio.fail_after(10):
        await syncer.sync_once()
        await syncer.sync_once()
    assert target.bodies == []
    assert target.notes == [
        "not synced (wrote main.sh): a write's parent is a file (409 path_conflict)"
    ]
    (root / "main.sh").write_text("echo three")  # changed again: sent again
    with trio.fail_after(10):
        await syncer.sync_once()
    assert target.bodies == [{"write": [{"path": "main.sh", "content": "echo three"}]}]
