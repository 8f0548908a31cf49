"""SessionManager end to end against the real local backend (`sh` under a PTY),
plus a few test backends where only timing, a start that hangs, or a
misbehaving backend is under test (see backends.py)."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from runnerd.backend import (
    Backend,
    BundleSpec,
    EndIntent,
    Exited,
    Failed,
    ImageSpec,
    Limits,
    RunSpec,
    Sink,
)
from runnerd.contract import RunStatus, exited, failed, running
from runnerd.local import LocalBackend
from runnerd.local.settings import LocalConfig, RuntimeConfig
from runnerd.session.manager import ManagerClosed, Session, SessionManager, StopFailed
from runnerd.session.registry import ByteRing, EventRing, RegistryFull
from runnerd.session.session import SessionPhase
from tests.escapes import HOST_PID, host_pid

from .backends import (
    BrokenTeardownBackend,
    CrashingBackend,
    FailingStartBackend,
    HeldStartBackend,
    InProcessBackend,
    RoutingBackend,
    UnstoppableBackend,
)

_ids = iter(range(1_000_000))


@pytest.fixture
def local(tmp_path: Path) -> LocalBackend:
    """The real local backend with an `sh` runtime, on a temp workdir."""
    runtimes = {"sh": RuntimeConfig(name="sh", command=("/bin/sh", "{entry}"))}
    config = LocalConfig(workdir=tmp_path / "sessions", stop_grace_s=0.5, runtimes=runtimes)
    return LocalBackend(config)


def build_spec(script: str = "exit 0", *, image: str = "sh", ttl_s: float = 60.0) -> RunSpec:
    return RunSpec.create(
        session_id=f"s{next(_ids):011d}",
        image=ImageSpec(image, "missing"),
        env={"GREETING": "hello"},
        limits=Limits("50m", "100Mi", "512Mi", ttl_s),
        bundle=BundleSpec("main.sh", (("main.sh", script),)),
    )


@asynccontextmanager
async def open_manager(backend: Backend, **options: Any) -> AsyncIterator[SessionManager]:
    settings: dict[str, Any] = {
        "max_sessions": 8,
        "exit_ttl_s": 3600.0,
        "replay_buffer_bytes": 5_000_000,
    }
    settings.update(options)
    manager = SessionManager(backend, **settings)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        try:
            yield manager
        finally:
            await manager.stop_all()
            nursery.cancel_scope.cancel()


def status_kinds(session: Session) -> list[str]:
    return [e["status"]["kind"] for _, e in session.events.since(0).items if e["type"] == "status"]


def pty_text(session: Session) -> str:
    return b"".join(chunk for _, chunk in session.pty.since(0).items).decode()


async def wait_for(session: Session, predicate: Callable[[Session], bool]) -> None:
    """Wait, via the session's own wake-ups, until `predicate(session)` holds."""
    while not predicate(session):
        if session.is_terminal:
            raise AssertionError(f"session ended {session.status} before the condition held")
        await session.wait_change()


async def wait_terminal(session: Session, timeout_s: float = 10) -> RunStatus:
    with trio.fail_after(timeout_s):
        await session.wait_terminal()
    return session.status


def is_running(session: Session) -> bool:
    return session.status["kind"] == "running"


def assert_gone(proc: trio.Process) -> None:
    assert proc.returncode is not None
    assert_pid_gone(proc.pid)


def assert_pid_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)


# The workload prints its token (`$$` is the PID namespace's number, and the
# host pid is not visible inside), then becomes `sleep` (same pid, group).
SLEEPER = f"{HOST_PID}; echo $HOST_PID; exec sleep 1000"


async def workload_pid(session: Session) -> int:
    with trio.fail_after(10):
        await wait_for(session, lambda s: "\n" in pty_text(s))
    return host_pid(pty_text(session).split()[0])


# --------------------------------------------------------------------------
# Lifecycle
# --------------------------------------------------------------------------


async def test_session_runs_starting_running_then_exited_with_code(local: LocalBackend) -> None:
    async with open_manager(local) as manager:
        session = manager.start(build_spec('echo "$GREETING from sh"; exit 3'))
        # start() returns before the backend has done anything.
        assert session.status == {"kind": "starting"}
        assert manager.get(session.id) is session
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", session.created_at)

        assert await wait_terminal(session) == exited(3)
        assert status_kinds(session) == ["starting", "running", "exited"]
        assert pty_text(session) == "hello from sh\r\n"
        assert session.exited_at is not None and session.exited_at >= session.created_at


