"""The backend seam's promises (`runnerd.backend`), on every backend.

Each test runs on the local backend, the Kubernetes backend on the test
cluster and the in-process fake (the `target` fixture), driven through the
`SessionManager` as the daemon drives it, with the seam observed in between
(`tests.conformance.seam`): what a backend reports is checked as it crosses.
"""

from __future__ import annotations

import re

import pytest
import trio
import trio.testing

from runnerd.backend import EndIntent, Exited, RunSpec
from runnerd.contract import exited, stopped
from runnerd.session.manager import DetachUnsupported, Session, SessionManager
from tests.conformance.seam import RunLog, is_cancellation, start_error
from tests.conformance.targets import Target, open_manager

TIMEOUT_S = 30.0
_WORKLOAD_LINE = re.compile(r"^workload (\S+)\r?$", re.MULTILINE)


def status_kinds(session: Session) -> list[str]:
    return [e["status"]["kind"] for _, e in session.events.since(0).items if e["type"] == "status"]


def pty_text(session: Session) -> str:
    return b"".join(chunk for _, chunk in session.pty.since(0).items).decode(errors="replace")


def start(manager: SessionManager, spec: RunSpec) -> Session:
    """Start a session as a client does, with its terminal size (the POST's
    `x-runnerd-terminal-size`): a backend's start need not wait for one."""
    session = manager.start(spec)
    session.resize(80, 24)
    return session


async def wait_running(session: Session) -> None:
    """Return on the wake-up that shows `running` (no checkpoint after it)."""
    with trio.fail_after(TIMEOUT_S):
        while session.status["kind"] != "running":
            assert not session.is_terminal, f"ended {session.status} before running"
            await session.wait_change()


async def wait_terminal(session: Session) -> None:
    with trio.fail_after(TIMEOUT_S):
        await session.wait_terminal()


async def workload_id(session: Session) -> str:
    """The `<id>` of the sleeper's `workload <id>` line, once it is out."""
    with trio.fail_after(TIMEOUT_S):
        while (match := _WORKLOAD_LINE.search(pty_text(session))) is None:
            assert not session.is_terminal, f"ended {session.status}: {pty_text(session)!r}"
            await session.wait_change()
    return match[1]


async def assert_handle_inert(run: RunLog, session: Session) -> None:
    """The ended workload's handle: writes and resizes return without raising,
    and the backend reports nothing more through its sink (the session's
    ring would drop it anyway, so the sink's log is what is checked)."""
    assert run.handle is not None
    before = session.pty.last_seq
    reported = len(run.calls)
    run.handle.write(b"echo too late\r")
    run.handle.resize(100, 30)
    run.handle.write(b"")
    # Whatever the writes could have set off has run by the time every task
    # is parked (a backend's tasks, and the fake's workload, are in-process).
    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
    assert run.calls[reported:] == []
    assert session.pty.last_seq == before


# A workload that writes at once: its first output must not reach the sink
# before `Started` (the local backend once read its PTY while it published
# the namespace's ports, and failed this about one run in three).
async def test_started_before_output_and_the_own_exit_is_its_exit_code(target: Target) -> None:
    async with target.open_backend() as backend, open_manager(backend, target) as manager:
        session = start(manager, target.spec("echo first line; exit 3"))
        await wait_terminal(session)
    run = backend.runs[session.id]
    assert session.status == exited(3), pty_text(session)
    assert run.outcome == Exited(3)
    assert run.calls[0] == "started" and "output" in run.calls
    assert run.broken == []
    assert status_kinds(session) == ["starting", "running", "exited"]
    assert "first line" in pty_text(session)


async def test_handle_calls_after_the_own_exit_are_noops(target: Target) -> None:
    async with target.open_backend() as backend, open_manager(backend, target) as manager:
        session = start(manager, target.spec("exit 0"))
        await wait_terminal(session)
        assert session.status == exited(0)
        await assert_handle_inert(backend.runs[session.id], session)


async def test_stdin_written_on_seeing_running_reaches_the_workload(target: Target) -> None:
    async with target.open_backend() as backend, open_manager(backend, target) as manager:
        session = start(manager, target.spec('read line; echo "got $line"; exit 5'))
        await wait_running(session)
        session.write_stdin(b"hello\r")
        await wait_terminal(session)
    assert session.status == exited(5), pty_text(session)
    assert "got hello" in pty_text(session)
    assert backend.runs[session.id].broken == []


