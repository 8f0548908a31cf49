"""Watch sessions across a daemon restart (`runnerd.session.watchrecord`,
`watchadopt`): the watch record in a real state dir (tmp), and a second
manager bringing the sessions back, against the in-process watch backend
with `watch_adopt` (a detach leaves its places; `adopt_watch` re-enters
them)."""

from __future__ import annotations

import json
import logging
import stat
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from runnerd.backend import EndIntent, ImageSpec
from runnerd.backend.watch import AgentLaunch, ChangeSet, Write
from runnerd.session.manager import SessionManager
from runnerd.session.statefile import StateDir
from runnerd.session.watchrecord import BLOCK, WatchRecords
from runnerd.session.watchsession import WatchSession

from .watchfake import FakeWatchBackend
from .watchkit import app, events, running_manager, runs, start, wait_until, watch_spec

SERVE = "echo up\nserve\n"
TOKEN = "s" * 32
AGENT = AgentLaunch("editor", ImageSpec("editor", "missing"), 7070, {"AGENT_TOKEN": TOKEN})


def _adopting() -> FakeWatchBackend:
    backend = FakeWatchBackend()
    backend.watch_adopt = True
    backend.detach_supported = True
    return backend


def _record(state: StateDir, session_id: str) -> dict[str, Any] | None:
    path = state.path / "watch" / f"{session_id}.json"
    try:  # not exists() then read: the writer thread may remove it in between
        return json.loads(path.read_bytes())  # type: ignore[no-any-return]
    except FileNotFoundError:
        return None


async def _on_disk(condition: Callable[[], bool]) -> None:
    """Wait until `condition()` holds of the state dir: the records are
    written by a worker thread, which wakes no one, so this polls."""
    with trio.fail_after(60):
        while True:
            if condition():
                return
            await trio.sleep(0.01)


async def _record_says(state: StateDir, session: WatchSession, **fields: object) -> dict[str, Any]:
    """Wait until the record on disk holds `fields`."""

    def holds() -> bool:
        record = _record(state, session.id)
        return record is not None and all(record.get(k) == v for k, v in fields.items())

    await _on_disk(holds)
    record = _record(state, session.id)
    assert record is not None
    return record


def _spec_with_secrets() -> Any:
    spec = watch_spec({"main.sh": SERVE}, (app("web", "main.sh", 8080),), agent=AGENT, token=TOKEN)
    creation = spec.watch.creation
    watch = replace(spec.watch, creation=replace(creation, env={"API_KEY": "k" * 24}))
    return replace(spec, watch=watch)


async def _detach(manager: SessionManager) -> None:
    with trio.fail_after(60):
        assert await manager.stop_all(EndIntent.DETACH) == []


async def test_the_record_is_private_holds_what_adoption_needs_and_is_removed_at_the_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    state = StateDir.open(tmp_path / "state")
    backend = _adopting()
    async with running_manager(backend, state=state) as manager:
        session = start(manager, _spec_with_secrets())
        await wait_until(session, lambda: session.serving)
        record = await _record_says(state, session, status="running")
        folder = state.path / "watch"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_IMODE((folder / f"{session.id}.json").stat().st_mode) == 0o600
        assert record["env"] == {"API_KEY": "k" * 24} and record["agent_token"] == TOKEN
        assert record["agent"]["env"] == {"AGENT_TOKEN": TOKEN}
        assert record["created_at"] == session.record.created_at
        assert [a["name"] for a in record["apps"]] == ["web"]
        await manager.stop(session.id)
        await _on_disk(lambda: _record(state, session.id) is None)
    assert "k" * 24 not in caplog.text and TOKEN not in caplog.text


async def test_the_record_follows_put_apps_generations_and_a_suspend(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    mock_clock.autojump_threshold = 0
    state = StateDir.open(tmp_path / "state")
    backend = _adopting()
    async with running_manager(backend, state=state, idle_seconds=60) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: session.serving)
        session.reload(None)
        await wait_until(session, lambda: runs(session)[-1] == (2, "started", "manual"))
        record = await _record_says(state, session, status="running")
        await session.replace_apps((app("app", "main.sh"), app("b", "main.sh", 9000)))
        await wait_until(session, lambda: [c.generation for c in session.app_channels()] == [3, 1])

        def counters() -> list[tuple[str, int, int]]:
            record = _record(state, session.id) or {"apps": []}
            return [(a["name"], a["slot"], a["generation"]) for a in record["apps"]]

        await _on_disk(lambda: counters() == [("app", 0, 3), ("b", 1, 1)])
        await wait_until(session, lambda: session.status["kind"] == "suspended")
        record = await _record_says(state, session, status="suspended")
        assert record["suspended_at"] == session.record.dormant_at
        assert record["checkpoint"] == session.checkpoint.saved()  # type: ignore[union-attr]


