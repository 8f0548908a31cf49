"""A session's life as a client sees it: status over SSE and `GET`, stop with
`DELETE` (during start and after), the TTL limit, start failures."""

from __future__ import annotations

import contextlib
import os
import socket
from datetime import datetime
from pathlib import Path

import trio

from tests.e2e.contract_client import (
    SSE_TIMEOUT,
    bundle_body,
    read_events,
    read_pty,
    start_session,
    statuses,
    wait_terminal,
)
from tests.escapes import HOST_PID, host_pid
from tests.harness import iter_sse, open_ws, start_daemon
from tests.shared_daemon import OnBackend, shared_runnerd_on_each_backend

# Every test taking `runnerd` runs on both backends (the kubernetes one on the
# test cluster, whose `sh` image runs these bundles as the local runtime does).
__all__ = ["shared_runnerd_on_each_backend"]


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_session_goes_starting_running_exited_with_its_code(runnerd) -> None:
    async with runnerd.client() as client:
        response = await client.post("/v1/sessions", json=bundle_body("exit 7"))
        assert response.status_code == 201
        created = response.json()
        session_id = created["sessionId"]
        assert len(session_id) == 12 and set(session_id) <= set("abcdefghijklmnopqrstuvwxyz234567")
        assert created["streamUrl"] == f"/v1/sessions/{session_id}/events"
        datetime.fromisoformat(created["createdAt"].replace("Z", "+00:00"))
        frames = await read_events(client, session_id)
        summary = (await client.get(f"/v1/sessions/{session_id}")).json()
    assert [s["kind"] for s in statuses(frames)] == ["starting", "running", "exited"]
    assert statuses(frames)[-1] == {"kind": "exited", "code": 7}
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    assert summary["sessionId"] == session_id
    assert summary["status"] == {"kind": "exited", "code": 7}
    assert summary["createdAt"] == created["createdAt"]
    exited_at = datetime.fromisoformat(summary["exitedAt"].replace("Z", "+00:00"))
    assert exited_at >= datetime.fromisoformat(created["createdAt"].replace("Z", "+00:00"))


async def test_killed_by_signal_exits_with_128_plus_signal(runnerd) -> None:
    async with runnerd.client() as client:
        session_id = await start_session(client, "kill -TERM $$")
        assert await wait_terminal(client, session_id) == {"kind": "exited", "code": 143}


async def test_live_session_has_no_exited_at_and_unknown_is_404(runnerd) -> None:
    async with runnerd.client() as client:
        session_id = await start_session(client, "exec sleep 30")
        live = (await client.get(f"/v1/sessions/{session_id}")).json()
        unknown = await client.get("/v1/sessions/aaaaaaaaaaaa")
    assert live["status"]["kind"] in ("starting", "running")
    assert "exitedAt" not in live
    assert unknown.status_code == 404
    assert unknown.json()["error"] == "not_found"


