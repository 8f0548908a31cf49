"""The kernel's debug stream through a real daemon on the test cluster: event
frames reach the client as `debug` events, log frames do not, the relay
outlasts the debug server going away and coming back (no frame twice), and
the debug port is never published."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.e2e.contract_client import SSE_TIMEOUT, wait_status
from tests.harness import iter_sse, open_ws
from tests.kube.daemon import kube_daemon, start_telo, wait_no_pods
from tests.kubesim.server import KubeSim

TIMEOUT_S = 20.0
NS = "runnerd"
DOMAIN = "sessions.example.test"


async def debug_frames_until(
    client: httpx.AsyncClient, session_id: str, last: str
) -> list[dict[str, Any]]:
    """Every `debug` event's frame on the session's stream, up to kernel event `last`."""
    frames: list[dict[str, Any]] = []
    with trio.fail_after(TIMEOUT_S):
        async with client.stream(
            "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
        ) as response:
            async with contextlib.aclosing(iter_sse(response)) as sse:
                async for frame in sse:
                    if frame.event == "debug":
                        frames.append(frame.data["frame"])
                        if frames[-1].get("event") == last:
                            return frames
    raise AssertionError(f"the stream ended before {last!r}: {frames}")


async def test_debug_events_reach_the_client_but_log_frames_and_the_debug_port_do_not(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # The kernel publishes a log frame per printed line, between its events.
    script = 'print hello\nevent ready {"n":1}\nprint between\nevent done {"n":2}\nwait\n'
    ports = [{"port": 9230, "protocol": "tcp"}, {"port": 8080, "protocol": "tcp"}]
    async with (
        kube_daemon(kubesim, tmp_path, routing_base_domain=DOMAIN, routing="ingress") as daemon,
        daemon.client() as client,
    ):
        session_id = await start_telo(client, script, ports=ports, inspect=True)
        running = await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        assert running["inspectUrl"].endswith(":9230")
        frames = await debug_frames_until(client, session_id, "done")
        assert [(f["kind"], f["event"]) for f in frames] == [
            ("event", "kernel.started"),
            ("event", "ready"),
            ("event", "done"),
        ]
        assert frames[1]["data"] == {"n": 1}
        # The kernel's debug port, even when declared, is neither public nor announced.
        host = f"8080-{session_id}.{DOMAIN}"
        assert running["endpoints"] == [
            {"host": "", "port": 9230, "protocol": "tcp"},
            {"host": host, "port": 8080, "protocol": "tcp", "url": f"https://{host}"},
        ]
        [service] = kubesim.store.list("services", NS)
        assert [p["port"] for p in service["spec"]["ports"]] == [8080]
        [ingress] = kubesim.store.list("ingresses", NS)
        assert [r["host"] for r in ingress["spec"]["rules"]] == [host]
        assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
        await wait_no_pods(kubesim)


async def test_the_relay_outlasts_a_debug_server_restart_and_relays_no_frame_twice(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # The kernel waits for our "quit" (so the relay has certainly read `before`),
    # then takes its debug server down for a second: the stream is cut and
    # reconnects are refused until it is back. A new client is sent every frame
    # since the kernel started: the relay must not pass the replay on again.
    script = 'event before {"n":1}\necho\ndebug-restart 1\nprint back\nevent after {"n":2}\nwait\n'
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        session_id = await start_telo(client, script, inspect=True)
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        names: list[str] = []
        with trio.fail_after(TIMEOUT_S):
            async with (
                open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws,
                client.stream(
                    "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
                ) as response,
            ):
                async with contextlib.aclosing(iter_sse(response)) as sse:
                    async for frame in sse:
                        if frame.event != "debug":
                            continue
                        names.append(frame.data["frame"]["event"])
                        if names[-1] == "before":
                            await ws.send_message(b"quit\n")
                        if names[-1] == "after":
                            break
        assert names == ["kernel.started", "before", "after"]
        # Nothing more arrives either: replay the stream so far, ending at a status.
        got = (await client.get(f"/v1/sessions/{session_id}")).json()
        assert got["status"]["kind"] == "running"
        assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
        await wait_no_pods(kubesim)
