"""Sessions that outlive a daemon restart: a real runnerd on the test cluster,
SIGKILLed or detached (SIGUSR2) and started again on the same config and
state_dir, driven by a client that knew the session ids."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import WebSocketConnection

from tests.e2e.contract_client import PtyTranscript, read_pty, wait_status
from tests.harness import Daemon, SseFrame, iter_sse, open_ws
from tests.kube.daemon import (
    KERNEL,
    kube_daemon,
    resume_sse,
    session_pods,
    start_telo,
    wait_pods,
)
from tests.kubesim.server import KubeSim

TIMEOUT_S = 20.0
SSE_TIMEOUT = httpx.Timeout(10.0, read=None)
# Echoes each stdin line as `got:<line>` until `quit`, then exits 7.
ECHO = "print ready\necho got:\nexit 7\n"
# Reads stdin until `quit`, then exits 3 (the test ends it while no daemon runs).
FINISHER = "print ready\necho\nexit 3\n"
GAP = {"type": "gap", "reason": "buffer_evicted"}


@dataclass
class Seen:
    """What a client saw of one session before the restart."""

    session_id: str
    last_event_id: int
    last_seq: int


async def read_from(
    daemon: Daemon, session_id: str, last_seq: int, until: bytes, line: bytes = b""
) -> PtyTranscript:
    """Attach from `last_seq`, read until "ready" (from 0), type `line`, read until `until`."""
    resource = f"/v1/sessions/{session_id}/io?lastSeq={last_seq}"
    async with open_ws(daemon.socket_path, resource) as ws:
        transcript = await read_pty(ws, until=b"ready", timeout_s=TIMEOUT_S)
        if line:
            await ws.send_message(line)
        return await read_pty(ws, transcript, until=until, timeout_s=TIMEOUT_S)


async def running_event_id(client: httpx.AsyncClient, session_id: str) -> int:
    """The id of the `running` event, the newest a session with no ports has,
    read as a client would (from the stream)."""
    with trio.fail_after(TIMEOUT_S):
        async with client.stream(
            "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
        ) as response:
            async with contextlib.aclosing(iter_sse(response)) as frames:
                async for frame in frames:
                    if frame.event == "status" and frame.data["status"]["kind"] == "running":
                        assert frame.id is not None
                        return frame.id
    raise AssertionError(f"session {session_id} never ran")


async def use_before(daemon: Daemon, client: httpx.AsyncClient, session_id: str) -> Seen:
    event_id = await running_event_id(client, session_id)
    transcript = await read_from(daemon, session_id, 0, b"got:one", b"one\n")
    return Seen(session_id, event_id, transcript.seqs[-1])


async def resume_events(client: httpx.AsyncClient, seen: Seen, until_kind: str) -> list[SseFrame]:
    """Resume the SSE stream from the last id seen, until a status of `until_kind`."""
    return await resume_sse(
        client,
        seen.session_id,
        seen.last_event_id,
        lambda frames: (
            frames[-1].event == "status" and frames[-1].data["status"]["kind"] == until_kind
        ),
    )


def assert_resumed(frames: list[SseFrame], seen: Seen, *, gap: bool) -> None:
    """No duplicate and no id at or below what was seen; `gap` first iff expected."""
    ids = [f.id for f in frames if f.id is not None]
    assert ids == sorted(set(ids)) and all(i > seen.last_event_id for i in ids), ids
    assert (frames[0].event == "gap") is gap, [f.event for f in frames]
    assert all(f.event != "gap" for f in frames[1:])


@asynccontextmanager
async def resumed_pty(daemon: Daemon, seen: Seen) -> AsyncIterator[WebSocketConnection]:
    resource = f"/v1/sessions/{seen.session_id}/io?lastSeq={seen.last_seq}"
    async with open_ws(daemon.socket_path, resource) as ws:
        yield ws


def controls_then_chunks(transcript: PtyTranscript, seen: Seen, *, gap: bool) -> None:
    expected: list[dict[str, Any]] = [{"type": "seq", "seq": seen.last_seq}]
    assert transcript.controls == [*expected, GAP] if gap else expected
    seqs = transcript.seqs
    assert seqs == sorted(set(seqs)) and all(s > seen.last_seq for s in seqs), seqs


async def kernel_stdin(sim: KubeSim, session_id: str, data: bytes) -> None:
    """Write to the session container's stdin on the node, with no runnerd."""
    assert sim.kubelet is not None
    worker = next(w for w in sim.kubelet._workers.values() if w.name == f"runnerd-{session_id}")
    await worker.processes["session"].write_stdin(data)


