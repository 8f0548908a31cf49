"""Nothing of a session outlives it, through the real daemon: every escape
trick dies on DELETE, on TTL expiry, on the daemon's SIGTERM and on its
SIGKILL; a SIGKILLed daemon's session directories are removed by the next
start. The fallback (forced by config) announces itself."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from runnerd.local.cgroups import find_delegated_cgroup
from tests.e2e.contract_client import wait_terminal
from tests.escapes import (
    STAY,
    escape_script,
    is_running,
    read_pids,
    wait_all_gone,
)
from tests.harness import Daemon, read_pty_until, session_body, start_daemon

LOCK = ".runnerd.lock"


async def start_escapes(daemon: Daemon) -> tuple[str, dict[str, int]]:
    """Start the escape script in a session; once every escapee runs, return
    the session id and their host pids. The pid file is in the session's
    own directory (its cwd, the bundle's: the host's temp dirs are not
    the session's)."""
    async with daemon.client() as client:
        body = session_body(escape_script(), env={"PIDFILE": "pids"})
        response = await client.post("/v1/sessions", json=body)
        assert response.status_code == 201, response.text
    session_id: str = response.json()["sessionId"]
    await read_pty_until(daemon.socket_path, session_id, rb"escaped")
    pids = read_pids(daemon.workdir / session_id / "app" / "pids")
    assert all(is_running(pid) for pid in pids.values())
    return session_id, pids


async def test_escapees_die_on_delete(tmp_path: Path) -> None:
    async with start_daemon(tmp_path) as daemon:
        session_id, pids = await start_escapes(daemon)
        async with daemon.client() as client:
            deleted = await client.delete(f"/v1/sessions/{session_id}")
        assert deleted.status_code == 204
        await wait_all_gone(pids)
        with trio.fail_after(10):  # moved to the trash at once, removed just after
            while daemon.session_dirs():  # noqa: ASYNC110 (a directory has no event)
                await trio.sleep(0.01)


async def test_escapees_die_when_the_ttl_expires(tmp_path: Path) -> None:
    overrides: dict[str, Any] = {"limits": {"session": {"ttl_seconds": 3}}}
    async with start_daemon(tmp_path, overrides) as daemon:
        session_id, pids = await start_escapes(daemon)
        await wait_all_gone(pids, timeout_s=15)
        # The status is recorded once the teardown is over, a moment after
        # the last process is gone: read it from the stream, which ends there.
        async with daemon.client() as client:
            status = await wait_terminal(client, session_id)
        assert status["kind"] == "failed" and "ttl" in status["message"].lower(), status


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
async def test_escapees_die_with_the_daemon(tmp_path: Path, signum: int) -> None:
    async with start_daemon(tmp_path) as daemon:
        _, pids = await start_escapes(daemon)
        code = await daemon.stop(signum)
        assert code == (0 if signum == signal.SIGTERM else -signal.SIGKILL)
        await wait_all_gone(pids)


async def test_next_start_removes_what_a_sigkilled_daemon_left(tmp_path: Path) -> None:
    async with start_daemon(tmp_path) as daemon:
        async with daemon.client() as client:
            body = session_body("echo up; exec sleep 4344")
            responses = [await client.post("/v1/sessions", json=body) for _ in range(3)]
            ids = [response.json()["sessionId"] for response in responses]
        for session_id in ids:  # a session's directory exists before it runs
            await read_pty_until(daemon.socket_path, session_id, rb"up")
        assert await daemon.stop(signal.SIGKILL) == -signal.SIGKILL
    left = [name for name in os.listdir(tmp_path / "sessions") if name != ".trash"]
    assert {LOCK, *ids} <= set(left) and all(
        name.startswith(".warm-") for name in set(left) - {LOCK, *ids}
    ), left  # and the warm sandboxes' (`local.warm_sandboxes`)
    async with start_daemon(tmp_path) as daemon:
        assert daemon.session_dirs() == []
        await daemon.wait_for_stderr("removed 3 session directories left by a previous run")


async def test_fallback_is_announced_once_and_in_capabilities(tmp_path: Path) -> None:
    overrides = {"local": {"containment": "process-group"}}
    async with start_daemon(tmp_path, overrides) as daemon:
        async with daemon.client() as client:
            description = (await client.get("/v1/capabilities")).json()["description"]
            body = session_body(f'read -r p _ </proc/self/stat; echo "pid=$p"; {STAY}')
            session_id = (await client.post("/v1/sessions", json=body)).json()["sessionId"]
        output = await read_pty_until(daemon.socket_path, session_id, rb"pid=\d+\r?\n")
        pid = int(output.split(b"pid=")[1].split()[0])
        assert "process group only" in description
        assert daemon.stderr_text().count("process group only") == 1
        # What the weaker containment lets a session reach, said once too.
        reach = "a session can read runnerd's config, other sessions' files and the API socket"
        assert reach in description
        assert daemon.stderr_text().count(reach) == 1
        # The parent-death signal holds in the fallback too: the workload
        # dies with a SIGKILLed daemon.
        await daemon.stop(signal.SIGKILL)
        await wait_all_gone({"workload": pid})


async def test_namespaces_are_announced_once_and_missing_ceilings_said(tmp_path: Path) -> None:
    own = await trio.Path("/proc/self/cgroup").read_text()
    delegated = find_delegated_cgroup(own, euid=os.geteuid())
    async with start_daemon(tmp_path) as daemon, daemon.client() as client:
        description = (await client.get("/v1/capabilities")).json()["description"]
        assert "process group" not in description
        assert "mount namespace" not in description and "/proc" not in description
        assert daemon.stderr_text().count("sessions run in PID namespaces") == 1
    if delegated.cgroup is None:  # this host: cgroup v1/hybrid
        notice = f"Resource ceilings (cpu, memory) are not enforced: {delegated.reason}."
        assert description.endswith(notice)
        assert daemon.stderr_text().count(notice) == 1
