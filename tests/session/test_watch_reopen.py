"""`PUT /apps` on a backend whose places hold a fixed app set: a reopen
(`runnerd.session.reopen`), against the in-process watch backend with
`watch_fixed_apps` (its hosts run exactly the set they were opened with)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from runnerd.backend import StartError
from runnerd.backend.watch import AppLaunch, ChangeSet, Write
from runnerd.contract import PortMapping
from runnerd.session.watchsession import WatchSession
from runnerd.watch.errors import WatchError

from .watchfake import FakeWatchBackend
from .watchkit import app, events, running_manager, runs, start, statuses, wait_until, watch_spec

SERVE = "echo up\nserve\n"


def _fixed() -> FakeWatchBackend:
    backend = FakeWatchBackend()
    backend.watch_fixed_apps = True
    return backend


async def _running(session: WatchSession) -> None:
    await wait_until(session, lambda: session.serving)


async def test_put_apps_reopens_with_the_new_set_and_the_workspace_kept() -> None:
    backend = _fixed()
    spec = watch_spec({"main.sh": SERVE}, (app("a", "main.sh"), app("b", "main.sh")))
    async with running_manager(backend) as manager:
        session = start(manager, spec)
        await _running(session)
        await session.apply_changes(ChangeSet((Write("notes.txt", b"kept"),)))
        kept = session.app_channel("a")
        assert kept is not None
        await wait_until(session, lambda: len(kept.ring.since(0).items) >= 1)
        names = await session.replace_apps((app("c", "main.sh", 8080), app("a", "main.sh")))
        # The 202: GET shows the new set.
        assert names == ["c", "a"] and [c.name for c in session.app_channels()] == ["c", "a"]
        assert session.app_channel("a") is kept and session.app_channel("b") is None
        await _running(session)
        await wait_until(session, lambda: runs(session, "a")[-1] == (2, "started", "resume"))
        await wait_until(session, lambda: runs(session, "c") == [(1, "started", "resume")])
        first, second = backend.hosts
        assert first.left and not second.left
        assert first.running == {"a": 0, "b": 0}
        assert backend.specs[1].apps == (
            AppLaunch("c", "main.sh", "tty", (PortMapping(port=8080, protocol="tcp"),), 1),
            AppLaunch("a", "main.sh", "tty", (), 0),
        )
        assert backend.specs[1].checkpoint is first.checkpoints[-1]  # taken with the apps stopped
        assert second.files["notes.txt"] == b"kept"
        assert await session.read_workspace_file("notes.txt") == b"kept"
        assert runs(session, "b") == [(1, "started", "initial"), (1, "completed", 143)]
        assert runs(session, "a")[:3] == [
            (1, "started", "initial"),
            (1, "completed", 143),
            (2, "started", "resume"),
        ]
        assert kept.ring.since(0).items[0][1] == b"\x00up\n"  # its output of before, kept
        # The status never left `running`; it is republished for the new ports.
        endpoint = {"host": "", "port": 8080, "protocol": "tcp"}
        await wait_until(session, lambda: session.status.get("endpoints") == [endpoint])
        assert statuses(session) == ["starting", "running", "running"]
        assert not [e for e in events(session) if e.get("reason", "").startswith("app ")]


async def test_workspace_routes_during_a_reopen_wait_for_the_new_host(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0
    backend = _fixed()
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await _running(session)
        backend.open_delay_s = 30.0  # the new place takes a while
        listed: list[str] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.replace_apps, (app("app", "main.sh"), app("b", "main.sh")))
            await wait_until(session, lambda: len(session.app_channels()) == 2)
            session.require_running()  # still `running`: not refused

            async def write_then_list() -> None:
                await session.apply_changes(ChangeSet((Write("late.txt", b"x"),)))
                listed.extend(f.path for f in await session.list_workspace())

            nursery.start_soon(write_then_list)
            await trio.sleep(10)
            assert listed == [] and len(backend.hosts) == 1  # waiting, not 409
        assert len(backend.hosts) == 2 and "late.txt" in backend.hosts[1].files
        assert listed == ["late.txt", "main.sh"]
        assert statuses(session) == ["starting", "running"]


async def test_a_failed_checkpoint_refuses_the_put_and_changes_nothing() -> None:
    backend = _fixed()
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await _running(session)
        backend.hosts[0].checkpoint_fails = True
        with pytest.raises(WatchError) as refused:
            await session.replace_apps((app("other", "main.sh"),))
        assert (refused.value.status_hint, refused.value.code) == (409, "checkpoint_failed")
        assert "the workspace is too large to checkpoint" in refused.value.message
        assert [c.name for c in session.app_channels()] == ["app"]
        assert len(backend.hosts) == 1 and session.serving
        assert runs(session) == [(1, "started", "initial")]
        assert backend.hosts[0].running == {"app": 1}


async def test_a_reopen_that_cannot_open_fails_the_session_with_its_stage() -> None:
    backend = _fixed()
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await _running(session)
        backend.open_fails = StartError("provision", "the pod could not be created")
        await session.replace_apps((app("app", "main.sh"), app("b", "main.sh")))
        with trio.fail_after(60):
            await session.wait_terminal()
        assert session.status == {
            "kind": "failed",
            "message": "provision: the pod could not be created",
        }
        with pytest.raises(WatchError) as refused:
            await session.list_workspace()
        assert refused.value.code == "not_running"


async def test_a_stop_during_a_reopen_releases_what_waits_for_it(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0
    backend = _fixed()
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await _running(session)
        backend.open_delay_s = 600.0
        refusals: list[str] = []

        async def list_files() -> None:
            with pytest.raises(WatchError) as refused:
                await session.list_workspace()
            refusals.append(refused.value.code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.replace_apps, (app("b", "main.sh"),))
            await wait_until(session, lambda: session.app_channel("b") is not None)
            nursery.start_soon(list_files)
            await trio.sleep(1)
            await manager.stop(session.id)
        assert session.status == {"kind": "stopped"}
        assert refusals == ["not_running"]