async def test_stdin_reaches_the_workload_only_once_it_exists(local: LocalBackend) -> None:
    async with open_manager(local) as manager:
        session = manager.start(build_spec('read line; echo "got $line"'))
        session.write_stdin(b"too early\n")  # before the workload exists: dropped
        with trio.fail_after(10):
            await wait_for(session, is_running)
        session.write_stdin(b"ping\n")
        assert await wait_terminal(session) == exited(0)
        output = pty_text(session)
        assert output.endswith("got ping\r\n")
        assert "too early" not in output
        session.write_stdin(b"after the end\n")  # no-op, no error


async def test_stop_during_start_ends_stopped_and_the_workload_is_gone() -> None:
    backend = HeldStartBackend()
    async with open_manager(backend) as manager:
        session = manager.start(build_spec("exec sleep 1000"))
        with trio.fail_after(10):
            await backend.spawned.wait()
        with trio.fail_after(10):
            await manager.stop(session.id)
        assert session.status == {"kind": "stopped"}
        assert session.end_requested is EndIntent.STOP
        assert session.phase is SessionPhase.ENDED
        assert status_kinds(session) == ["starting", "stopped"]
        assert_gone(backend.procs[0])


async def test_stop_before_the_session_task_runs_still_stops_it(local: LocalBackend) -> None:
    async with open_manager(local) as manager:
        session = manager.start(build_spec("echo should-never-run; exec sleep 1000"))
        await manager.stop(session.id)  # no checkpoint between start and stop
        assert session.status == {"kind": "stopped"}
        assert status_kinds(session) == ["starting", "stopped"]
        assert session.pty.last_seq == 0


async def test_stop_running_session_ends_stopped_never_failed(local: LocalBackend) -> None:
    async with open_manager(local) as manager:
        session = manager.start(build_spec(SLEEPER))
        pid = await workload_pid(session)
        with trio.fail_after(10):
            await manager.stop(session.id)
        assert session.status == {"kind": "stopped"}
        assert_pid_gone(pid)
        await manager.stop(session.id)  # idempotent
        assert status_kinds(session) == ["starting", "running", "stopped"]


async def test_stop_after_exit_and_of_unknown_ids_changes_nothing(local: LocalBackend) -> None:
    async with open_manager(local) as manager:
        session = manager.start(build_spec("exit 7"))
        await wait_terminal(session)
        last_id, exited_at = session.events.last_id, session.exited_at
        await manager.stop(session.id)
        await manager.stop("nosuchsession")
        assert session.status == exited(7)
        assert session.end_requested is None
        assert (session.events.last_id, session.exited_at) == (last_id, exited_at)


async def test_ttl_kills_the_workload_and_fails_naming_the_limit(local: LocalBackend) -> None:
    async with open_manager(local) as manager:
        session = manager.start(build_spec(SLEEPER, ttl_s=1.5))
        pid = await workload_pid(session)
        assert await wait_terminal(session) == failed(
            "ttl: session exceeded its time limit of 1.5 s"
        )
        assert_pid_gone(pid)


async def test_stop_that_cannot_complete_raises_stop_failed() -> None:
    backend = UnstoppableBackend()
    async with open_manager(backend, stop_timeout_s=0.2) as manager:
        session = manager.start(build_spec())
        with pytest.raises(StopFailed, match=session.id):
            await manager.stop(session.id)
        assert not session.is_terminal
        backend.release.cancel()
        assert await wait_terminal(session) == {"kind": "stopped"}


async def test_user_stop_ends_stopped_even_when_teardown_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with open_manager(BrokenTeardownBackend()) as manager:
        session = manager.start(build_spec())
        with trio.fail_after(10):
            await wait_for(session, is_running)
            await manager.stop(session.id)
        assert session.status == {"kind": "stopped"}
        assert "teardown could not delete the pod" in caplog.text


# --------------------------------------------------------------------------
# Failures stay inside their session
# --------------------------------------------------------------------------


async def test_start_error_fails_with_stage_and_client_safe_message() -> None:
    async with open_manager(FailingStartBackend()) as manager:
        session = manager.start(build_spec())
        status = await wait_terminal(session)
        assert status == failed("provision: image telorun/nope could not be pulled")
        assert "registry.internal" not in str(session.events.since(0).items)


async def test_crashing_backend_fails_internal_and_spares_other_sessions(
    local: LocalBackend, caplog: pytest.LogCaptureFixture
) -> None:
    backend = RoutingBackend(sh=local, crash=CrashingBackend())
    async with open_manager(backend) as manager:
        healthy = manager.start(build_spec('stty -echo; echo ready; read x; echo "still $x"'))
        with trio.fail_after(10):
            await wait_for(healthy, lambda s: "ready" in pty_text(s))
        with caplog.at_level(logging.ERROR, logger="runnerd.sessions"):
            crashed = manager.start(build_spec(image="crash"))
            status = await wait_terminal(crashed)
        assert status["kind"] == "failed"
        assert status["message"].startswith("internal: ")  # type: ignore[typeddict-item]
        assert "containerStatuses" not in status["message"]  # type: ignore[typeddict-item]
        logged = [
            r for r in caplog.records if r.exc_info and getattr(r, "session_id", None) == crashed.id
        ]
        assert logged, "the crash is logged with its traceback"
        assert "KeyError: 'pod.status.containerStatuses'" in caplog.text

        assert is_running(healthy)
        healthy.write_stdin(b"alive\n")
        assert await wait_terminal(healthy) == exited(0)
        assert pty_text(healthy) == "ready\r\nstill alive\r\n"
        # The manager still takes new sessions.
        assert await wait_terminal(manager.start(build_spec("exit 0"))) == exited(0)


