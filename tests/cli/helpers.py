"""Driving the `runnerd` CLI as a user does: a subprocess on the daemon's socket."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any

import trio

from tests.harness import Daemon, iter_sse, session_body

RUNNERD = [sys.executable, "-m", "runnerd"]


def cli_env(daemon: Daemon, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Our environment, minus systemd's variables, pointed at `daemon`."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("NOTIFY_", "LISTEN_", "WATCHDOG_"))
    }
    env["RUNNERD_SOCKET"] = str(daemon.socket_path)
    env.update(extra or {})
    return env


async def cli(
    daemon: Daemon, *args: str, stdin: bytes = b"", timeout_s: float = 20.0
) -> subprocess.CompletedProcess[bytes]:
    """`runnerd ARGS` against `daemon`, stdin from `stdin` (a pipe, not a terminal)."""
    with trio.fail_after(timeout_s):
        return await trio.run_process(
            [*RUNNERD, *args],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=cli_env(daemon),
        )


async def start(daemon: Daemon, script: str, **kwargs: Any) -> str:
    async with daemon.client() as client:
        response = await client.post("/v1/sessions", json=session_body(script, **kwargs))
    assert response.status_code == 201, response.text
    session_id: str = response.json()["sessionId"]
    return session_id


async def wait_status(daemon: Daemon, session_id: str, kinds: tuple[str, ...]) -> dict[str, Any]:
    """Follow the event stream until the status is one of `kinds`; that status."""
    async with (
        daemon.client() as client,
        client.stream("GET", f"/v1/sessions/{session_id}/events") as events,
    ):
        with trio.fail_after(10):
            async with contextlib.aclosing(iter_sse(events)) as frames:
                async for frame in frames:
                    if frame.event == "status" and frame.data["status"]["kind"] in kinds:
                        status: dict[str, Any] = frame.data["status"]
                        return status
    raise AssertionError(f"{session_id} ended without reaching {kinds}")


class Background:
    """A CLI process whose stdout and stderr are collected as they arrive."""

    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self.stdout = b""
        self.stderr = b""
        self._changed = trio.Event()

    async def wait_for(self, text: bytes, timeout_s: float = 10.0) -> None:
        """Until `text` appeared on stdout or stderr."""
        with trio.fail_after(timeout_s):
            while text not in self.stdout and text not in self.stderr:
                await self._changed.wait()

    async def _drain(self, stream: trio.abc.ReceiveStream, name: str) -> None:
        async with stream:
            while chunk := await stream.receive_some(65536):
                setattr(self, name, getattr(self, name) + chunk)
                self._changed.set()
                self._changed = trio.Event()


@contextlib.asynccontextmanager
async def background_cli(daemon: Daemon, *args: str) -> AsyncIterator[Background]:
    """`runnerd ARGS` running for the block (stdin an open pipe: no end of input);
    killed at the end if it is still running."""
    proc = await trio.lowlevel.open_process(
        [*RUNNERD, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(daemon),
    )
    background = Background(proc)
    assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(background._drain, proc.stdout, "stdout")
            nursery.start_soon(background._drain, proc.stderr, "stderr")
            yield background
            with trio.fail_after(10):
                await proc.wait()
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            await proc.stdin.aclose()
