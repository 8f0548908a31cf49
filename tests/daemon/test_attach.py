"""`runnerd attach`: a session's terminal on stdout, stdin to the session."""

from __future__ import annotations

import subprocess
import sys

import trio

from tests.harness import Daemon, iter_sse, session_body


async def attach(
    daemon: Daemon, session_id: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(15):
        return await trio.run_process(
            [
                sys.executable,
                "-m",
                "runnerd",
                "attach",
                session_id,
                "--socket",
                str(daemon.socket_path),
            ],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


async def start(daemon: Daemon, script: str) -> str:
    async with daemon.client() as client:
        response = await client.post("/v1/sessions", json=session_body(script))
    assert response.status_code == 201, response.text
    session_id: str = response.json()["sessionId"]
    return session_id


async def test_attach_sends_stdin_and_ends_with_the_session(runnerd: Daemon) -> None:
    session_id = await start(runnerd, 'read line; echo "got <$line>"')
    result = await attach(runnerd, session_id, stdin=b"typed text\n")
    assert result.returncode == 0, result.stderr
    assert b"got <typed text>" in result.stdout
    async with runnerd.client() as client:
        status = (await client.get(f"/v1/sessions/{session_id}")).json()["status"]
    assert status == {"kind": "exited", "code": 0}


async def test_attach_end_of_stdin_is_end_of_input_for_the_workload(runnerd: Daemon) -> None:
    session_id = await start(runnerd, "cat; echo cat-done")
    result = await attach(runnerd, session_id, stdin=b"one\ntwo\n")
    assert result.returncode == 0, result.stderr
    assert b"cat-done" in result.stdout


async def test_attach_replays_a_finished_session(runnerd: Daemon) -> None:
    session_id = await start(runnerd, "echo finished-output")
    async with (
        runnerd.client() as client,
        client.stream("GET", f"/v1/sessions/{session_id}/events") as events,
    ):
        with trio.fail_after(10):
            frames = [frame async for frame in iter_sse(events)]  # ends at terminal status
    assert frames[-1].data["status"]["kind"] == "exited"
    result = await attach(runnerd, session_id)
    assert result.returncode == 0, result.stderr
    assert b"finished-output" in result.stdout


async def test_attach_to_an_unknown_session_fails_naming_it(runnerd: Daemon) -> None:
    result = await attach(runnerd, "nosuchsession")
    assert result.returncode == 1
    # The words `logs` and `events` use, not the channel's raw close code.
    assert result.stderr.strip() == b"runnerd: no session 'nosuchsession' (see `runnerd ls -a`)"