# --------------------------------------------------------------------------
# Capacity, eviction, expiry
# --------------------------------------------------------------------------


async def test_capacity_evicts_oldest_exit_and_live_sessions_block(local: LocalBackend) -> None:
    async with open_manager(local, max_sessions=2) as manager:
        done = manager.start(build_spec("exit 0"))
        await wait_terminal(done)
        live = manager.start(build_spec("exec sleep 1000"))
        newer = manager.start(build_spec("exec sleep 1000"))  # evicts `done`
        assert manager.get(done.id) is None
        with pytest.raises(RegistryFull, match="2 session slots"):
            manager.start(build_spec("exit 0"))
        assert {s.id for s in manager.sessions()} == {live.id, newer.id}
        assert manager.live_count == 2

        await manager.stop(live.id)
        replacement = manager.start(build_spec("exit 0"))  # evicts the stopped one
        assert manager.get(live.id) is None
        assert await wait_terminal(replacement) == exited(0)


async def test_start_with_a_registered_id_raises_and_changes_nothing(local: LocalBackend) -> None:
    async with open_manager(local) as manager:
        spec = build_spec("exec sleep 1000")
        first = manager.start(spec)
        with pytest.raises(ValueError, match="already registered"):
            manager.start(spec)
        assert manager.get(spec.session_id) is first
        assert [s.id for s in manager.sessions()] == [first.id]
        assert manager.live_count == 1


