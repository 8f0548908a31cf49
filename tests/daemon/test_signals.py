"""SIGTERM / SIGINT: every workload gone, socket files removed, exit 0 in 10 s.
SIGUSR2 (detach) on the local backend: refused, nothing changes."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed

from tests.escapes import HOST_PID, host_pid
from tests.harness import (
    Daemon,
    iter_sse,
    open_ws,
    read_pty_until,
    session_body,
    start_daemon,
)

SESSIONS = 3


def process_gone(pid: int) -> bool:
    """True once `pid` no longer runs (a zombie awaiting its reaper counts)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


async def read_pid(daemon: Daemon, session_id: str) -> int:
    """The workload's pid, as it printed it on its PTY."""
    output = await read_pty_until(daemon.socket_path, session_id, rb"pid=\S+\r?\n")
    match = re.search(rb"pid=(\S+)", output)
    assert match is not None
    return host_pid(match.group(1))


async def start_sleepers(daemon: Daemon, count: int) -> list[int]:
    async with daemon.client() as client:
        ids = []
        for _ in range(count):
            body = session_body(f'{HOST_PID}; echo "pid=$HOST_PID"; exec sleep 1000')
            response = await client.post("/v1/sessions", json=body)
            assert response.status_code == 201, response.text
            ids.append(response.json()["sessionId"])
    return [await read_pid(daemon, session_id) for session_id in ids]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_stop_signal_ends_every_workload_and_removes_the_socket(
    tmp_path: Path, signum: int
) -> None:
    async with start_daemon(tmp_path) as daemon:
        pids = await start_sleepers(daemon, SESSIONS)
        assert not any(process_gone(pid) for pid in pids)
        code = await daemon.stop(signum, timeout_s=10)
        assert code == 0, daemon.stderr_text()
        assert [pid for pid in pids if not process_gone(pid)] == []
        assert not {"runnerd.sock", "runnerd.sock.lock"} & set(os.listdir(tmp_path))
        assert os.listdir(daemon.workdir) == [".runnerd.lock"]  # held by the daemon till exit
        await daemon.wait_for_notification("STOPPING=1", timeout_s=1)


async def test_sigterm_ends_open_sse_and_websocket_streams_promptly(tmp_path: Path) -> None:
    async with start_daemon(tmp_path) as daemon, daemon.client() as client:
        response = await client.post("/v1/sessions", json=session_body("exec sleep 1000"))
        session_id = response.json()["sessionId"]
        ended: list[str] = []

        async def read_events(*, task_status: trio.TaskStatus[None]) -> None:
            url = f"/v1/sessions/{session_id}/events"
            async with client.stream("GET", url, timeout=httpx.Timeout(5, read=None)) as r:
                task_status.started()
                async for _ in iter_sse(r):
                    pass
            ended.append("sse")

        async def read_pty(*, task_status: trio.TaskStatus[None]) -> None:
            async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
                task_status.started()
                with pytest.raises(ConnectionClosed):
                    while True:
                        await ws.get_message()
            ended.append("ws")

        async with trio.open_nursery() as nursery:
            await nursery.start(read_events)
            await nursery.start(read_pty)
            # Both streams are live before the signal; it ends them, the
            # sessions and the daemon well inside the 10 s budget.
            assert await daemon.stop(timeout_s=5) == 0
        assert sorted(ended) == ["sse", "ws"]


async def test_stopped_sessions_are_reported_and_sigterm_leaves_no_session_directory(
    tmp_path: Path,
) -> None:
    # A session's directory is moved to the trash once its processes are
    # gone and removed after it is reported terminal; the daemon still exits
    # only once every one of them is removed. (At SIGTERM the streams end
    # before the sessions do: README, "Signals".)
    async with start_daemon(tmp_path) as daemon, daemon.client() as client:
        pids = await start_sleepers(daemon, 8)
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        ids = [session["sessionId"] for session in listed]
        last: dict[str, str] = {}

        async def watch(session_id: str, *, task_status: trio.TaskStatus[None]) -> None:
            url = f"/v1/sessions/{session_id}/events"
            async with client.stream("GET", url, timeout=httpx.Timeout(5, read=None)) as r:
                task_status.started()
                async for frame in iter_sse(r):
                    if frame.event == "status":
                        last[session_id] = frame.data["status"]["kind"]

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for session_id in ids[:4]:
                    await nursery.start(watch, session_id)
                for session_id in ids[:4]:
                    assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
        assert last == {session_id: "stopped" for session_id in ids[:4]}
        assert await daemon.stop(timeout_s=10) == 0, daemon.stderr_text()
        assert [pid for pid in pids if not process_gone(pid)] == []
        assert os.listdir(daemon.workdir) == [".runnerd.lock"]


async def test_repeated_sigterm_during_and_after_shutdown_still_exits_0(tmp_path: Path) -> None:
    async with start_daemon(tmp_path) as daemon:
        pids = await start_sleepers(daemon, 2)
        daemon.send_signal(signal.SIGTERM)
        daemon.send_signal(signal.SIGTERM)
        # Again once the shutdown is done: the window between the signal
        # receiver closing and the process exiting must not be a kill either.
        await daemon.wait_for_stderr("runnerd stopped")
        if daemon.proc.returncode is None:
            daemon.send_signal(signal.SIGTERM)
            daemon.send_signal(signal.SIGINT)
        assert await daemon.stop() == 0
    assert all(process_gone(pid) for pid in pids)


async def test_sigusr2_detach_is_refused_by_the_local_backend_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    async with start_daemon(tmp_path) as daemon:
        pids = await start_sleepers(daemon, 1)
        daemon.send_signal(signal.SIGUSR2)
        await daemon.wait_for_stderr("SIGUSR2 refused, still serving")
        assert "the local backend cannot leave sessions running" in daemon.stderr_text()
        # Still serving, the workload still running: a refused detach changes nothing.
        async with daemon.client() as client:
            assert (await client.get("/v1/health")).status_code == 200
        assert not process_gone(pids[0])
        assert daemon.count_notifications("STOPPING=1") == 0
        code = await daemon.stop(signal.SIGTERM, timeout_s=10)
        assert code == 0, daemon.stderr_text()
        assert process_gone(pids[0])