async def test_stop_removes_the_workload_within_the_stop_timeout(target: Target) -> None:
    async with target.open_backend() as backend, open_manager(backend, target) as manager:
        session = start(manager, target.spec(target.sleeper))
        workload = await workload_id(session)
        assert target.exists(session.id, workload)
        # `stop` raises StopFailed past the backend's stop timeout; the
        # workload must be gone by the time the session is terminal.
        with trio.fail_after(TIMEOUT_S):
            await manager.stop(session.id)
        assert session.status == stopped()
        assert not target.exists(session.id, workload)
        run = backend.runs[session.id]
        await assert_handle_inert(run, session)
    assert is_cancellation(run.raised), (run.raised, run.outcome)
    assert run.broken == []
    assert status_kinds(session) == ["starting", "running", "stopped"]


async def test_shutdown_cancel_removes_the_workload_within_the_stop_timeout(
    target: Target,
) -> None:
    # A shutdown cancels every run with STOP and no `Started.stop` first:
    # the cancellation alone must take the workload down.
    async with target.open_backend() as backend, open_manager(backend, target) as manager:
        session = start(manager, target.spec(target.sleeper))
        workload = await workload_id(session)
        with trio.fail_after(TIMEOUT_S):
            assert await manager.stop_all() == []  # none past the stop timeout
        assert session.status == stopped()
        assert not target.exists(session.id, workload)
    run = backend.runs[session.id]
    assert is_cancellation(run.raised), (run.raised, run.outcome)
    assert run.broken == []


async def test_stop_during_start_ends_it_stopped_with_nothing_left(target: Target) -> None:
    async with target.open_backend() as backend, open_manager(backend, target) as manager:
        # No terminal size and, on some, an image still being pulled: held in its start.
        session = manager.start(target.spec(target.sleeper, image=target.held_image))
        run = await backend.wait_run(session.id)
        with trio.fail_after(TIMEOUT_S):
            await target.wait_creating(run)
            assert target.exists(session.id, "")
            await manager.stop(session.id)
        assert session.status == stopped()
        assert not target.exists(session.id, "")
    assert not run.started
    assert is_cancellation(run.raised), (run.raised, run.outcome)
    assert status_kinds(session) == ["starting", "stopped"]


async def test_start_failure_is_a_start_error_before_started(target: Target) -> None:
    async with target.open_backend() as backend, open_manager(backend, target) as manager:
        session = start(manager, target.spec("echo never", image=target.bad_image))
        await wait_terminal(session)
    run = backend.runs[session.id]
    error = start_error(run.raised)
    assert error is not None, run.raised
    assert not run.started
    assert session.status == {"kind": "failed", "message": f"{error.stage}: {error.message}"}
    assert error.stage.isidentifier()
    assert status_kinds(session) == ["starting", "failed"]
    assert not target.exists(session.id, "")


async def test_detach_leaves_the_workload_for_recover_where_supported(target: Target) -> None:
    async with target.open_backend() as backend, open_manager(backend, target) as manager:
        session = start(manager, target.spec(target.sleeper))
        workload = await workload_id(session)
        if not backend.detach_supported:
            with pytest.raises(DetachUnsupported):
                await manager.stop_all(EndIntent.DETACH)
            # Refused with nothing changed: the session runs on, stoppable.
            assert session.status["kind"] == "running"
            assert target.exists(session.id, workload)
            return
        with trio.fail_after(TIMEOUT_S):
            assert await manager.stop_all(EndIntent.DETACH) == []
    assert target.exists(session.id, workload)
    assert backend.runs[session.id].broken == []
    # A successor daemon's backend finds it, adopts it, and can stop it.
    async with target.open_backend() as successor:
        with trio.fail_after(TIMEOUT_S):
            found = await successor.recover()
        assert [(r.identity.session_id, r.status["kind"]) for r in found] == [
            (session.id, "running")
        ]
        created_at = session.spec.identity.created_at
        assert found[0].identity.created_at == pytest.approx(created_at, abs=0.001)
        async with open_manager(successor, target) as manager:
            adopted = manager.adopt(found[0])
            with trio.fail_after(TIMEOUT_S):
                await manager.stop(adopted.id)
            assert adopted.status == stopped()
            assert not target.exists(session.id, workload)


async def test_probe_answers_for_any_image_and_readies_its_own(target: Target) -> None:
    async with target.open_backend() as backend:
        with trio.fail_after(TIMEOUT_S):
            assert await backend.probe(target.image) == {"status": "ready"}
            report = await backend.probe(target.bad_image)
    assert report["status"] in ("ready", "unavailable")