async def test_terminal_sessions_expire_after_exit_ttl(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = 0
    backend = InProcessBackend(body=lambda sink: _exit_now())
    async with open_manager(backend, exit_ttl_s=30.0, wall_clock=trio.current_time) as manager:
        first = manager.start(build_spec())
        await wait_terminal(first)
        exited_at = trio.current_time()
        await trio.sleep(10)
        second = manager.start(build_spec())
        await wait_terminal(second)
        # Fake time: each sleep_until returns only after every earlier
        # deadline (the expiry loop's) has fired.
        await trio.sleep_until(exited_at + 29.9)
        assert manager.get(first.id) is first
        await trio.sleep_until(exited_at + 30.1)
        assert manager.get(first.id) is None
        assert manager.get(second.id) is second
        await trio.sleep_until(exited_at + 39.9)
        assert manager.get(second.id) is second
        await trio.sleep_until(exited_at + 40.1)
        assert manager.get(second.id) is None


async def _exit_now() -> Exited:
    return Exited(0)


# --------------------------------------------------------------------------
# Terminal plumbing: resize coalescing, sink filtering
# --------------------------------------------------------------------------


async def test_resizes_are_coalesced_latest_wins(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = 0
    backend = InProcessBackend()
    async with open_manager(backend) as manager:
        session = manager.start(build_spec())
        session.resize(120, 50)  # before the workload exists: applied on attach
        resizes = backend.handle.resizes
        with trio.fail_after(1):  # the handle reaches the session just after `running`
            await backend.handle.wait_for_resizes(1)
        assert [(c, r) for _, c, r in resizes] == [(120, 50)]
        t0 = resizes[0][0]

        session.resize(81, 24)
        session.resize(82, 24)
        session.resize(100, 40)
        assert len(resizes) == 1  # within 50 ms of the last one: deferred
        with trio.fail_after(1):
            await backend.handle.wait_for_resizes(2)
        assert resizes[1] == (pytest.approx(t0 + 0.05), 100, 40)

        await trio.sleep(1)  # long after: the next one goes straight through
        session.resize(200, 7)
        assert resizes[2][1:] == (200, 7)
        await trio.sleep(1)
        assert len(resizes) == 3


async def test_sink_ignores_backend_terminal_status() -> None:
    # Debug frames and reachability are the core's own watchers' now:
    # tests/session/test_supervision.py.
    async def body(sink: Sink) -> Exited:
        sink.status(failed("a backend may not decide this"))
        sink.status(running([{"host": "", "port": 8080, "protocol": "tcp"}]))
        return Exited(0)

    async with open_manager(InProcessBackend(body)) as manager:
        session = manager.start(build_spec())
        await wait_terminal(session)
        assert status_kinds(session) == ["starting", "running", "running", "exited"]


# --------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------


async def _read_ring(
    session: Session, ring: EventRing | ByteRing, out: list[tuple[int, Any]]
) -> None:
    cursor = 0
    while True:
        replay = ring.since(cursor)
        assert not replay.gap
        out.extend(replay.items)
        if replay.items:
            cursor = replay.items[-1][0]
        last = ring.last_id if isinstance(ring, EventRing) else ring.last_seq
        if session.is_terminal and last == cursor:
            return
        await session.wait_change()  # no checkpoint since the read: load-bearing


async def _read_pty(session: Session, out: list[tuple[int, bytes]]) -> None:
    await _read_ring(session, session.pty, out)


async def _read_events(session: Session, out: list[tuple[int, Any]]) -> None:
    await _read_ring(session, session.events, out)


async def test_readers_see_every_chunk_and_event_exactly_once_under_output(
    local: LocalBackend,
) -> None:
    script = 'i=0; while [ $i -lt 3000 ]; do echo "line $i"; i=$((i+1)); done'
    expected = "".join(f"line {i}\r\n" for i in range(3000))
    async with open_manager(local) as manager:
        session = manager.start(build_spec(script))
        chunks: list[list[tuple[int, bytes]]] = [[], [], []]
        events: list[tuple[int, Any]] = []
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for out in chunks:
                    nursery.start_soon(_read_pty, session, out)
                nursery.start_soon(_read_events, session, events)
        assert session.status == exited(0)
        for out in chunks:
            assert [seq for seq, _ in out] == list(range(1, session.pty.last_seq + 1))
            assert b"".join(c for _, c in out).decode() == expected
        assert [i for i, _ in events] == list(range(1, session.events.last_id + 1))
        assert events[-1][1] == {"type": "status", "status": exited(0)}


async def test_readers_keep_up_with_thousands_of_small_writes() -> None:
    async def body(sink: Sink) -> Exited:
        for n in range(5000):
            sink.output(b"%d;" % n)
            if n % 7 == 0:
                await trio.lowlevel.checkpoint()
        return Exited(0)

    async with open_manager(InProcessBackend(body)) as manager:
        session = manager.start(build_spec())
        out: list[tuple[int, bytes]] = []
        with trio.fail_after(30):
            await _read_pty(session, out)
        assert [seq for seq, _ in out] == list(range(1, 5001))
        assert b"".join(c for _, c in out) == b"".join(b"%d;" % n for n in range(5000))


async def test_wait_change_returns_at_once_for_a_terminal_session(local: LocalBackend) -> None:
    async with open_manager(local) as manager:
        session = manager.start(build_spec())
        await wait_terminal(session)
        with trio.fail_after(1):
            await session.wait_change()


# --------------------------------------------------------------------------
# Shutdown
# --------------------------------------------------------------------------


async def test_stop_all_stops_every_live_session_and_refuses_new_ones(
    local: LocalBackend,
) -> None:
    held = HeldStartBackend()
    backend = RoutingBackend(sh=local, held=held)
    async with open_manager(backend) as manager:
        finished = manager.start(build_spec("exit 0"))
        await wait_terminal(finished)
        live = [manager.start(build_spec(SLEEPER)) for _ in range(3)]
        starting = manager.start(build_spec("exec sleep 1000", image="held"))
        pids = [await workload_pid(session) for session in live]
        with trio.fail_after(10):
            await held.spawned.wait()
            assert await manager.stop_all() == []
        assert [s.status["kind"] for s in [*live, starting]] == ["stopped"] * 4
        assert finished.status == exited(0)
        for pid in pids:
            assert_pid_gone(pid)
        assert_gone(held.procs[0])
        with pytest.raises(ManagerClosed):
            manager.start(build_spec())


async def test_cancelling_the_manager_ends_every_session_stopped(local: LocalBackend) -> None:
    manager = SessionManager(local, max_sessions=4, exit_ttl_s=60, replay_buffer_bytes=10_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        sessions = [manager.start(build_spec(SLEEPER)) for _ in range(2)]
        pids = [await workload_pid(session) for session in sessions]
        nursery.cancel_scope.cancel()  # shutdown past its budget: no stop_all
    assert [s.status for s in sessions] == [{"kind": "stopped"}] * 2
    for pid in pids:
        assert_pid_gone(pid)
    with pytest.raises(ManagerClosed):
        manager.start(build_spec())


async def test_failed_outcome_becomes_the_failed_status_as_is() -> None:
    async def body(sink: Sink) -> Failed:
        return Failed("pod evicted: the node ran out of memory")

    async with open_manager(InProcessBackend(body)) as manager:
        session = manager.start(build_spec())
        assert await wait_terminal(session) == failed("pod evicted: the node ran out of memory")