async def test_output_is_not_one_write_per_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[str] = []
    real = WatchRecords.write

    def counting(self: WatchRecords, session_id: str, data: bytes) -> None:
        writes.append(session_id)
        real(self, session_id, data)

    monkeypatch.setattr(WatchRecords, "write", counting)
    state = StateDir.open(tmp_path / "state")
    lines = "".join(f"echo {i}\n" for i in range(3 * BLOCK)) + "serve\n"
    async with running_manager(_adopting(), state=state) as manager:
        session = start(manager, watch_spec({"main.sh": lines}))
        channel = session.app_channel(None)
        assert channel is not None
        await wait_until(session, lambda: channel.ring.last_id >= 3 * BLOCK)

        def floor() -> int:
            record = _record(state, session.id)
            return -1 if record is None else int(record["apps"][0]["seq_floor"])

        # The floor on disk moves above every seq issued, in a few writes, not thousands.
        await _on_disk(lambda: floor() > channel.ring.last_id)
        assert len(writes) < 20


async def test_a_detached_running_session_is_adopted_with_its_ids_and_counters_continued(
    tmp_path: Path,
) -> None:
    state = StateDir.open(tmp_path / "state")
    backend = _adopting()
    async with running_manager(backend, state=state) as first:
        session = start(first, _spec_with_secrets())
        await wait_until(session, lambda: session.serving)
        await session.apply_changes(ChangeSet((Write("notes.txt", b"kept"),)))
        session.reload(None)
        await wait_until(session, lambda: runs(session)[-1] == (2, "started", "manual"))
        last_event = session.record.events.last_id
        channel = session.app_channel("web")
        assert channel is not None
        last_seq = channel.ring.last_id
        created_at = session.record.created_at
        await _detach(first)
    assert not backend.hosts[0].left  # left for the successor
    assert _record(state, session.id) is not None
    async with running_manager(backend, state=state) as second:
        assert await second.adopt_watches() == 1
        adopted = second.get(session.id)
        assert isinstance(adopted, WatchSession)
        await wait_until(adopted, lambda: adopted.serving)
        assert adopted.record.created_at == created_at
        assert adopted.status == {
            "kind": "running",
            "endpoints": [{"host": "", "port": 8080, "protocol": "tcp"}],
            "agent": {"host": "", "port": 7070, "protocol": "tcp", "token": TOKEN},
        }
        (spec,) = backend.adopted
        assert [a.name for a in spec.apps] == ["web"] and spec.agent == AGENT
        assert spec.creation.env == {"API_KEY": "k" * 24}
        # No new generation: the open one (2) goes on; ids continue above the floors.
        assert runs(adopted) == []
        assert adopted.record.events.first > last_event
        assert await adopted.read_workspace_file("notes.txt") == b"kept"
        adopted.reload("web")
        await wait_until(adopted, lambda: runs(adopted)[-1:] == [(3, "started", "manual")])
        assert runs(adopted) == [(2, "completed", 143), (3, "started", "manual")]
        web = adopted.app_channel("web")
        assert web is not None
        await wait_until(adopted, lambda: web.ring.last_id > last_seq + 1)
        assert web.ring.since(0).items[0][0] > last_seq  # a replay gap, never a reuse


