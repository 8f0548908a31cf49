"""Helpers for the edge tests: a daemon with a TCP listener, raw HTTP bytes.

`tcp_daemon(tmp_path, overrides)` is `start_daemon` with a loopback TCP
listener on a free port next to the UNIX socket; it yields `(daemon, port)`.
`raw_exchange(port, request)` sends exact bytes over TCP and returns what the
server sent until it closed the connection or went quiet, for checks no
HTTP client exposes (status lines, a body-less 204, a refused Host).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import trio

from tests.harness import Daemon, _merge, start_daemon


@contextlib.asynccontextmanager
async def tcp_daemon(
    tmp_path: Path, overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> AsyncIterator[tuple[Daemon, int]]:
    # A short directory: AF_UNIX paths are limited to 108 bytes.
    sock_dir = Path(tempfile.mkdtemp(prefix="rd-", dir="/tmp"))
    socket_path = sock_dir / "runnerd.sock"
    base = {"server": {"listen": [f"unix:{socket_path}", "tcp:127.0.0.1:0"]}}
    try:
        async with start_daemon(
            tmp_path, _merge(base, overrides or {}), socket_path=socket_path, env=env
        ) as daemon:
            # The API listener's, from the "serving" line (on kubernetes the
            # bundle listener is a tcp: address too).
            serving = r"serving listen=\"[^\"]*tcp:127\.0\.0\.1:(\d+)"
            match = re.search(serving, daemon.stderr_text())
            assert match, daemon.stderr_text()
            yield daemon, int(match.group(1))
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)


async def raw_exchange(
    port: int, request: bytes, quiet_s: float = 1.0, until: bytes | None = None
) -> bytes:
    """Send `request`; collect the answer until EOF, `quiet_s` of silence, or
    (when given) `until` has arrived."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    received = bytearray()
    async with stream:
        await stream.send_all(request)
        while True:
            with trio.move_on_after(quiet_s):
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                received += chunk
                if until is None or until not in received:
                    continue
            break
    return bytes(received)
