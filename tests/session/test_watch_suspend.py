"""Idle suspend, checkpoints, resume and eviction of watch sessions, under
trio's MockClock (autojump): the figures the contract gives (suspended
within 2 s of `idle_seconds`, a checkpoint every `checkpoint_seconds`,
gone after `suspended_ttl_seconds`) checked on the fake clock."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from runnerd.backend import Limits, RunSpec
from runnerd.backend.watch import ChangeSet, Write
from runnerd.session.registry import RegistryFull
from runnerd.watch.errors import WatchError

from .watchfake import FakeWatchBackend
from .watchkit import events, running_manager, runs, start, statuses, wait_until, watch_spec

SERVE = "echo up\nserve\n"


@pytest.fixture
def clock(mock_clock: trio.testing.MockClock) -> trio.testing.MockClock:
    """The test's clock (pytest-trio reads it from the test's own arguments)."""
    mock_clock.autojump_threshold = 0
    return mock_clock


def _kind(session: object) -> str:
    return session.status["kind"]  # type: ignore[attr-defined, no-any-return]


async def test_an_idle_session_is_suspended_within_2_s_with_its_processes_stopped(
    clock: trio.testing.MockClock,
) -> None:
    backend = FakeWatchBackend()
    async with running_manager(backend, idle_seconds=20) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: _kind(session) == "running")
        running_at = trio.current_time()
        await wait_until(session, lambda: _kind(session) == "suspended")
        assert 20 <= trio.current_time() - running_at <= 22
        host = backend.hosts[0]
        assert host.left and host.running == {"app": 0}
        assert session.checkpoint is host.checkpoints[-1]
        with pytest.raises(WatchError) as refused:
            session.require_running()
        assert (refused.value.status_hint, refused.value.code) == (409, "not_running")
        with pytest.raises(WatchError):
            await session.list_workspace()
        assert manager.watch_live_count() == 0


async def test_a_subscriber_holds_the_session_up_and_idle_counts_from_its_leaving(
    clock: trio.testing.MockClock,
) -> None:
    backend = FakeWatchBackend()
    async with running_manager(backend, idle_seconds=20) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: _kind(session) == "running")
        with session.subscribed():
            await trio.sleep(100)
            assert _kind(session) == "running"
        left_at = trio.current_time()
        await wait_until(session, lambda: _kind(session) == "suspended")
        assert 20 <= trio.current_time() - left_at <= 22


async def test_resume_restores_the_workspace_and_restarts_every_app_with_resume(
    clock: trio.testing.MockClock,
) -> None:
    backend = FakeWatchBackend()
    async with running_manager(backend, idle_seconds=20) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: _kind(session) == "running")
        await session.apply_changes(ChangeSet((Write("notes.txt", b"\x00\xffbinary"),)))
        await wait_until(session, lambda: _kind(session) == "suspended")
        before = session.checkpoint
        await manager.resume(session.id)
        assert _kind(session) == "starting"
        await wait_until(session, lambda: _kind(session) == "running")
        assert statuses(session)[-3:] == ["suspended", "starting", "running"]
        assert await session.read_workspace_file("notes.txt") == b"\x00\xffbinary"
        assert backend.specs[1].checkpoint is before
        assert runs(session)[-1] == (3, "started", "resume")  # 1 initial, 2 watch, 3 resume
        with pytest.raises(WatchError) as refused:
            await manager.resume(session.id)
        assert (refused.value.status_hint, refused.value.code) == (404, "not_suspended")


async def test_resume_is_refused_at_the_watch_cap(clock: trio.testing.MockClock) -> None:
    backend = FakeWatchBackend()
    async with running_manager(backend, idle_seconds=20, max_sessions=8) as manager:
        manager.reconfigure(
            watch=manager._watch.limits.__class__(enabled=True, idle_seconds=20, max_sessions=1)
        )
        first = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(first, lambda: _kind(first) == "suspended")
        second = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(second, lambda: _kind(second) == "running")
        assert manager.watch_live_count() == 1
        with pytest.raises(WatchError) as refused:
            await manager.resume(first.id)
        assert (refused.value.status_hint, refused.value.code) == (409, "too_many_watch_sessions")
        assert _kind(first) == "suspended"


async def test_a_checkpoint_every_period_keeps_only_the_latest(
    clock: trio.testing.MockClock,
) -> None:
    backend = FakeWatchBackend()
    async with running_manager(backend, checkpoint_seconds=5) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: _kind(session) == "running")
        await trio.sleep(16)
        taken = backend.hosts[0].checkpoints
        assert len(taken) == 3
        assert [c.discarded for c in taken] == [True, True, False]
        assert session.checkpoint is taken[-1]
        await manager.stop(session.id)
        assert taken[-1].discarded  # the session is gone: so is its last one


async def test_a_failed_checkpoint_leaves_the_session_running(
    clock: trio.testing.MockClock,
) -> None:
    """Untouched: no app is stopped for a suspend that cannot happen, and
    the client is told why on the stream; it tries again after the next
    idle period."""
    backend = FakeWatchBackend()
    backend.checkpoint_fails = True
    async with running_manager(backend, idle_seconds=20) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: _kind(session) == "running")
        why = "not suspended while idle: the workspace checkpoint failed: " + (
            "the workspace is too large to checkpoint"
        )

        def told() -> int:
            return sum(e.get("message") == why for e in events(session))

        await wait_until(session, lambda: told() >= 2)  # two idle periods
        assert _kind(session) == "running"
        assert runs(session) == [(1, "started", "initial")]  # never stopped
        assert "suspended" not in statuses(session)
        session.require_running()


async def test_delete_of_a_suspended_session_stops_it(clock: trio.testing.MockClock) -> None:
    backend = FakeWatchBackend()
    async with running_manager(backend, idle_seconds=20) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: _kind(session) == "suspended")
        checkpoint = session.checkpoint
        await manager.stop(session.id)
        assert session.status == {"kind": "stopped"}
        assert checkpoint is not None and checkpoint.discarded


async def test_a_suspended_session_is_gone_after_its_ttl(clock: trio.testing.MockClock) -> None:
    backend = FakeWatchBackend()
    async with running_manager(backend, idle_seconds=20, suspended_ttl_seconds=100) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: _kind(session) == "suspended")
        suspended_at = trio.current_time()
        checkpoint = session.checkpoint
        with trio.fail_after(600):
            await session.wait_terminal()
        assert 100 <= trio.current_time() - suspended_at <= 102
        assert manager.get(session.id) is None
        assert checkpoint is not None and checkpoint.discarded


async def test_a_full_registry_evicts_whichever_stopped_being_live_longest_ago(
    clock: trio.testing.MockClock,
) -> None:
    backend = FakeWatchBackend()
    async with running_manager(backend, max_sessions=3, idle_seconds=20) as manager:
        older = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(older, lambda: _kind(older) == "suspended")
        newer = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(newer, lambda: _kind(newer) == "suspended")
        ended = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(ended, lambda: _kind(ended) == "running")
        await manager.stop(ended.id)  # terminal, but after both suspends
        fourth = start(manager, watch_spec({"main.sh": SERVE}))
        assert manager.get(older.id) is None
        assert manager.get(newer.id) is newer and manager.get(ended.id) is ended
        with trio.fail_after(60):
            await older.wait_terminal()
        assert older.checkpoint is None  # discarded with it
        await wait_until(fourth, lambda: _kind(fourth) == "running")
        fifth = start(manager, watch_spec({"main.sh": SERVE}))
        assert manager.get(newer.id) is None and manager.get(ended.id) is ended
        await wait_until(fifth, lambda: _kind(fifth) == "running")
        with pytest.raises(RegistryFull):
            for _ in range(3):
                start(manager, watch_spec({"main.sh": SERVE}))


async def test_a_run_session_answers_the_watch_members_as_a_run_session(
    clock: trio.testing.MockClock,
) -> None:
    from .backends import InProcessBackend

    backend = InProcessBackend()
    async with running_manager(backend) as manager:  # type: ignore[arg-type]
        spec = RunSpec.create(
            session_id="run-1",
            image=__import__("runnerd.backend", fromlist=["ImageSpec"]).ImageSpec("sh", "missing"),
            env={},
            limits=Limits("1", "1Gi", "1Gi", 60),
        )
        session = manager.start(spec)
        assert session.mode == "run" and session.agent_name is None
        assert session.app_channels() == [] and session.app_channel(None) is None
        with pytest.raises(WatchError) as refused:
            session.require_running()
        assert (refused.value.status_hint, refused.value.code) == (409, "not_a_watch_session")
        with pytest.raises(WatchError) as not_suspended:
            await manager.resume("run-1")
        assert not_suspended.value.code == "not_suspended"


async def test_the_ttl_counts_afresh_from_a_resume(clock: trio.testing.MockClock) -> None:
    backend = FakeWatchBackend()
    async with running_manager(backend, idle_seconds=20) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}, ttl_s=100))
        await wait_until(session, lambda: _kind(session) == "suspended")
        await trio.sleep(200)  # past the TTL counted from creation
        await manager.resume(session.id)
        resumed_at = trio.current_time()
        with session.subscribed():  # held up: only the TTL can end it now
            with trio.fail_after(600):
                await session.wait_terminal()
        assert 100 <= trio.current_time() - resumed_at <= 101
        assert session.status == {
            "kind": "failed",
            "message": "ttl: session exceeded its time limit of 100 s",
        }


async def test_a_stop_while_the_workspace_is_being_made_is_stopped(
    clock: trio.testing.MockClock,
) -> None:
    backend = FakeWatchBackend()
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await manager.stop(session.id)  # before the first checkpoint of open_watch
        assert session.status == {"kind": "stopped"}
        assert statuses(session) == ["starting", "stopped"]