async def wait_container_ended(sim: KubeSim, session_id: str) -> None:
    def ended() -> bool:
        pod = sim.store.get("pods", "runnerd", f"runnerd-{session_id}")
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
        return any("terminated" in (s.get("state") or {}) for s in statuses)

    with trio.fail_after(TIMEOUT_S):
        async with sim.store.subscribe() as changes:
            while not ended():
                await changes.receive()


async def continue_live(
    daemon: Daemon, client: httpx.AsyncClient, seen: Seen, *, gap: bool
) -> None:
    """A client that knew `seen` resumes both streams, types into the same
    process, sees its echo and then its exit code."""
    got = await client.get(f"/v1/sessions/{seen.session_id}")
    assert got.status_code == 200 and got.json()["status"]["kind"] == "running", got.text
    async with resumed_pty(daemon, seen) as ws:
        transcript = await read_pty(ws, until=b"runnerd restarted", timeout_s=TIMEOUT_S)
        await ws.send_message(b"two\n")
        await read_pty(ws, transcript, until=b"got:two", timeout_s=TIMEOUT_S)
        await ws.send_message(b"quit\n")
        await read_pty(ws, transcript, timeout_s=TIMEOUT_S)  # to the close
    controls_then_chunks(transcript, seen, gap=gap)
    assert b"got:one" not in transcript.output  # seen before: not replayed
    frames = await resume_events(client, seen, "exited")
    assert_resumed(frames, seen, gap=gap)
    assert frames[-1].data["status"] == {"kind": "exited", "code": 7}


