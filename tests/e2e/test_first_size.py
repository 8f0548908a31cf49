"""A workload's first terminal size is its client's, from its first byte.

A client that sends its size as it attaches (a resize right after its POST),
or that gives it on the POST (`x-runnerd-terminal-size`), must not have the
program see 80x24 first and the real size half a second later: `stty size`
as the program's first command prints the client's size. On the local
backend the spawn waits for that size, bounded by
`local.terminal_size_wait_seconds` from the session's creation; the status
stays `starting` meanwhile, a stop ends the wait, and a session no client
attaches to still starts (at 80x24) once the window has passed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.harness import Daemon, iter_sse, open_ws, read_pty_until, session_body, start_daemon
from tests.shared_daemon import OnBackend

SHOW_SIZE = "stty size; exec sleep 30"
# Long, so that a test passes only if the size (or a stop) ends the wait,
# never the window: a wrong result would take 30 s and print "24 80".
LONG_WAIT = {"local": {"terminal_size_wait_seconds": 30}}


def local_only(on_backend: OnBackend) -> None:
    # A pod's container starts when the kubelet starts it, whether or not the
    # attach that carries the size is up yet (the test cluster starts it at
    # once): a program that reads its size at its first instant may see 0x0
    # there, as on a real cluster. The promise is the local backend's.
    if on_backend.name == "kubernetes":
        pytest.skip("the first size is the local backend's promise (README: Kubernetes)")


def first_line(output: bytes) -> bytes:
    return output.split(b"\r\n", 1)[0].split(b"\n", 1)[0]


async def post(daemon: Daemon, script: str, headers: dict[str, str] | None = None) -> Any:
    async with daemon.client() as client:
        return await client.post("/v1/sessions", json=session_body(script), headers=headers)


async def test_a_resize_sent_right_after_the_post_is_the_programs_first_size(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    local_only(on_backend)
    async with start_daemon(tmp_path, on_backend.overrides(LONG_WAIT)) as daemon:
        response = await post(daemon, SHOW_SIZE)
        session_id = response.json()["sessionId"]
        output = b""
        with trio.fail_after(20):
            async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
                await ws.send_message(json.dumps({"type": "resize", "cols": 132, "rows": 43}))
                while b"\n" not in output:
                    message = await ws.get_message()
                    if isinstance(message, bytes):
                        output += message[4:]
        assert first_line(output) == b"43 132"
        async with daemon.client() as client:
            await client.delete(f"/v1/sessions/{session_id}")


async def test_the_posts_terminal_size_header_is_the_programs_first_size(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    local_only(on_backend)
    async with start_daemon(tmp_path, on_backend.overrides(LONG_WAIT)) as daemon:
        response = await post(daemon, SHOW_SIZE, {"x-runnerd-terminal-size": "100x30"})
        assert response.status_code == 201, response.text
        session_id = response.json()["sessionId"]
        output = await read_pty_until(daemon.socket_path, session_id, rb"\d+ \d+\r?\n")
        assert first_line(output) == b"30 100"
        async with daemon.client() as client:
            await client.delete(f"/v1/sessions/{session_id}")


@pytest.mark.parametrize("value", ["132", "0x43", "132x", "ax43", "132x43x1", "-1x5", "1" * 20])
async def test_a_bad_terminal_size_header_is_refused_naming_it(
    runnerd_local: Daemon, value: str
) -> None:
    response = await post(runnerd_local, SHOW_SIZE, {"x-runnerd-terminal-size": value})
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert "x-runnerd-terminal-size: must be COLSxROWS" in response.json()["message"]
    async with runnerd_local.client() as client:
        assert (await client.get("/v1/sessions")).json()["sessions"] == []


@pytest.fixture
async def runnerd_local(tmp_path: Path) -> Any:
    async with start_daemon(tmp_path) as daemon:
        yield daemon


# Local backend only from here: the wait is the local spawn's.


async def test_a_stop_during_the_wait_stops_it_and_it_never_ran(tmp_path: Path) -> None:
    async with start_daemon(tmp_path, LONG_WAIT) as daemon, daemon.client() as client:
        session_id = (await post(daemon, SHOW_SIZE)).json()["sessionId"]
        # Truthful while it waits: nothing runs yet.
        assert (await client.get(f"/v1/sessions/{session_id}")).json()["status"] == {
            "kind": "starting"
        }
        with trio.fail_after(10):  # well inside the 30 s window: the stop ended it
            assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
            kinds = []
            async with client.stream("GET", f"/v1/sessions/{session_id}/events") as events:
                async for frame in iter_sse(events):
                    if frame.event == "status":
                        kinds.append(frame.data["status"]["kind"])
        assert kinds == ["starting", "stopped"]


async def test_a_session_no_client_attaches_to_starts_when_the_window_ends(
    tmp_path: Path,
) -> None:
    # The default window (the harness sets none: it removes its 0).
    async with start_daemon(tmp_path, {"local": {"terminal_size_wait_seconds": None}}) as daemon:
        session_id = (await post(daemon, SHOW_SIZE)).json()["sessionId"]
        output = await read_pty_until(daemon.socket_path, session_id, rb"\d+ \d+\r?\n")
        assert first_line(output) == b"24 80"  # nobody asked: the default size
        async with daemon.client() as client:
            await client.delete(f"/v1/sessions/{session_id}")