async def test_delete_stops_a_running_workload_as_stopped(runnerd) -> None:
    async with runnerd.client() as client:
        session_id = await start_session(client, f"{HOST_PID}; echo pid=$HOST_PID.; exec sleep 30")
        async with open_ws(runnerd.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            output = (await read_pty(ws, until=b".")).output
        pid = host_pid(output.split(b"pid=")[1].split(b".")[0])
        assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
        summary = (await client.get(f"/v1/sessions/{session_id}")).json()
        frames = await read_events(client, session_id)
    assert summary["status"] == {"kind": "stopped"}
    assert "exitedAt" in summary
    assert statuses(frames)[-1] == {"kind": "stopped"}
    assert _process_gone(pid)


async def test_delete_right_after_start_is_stopped_not_failed(runnerd) -> None:
    # The DELETE races the workload's creation. That a stop landing mid-creation
    # kills what was spawned is shown deterministically in tests/sessions
    # (HeldStartBackend); here: the client sees `stopped`, never `failed`.
    async with runnerd.client() as client:
        response = await client.post("/v1/sessions", json=bundle_body("exec sleep 30"))
        session_id = response.json()["sessionId"]
        deleted = await client.delete(f"/v1/sessions/{session_id}")
        summary = (await client.get(f"/v1/sessions/{session_id}")).json()
        kinds = [s["kind"] for s in statuses(await read_events(client, session_id))]
    assert deleted.status_code == 204
    assert summary["status"] == {"kind": "stopped"}
    assert kinds[-1] == "stopped" and "failed" not in kinds


async def test_delete_kills_a_workload_blocked_on_stdin(runnerd) -> None:
    async with runnerd.client() as client:
        # The pid reaches the test before the DELETE is sent, every time.
        session_id = await start_session(client, f"{HOST_PID}; echo pid=$HOST_PID.; read x")
        async with open_ws(runnerd.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            output = (await read_pty(ws, until=b".")).output
        pid = host_pid(output.split(b"pid=")[1].split(b".")[0])
        assert not _process_gone(pid)
        deleted = await client.delete(f"/v1/sessions/{session_id}")
        final = await wait_terminal(client, session_id)
    assert deleted.status_code == 204
    assert final == {"kind": "stopped"}
    assert _process_gone(pid)


async def test_delete_is_idempotent_and_unknown_ids_are_204(runnerd) -> None:
    async with runnerd.client() as client:
        session_id = await start_session(client, "exit 0")
        await wait_terminal(client, session_id)
        again = await client.delete(f"/v1/sessions/{session_id}")
        unknown = await client.delete("/v1/sessions/zzzzzzzzzzzz")
        summary = (await client.get(f"/v1/sessions/{session_id}")).json()
    assert again.status_code == 204 and again.content == b""
    assert unknown.status_code == 204
    # Stopping a session that already exited does not rewrite its status.
    assert summary["status"] == {"kind": "exited", "code": 0}


async def test_ttl_limit_kills_the_session_as_failed_naming_the_limit(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    overrides = {"limits": {"session": {"ttl_seconds": 1}}}
    async with (
        start_daemon(tmp_path, on_backend.overrides(overrides)) as daemon,
        daemon.client() as client,
    ):
        session_id = await start_session(client, "exec sleep 30")
        final = await wait_terminal(client, session_id, timeout_s=10)
    assert final == {"kind": "failed", "message": "ttl: session exceeded its time limit of 1 s"}


# Local backend only: the failure is a local runtime's missing executable;
# the kubernetes backend's start failures (each permanent cause, the deadline)
# are tests/kube/test_daemon_sessions.py's and test_daemon_faults.py's.
async def test_start_failure_is_a_failed_status_with_its_stage(tmp_path: Path) -> None:
    overrides = {
        "runner": {"allowed_images": ["sh", "broken"]},
        "local": {"runtimes": {"broken": {"command": ["/nonexistent/runtime", "{entry}"]}}},
    }
    async with start_daemon(tmp_path, overrides) as daemon, daemon.client() as client:
        body = bundle_body("true")
        body["config"] = {"image": "broken", "pullPolicy": "missing"}
        response = await client.post("/v1/sessions", json=body)
        assert response.status_code == 201  # the failure arrives on the stream
        final = await wait_terminal(client, response.json()["sessionId"])
    assert final["kind"] == "failed"
    # The runtime's executable is missing: the `provision` stage, naming the
    # runtime and the executable.
    assert final["message"].startswith("provision: "), final
    assert "'broken'" in final["message"] and "'/nonexistent/runtime'" in final["message"]


async def test_declared_ports_appear_as_endpoints_and_reachability(runnerd) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The pod's own address on the test cluster (its kubelet sets POD_IP, as a
    # pod's network namespace would give it one); loopback on this host.
    script = (
        "import os, socket, sys\n"
        f"s = socket.create_server((os.environ.get('POD_IP', '127.0.0.1'), {port}))\n"
        "sys.stdin.readline()\n"
    )
    body = bundle_body("", ports=[{"port": port, "protocol": "tcp"}])
    body["config"]["image"] = "python"
    body["bundle"]["files"] = [{"relativePath": "main.py", "contents": script}]
    body["bundle"]["entryRelativePath"] = "main.py"
    async with runnerd.client() as client:
        response = await client.post("/v1/sessions", json=body)
        assert response.status_code == 201, response.text
        session_id = response.json()["sessionId"]
        frames = []
        with trio.fail_after(10):
            async with client.stream(
                "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
            ) as stream:
                async with contextlib.aclosing(iter_sse(stream)) as events:
                    async for frame in events:
                        frames.append(frame)
                        if frame.data.get("state") == "reachable":
                            break
        await client.delete(f"/v1/sessions/{session_id}")
    running = next(s for s in statuses(frames) if s["kind"] == "running")
    assert running["endpoints"] == [{"host": "", "port": port, "protocol": "tcp"}]
    reachability = [f.data for f in frames if f.event == "reachability"]
    assert reachability[0] == {"type": "reachability", "port": port, "state": "checking"}
    assert reachability[-1] == {"type": "reachability", "port": port, "state": "reachable"}