async def test_sigkill_restart_readopts_live_sessions_and_reports_a_finished_one(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as first, first.client() as client:
        ids = [await start_telo(client, script) for script in (ECHO, ECHO, FINISHER)]
        seen = [await use_before(first, client, session_id) for session_id in ids[:2]]
        await wait_status(client, ids[2], "running", timeout_s=TIMEOUT_S)
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
    # While no runnerd runs, the third session ends on its own.
    await kernel_stdin(kubesim, ids[2], b"quit\n")
    await wait_container_ended(kubesim, ids[2])
    async with kube_daemon(kubesim, tmp_path) as second, second.client() as client:
        finished = await client.get(f"/v1/sessions/{ids[2]}")
        assert finished.json()["status"] == {"kind": "exited", "code": 3}, finished.text
        await wait_pods(kubesim, lambda pods: f"runnerd-{ids[2]}" not in pods, TIMEOUT_S)
        for one in seen:
            await continue_live(second, client, one, gap=True)
        await wait_pods(kubesim, lambda pods: not pods, TIMEOUT_S)
    assert list((tmp_path / "state").iterdir()) == []


async def test_detach_restart_replays_the_saved_history_with_no_gap(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as first, first.client() as client:
        ids = [await start_telo(client, ECHO) for _ in range(3)]
        seen = [await use_before(first, client, session_id) for session_id in ids]
        assert await first.stop(signal.SIGUSR2) == 75
    assert sorted(session_pods(kubesim)) == sorted(f"runnerd-{i}" for i in ids)
    async with kube_daemon(kubesim, tmp_path) as second, second.client() as client:
        # A client from scratch gets the whole history again, `one` included.
        whole = await read_from(second, ids[0], 0, b"got:one")
        assert whole.controls == [{"type": "seq", "seq": 0}] and whole.seqs[0] == 1
        for one in seen[:2]:
            await continue_live(second, client, one, gap=False)
        await wait_pods(kubesim, lambda pods: pods == [f"runnerd-{ids[2]}"], TIMEOUT_S)
    # SIGTERM (the harness's stop, exit 0) still stops an adopted session.
    assert session_pods(kubesim) == []


async def test_reap_on_restart_deletes_what_the_previous_run_left(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as first, first.client() as client:
        session_id = await start_telo(client, ECHO)
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        assert await first.stop(signal.SIGUSR2) == 75
    assert session_pods(kubesim) == [f"runnerd-{session_id}"]
    async with (
        kube_daemon(kubesim, tmp_path, on_restart="reap") as second,
        second.client() as client,
    ):
        await wait_pods(kubesim, lambda pods: not pods, TIMEOUT_S)
        assert (await client.get(f"/v1/sessions/{session_id}")).status_code == 404


@pytest.mark.slow
async def test_health_answers_while_recovery_waits_on_a_silent_apiserver(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as first, first.client() as client:
        session_id = await start_telo(client, ECHO)
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        assert await first.stop(signal.SIGUSR2) == 75
    kubesim.faults.go_silent()
    try:
        async with kube_daemon(kubesim, tmp_path) as second, second.client() as client:
            with trio.fail_after(2.0):
                health = await client.get("/v1/health")
            assert health.status_code == 200
            # An id the client knew: held while recovery runs, never a quick 404.
            start = trio.current_time()
            held = await client.get(f"/v1/sessions/{session_id}")
            assert held.status_code == 404 and trio.current_time() - start >= 4.0
            # The apiserver comes back (a restart: the list it sat on is cut,
            # so the informer re-lists at once rather than at its read timeout).
            kubesim.faults.resume()
            await kubesim.faults.restart()
            # Each GET is held until recovery ends (or 5 s): no busy loop.
            with trio.fail_after(TIMEOUT_S):
                while (await client.get(f"/v1/sessions/{session_id}")).status_code == 404:
                    pass
            await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
            await client.delete(f"/v1/sessions/{session_id}")
            await wait_pods(kubesim, lambda pods: not pods, TIMEOUT_S)
    finally:
        kubesim.faults.resume()


def left_watch_pod(session_id: str) -> dict[str, Any]:
    """A watch session's pod a previous daemon left: no session container,
    a name of its own (as `build_watch_pod` makes them)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"runnerd-{session_id}-a1b2c3",
            "labels": {
                "app.kubernetes.io/managed-by": "runnerd",
                "runnerd.telo.run/session-id": session_id,
                "runnerd.telo.run/mode": "watch",
            },
            "annotations": {"runnerd.telo.run/kind": "watch"},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "workspace", "image": KERNEL, "command": ["telo", "run", "x"]}],
        },
    }


async def test_recovery_leaves_a_watch_pod_to_the_watch_adoption(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as first, first.client() as client:
        session_id = await start_telo(client, ECHO)
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
    watch = left_watch_pod("wwwwwwww2345")
    await kubesim.store.create("pods", "runnerd", watch)
    async with kube_daemon(kubesim, tmp_path) as second, second.client() as client:
        # The run session is back: recovery ran, and it did not take the
        # watch pod for an unreadable run pod (it has no session container).
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        assert watch["metadata"]["name"] in session_pods(kubesim)
        assert (await client.get("/v1/sessions/wwwwwwww2345")).status_code == 404
        await client.delete(f"/v1/sessions/{session_id}")
        await wait_pods(kubesim, lambda pods: pods == [watch["metadata"]["name"]], TIMEOUT_S)
    await kubesim.store.delete("pods", "runnerd", watch["metadata"]["name"], grace_period_s=0)