async def test_a_place_gone_with_a_checkpoint_is_suspended_and_resumes_from_it(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    mock_clock.autojump_threshold = 0
    state = StateDir.open(tmp_path / "state")
    backend = _adopting()
    async with running_manager(backend, state=state, checkpoint_seconds=30) as first:
        session = start(first, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: session.serving)
        await session.apply_changes(ChangeSet((Write("notes.txt", b"saved"),)))
        await wait_until(session, lambda: session.checkpoint is not None)  # the periodic one
        await _record_says(state, session, checkpoint=session.checkpoint.saved())  # type: ignore[union-attr]
        await _detach(first)
    backend.places.clear()  # the pod went away while no daemon ran
    async with running_manager(backend, state=state) as second:
        await second.adopt_watches()
        adopted = second.get(session.id)
        assert isinstance(adopted, WatchSession)
        await wait_until(adopted, lambda: adopted.status["kind"] == "suspended")
        await second.resume(adopted.id)
        await wait_until(adopted, lambda: adopted.serving)
        assert backend.hosts[-1].files["notes.txt"] == b"saved"
        # Generation 2 (the write's) ended with its place: 3 is the resume's.
        assert runs(adopted) == [(3, "started", "resume")]


async def test_a_place_gone_without_a_checkpoint_fails_the_session(tmp_path: Path) -> None:
    state = StateDir.open(tmp_path / "state")
    backend = _adopting()
    async with running_manager(backend, state=state) as first:
        session = start(first, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: session.serving)
        await _detach(first)
    backend.places.clear()
    async with running_manager(backend, state=state) as second:
        await second.adopt_watches()
        adopted = second.get(session.id)
        assert adopted is not None
        with trio.fail_after(60):
            await adopted.wait_terminal()
        assert adopted.status == {
            "kind": "failed",
            "message": "the session's pod was gone after a restart",
        }
        await _on_disk(lambda: _record(state, session.id) is None)


async def test_a_suspended_session_comes_back_suspended_and_its_ttl_counts_from_its_suspend(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    mock_clock.autojump_threshold = 0
    state = StateDir.open(tmp_path / "state")
    backend = _adopting()
    limits = {"idle_seconds": 20, "suspended_ttl_seconds": 600}
    async with running_manager(backend, state=state, **limits) as first:
        session = start(first, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: session.status["kind"] == "suspended")
        suspended_at = trio.current_time()
        await _record_says(state, session, status="suspended")
        await trio.sleep(200)  # 200 s of its 600 pass before the restart
        await _detach(first)
    async with running_manager(backend, state=state, **limits) as second:
        await second.adopt_watches()
        adopted = second.get(session.id)
        assert isinstance(adopted, WatchSession)
        assert adopted.status == {"kind": "suspended"}
        assert [e for e in events(adopted) if e["type"] == "status"] == []  # nothing new said
        with trio.fail_after(3600):
            await adopted.wait_terminal()
        assert 599.9 <= trio.current_time() - suspended_at <= 602  # not 200 + 600
        assert second.get(session.id) is None  # evicted: gone


async def test_a_suspended_session_adopted_is_resumable(tmp_path: Path) -> None:
    state = StateDir.open(tmp_path / "state")
    backend = _adopting()
    async with running_manager(backend, state=state, idle_seconds=1) as first:
        session = start(first, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: session.status["kind"] == "suspended")
        await _record_says(state, session, status="suspended")
        await _detach(first)
    async with running_manager(backend, state=state, idle_seconds=600) as second:
        await second.adopt_watches()
        adopted = second.get(session.id)
        assert isinstance(adopted, WatchSession)
        await second.resume(adopted.id)
        await wait_until(adopted, lambda: adopted.serving)
        assert runs(adopted) == [(2, "started", "resume")]
        assert backend.specs[-1].checkpoint is not None


async def test_the_daemons_recovery_brings_watch_sessions_back_and_lookups_wait_for_it(
    tmp_path: Path,
) -> None:
    from types import SimpleNamespace

    from runnerd.daemon.adoption import recover_sessions

    state = StateDir.open(tmp_path / "state")
    backend = _adopting()
    async with running_manager(backend, state=state) as first:
        session = start(first, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: session.serving)
        await _detach(first)
    async with running_manager(backend, state=state) as second:
        second.begin_recovery()
        found: list[object] = []
        async with trio.open_nursery() as nursery:

            async def look_up() -> None:
                found.append(await second.find(session.id))  # waits for recovery

            nursery.start_soon(look_up)
            await trio.sleep(0.1)
            assert found == []
            await recover_sessions(SimpleNamespace(backend=backend, sessions=second))  # type: ignore[arg-type]
        assert isinstance(found[0], WatchSession) and found[0].id == session.id
        await wait_until(found[0], lambda: found[0].serving)  # type: ignore[union-attr]


async def test_an_adopted_self_watching_apps_open_generation_stays_open(tmp_path: Path) -> None:
    from runnerd.session.appsink import AppReport

    def kernel(session: WatchSession, event: str, **payload: object) -> None:
        channel = session.app_channel("k")
        assert channel is not None
        AppReport(session, channel).debug({"kind": "event", "event": event, "payload": payload})

    state = StateDir.open(tmp_path / "state")
    backend = _adopting()
    spec = watch_spec({"main.sh": "selfwatch\nserve\n"}, (app("k", "main.sh"),))
    async with running_manager(backend, state=state) as first:
        session = start(first, spec)
        await wait_until(session, lambda: session.serving)
        kernel(session, "Kernel.Starting")
        await _on_disk(lambda: (_record(state, session.id) or {}).get("apps", [{}])[0].get("open"))
        await _detach(first)
    async with running_manager(backend, state=state) as second:
        await second.adopt_watches()
        adopted = second.get(session.id)
        assert isinstance(adopted, WatchSession)
        await wait_until(adopted, lambda: adopted.serving)
        kernel(adopted, "Kernel.Starting")  # a frame replayed from before: nothing new
        assert runs(adopted) == []
        kernel(adopted, "Kernel.Stopped", exitCode=0)
        kernel(adopted, "Kernel.Starting")
        assert runs(adopted) == [(1, "completed", 0), (2, "started", "watch")]


async def test_put_apps_on_an_adopted_fixed_place_reopens_it(tmp_path: Path) -> None:
    state = StateDir.open(tmp_path / "state")
    backend = _adopting()
    backend.watch_fixed_apps = True
    async with running_manager(backend, state=state) as first:
        session = start(first, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: session.serving)
        await _detach(first)
    async with running_manager(backend, state=state) as second:
        await second.adopt_watches()
        adopted = second.get(session.id)
        assert isinstance(adopted, WatchSession)
        await wait_until(adopted, lambda: adopted.serving)
        await adopted.replace_apps((app("app", "main.sh"), app("b", "main.sh")))
        await wait_until(adopted, lambda: runs(adopted, "b") == [(1, "started", "resume")])
        assert runs(adopted, "app") == [(1, "completed", 143), (2, "started", "resume")]
        assert backend.hosts[0].left and [a.name for a in backend.specs[-1].apps] == ["app", "b"]
        record = await _record_says(state, adopted)
        await _on_disk(lambda: len((_record(state, adopted.id) or record)["apps"]) == 2)
