"""Benchmark harness: a real runnerd subprocess on a temp config, and clients.

Owns starting and stopping the daemon for a benchmark and the few client
operations the benchmarks share (start a session, wait for a status, read
the PTY channel over the UNIX socket). Benchmarks print figures; nothing
here asserts a time.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import trio
from trio_websocket import WebSocketConnection, wrap_client_stream

REPO = Path(__file__).resolve().parent.parent


def _toml_str(value: str) -> str:
    return json.dumps(value)


def build_config_text(
    base: Path,
    *,
    max_sessions: int,
    replay_buffer_bytes: int,
    local_extra: str = "",
    size_wait_s: float | None = None,
    extra: str = "",
) -> str:
    """A bench config: local backend, UNIX socket only, generous limits;
    `local_extra` is TOML added to `[local]` (e.g. `network = "host"`);
    `extra`: TOML tables added at the end (e.g. `[watch]`);
    `size_wait_s`: `local.terminal_size_wait_seconds` (None: its default)."""
    python = shutil.which("python3") or sys.executable
    size_wait = "" if size_wait_s is None else f"terminal_size_wait_seconds = {size_wait_s}"
    return f"""
[server]
listen = [{_toml_str("unix:" + str(base / "runnerd.sock"))}]
log_level = "warning"

[runner]
backend = "local"
default_image = "sh"
max_sessions = {max_sessions}
replay_buffer_bytes = {replay_buffer_bytes}

[limits.session]
cpu = "1"
memory = "1Gi"
ephemeral_storage = "1Gi"
ttl_seconds = 3600

[limits.app]
cpu = "1"
memory = "1Gi"
ephemeral_storage = "1Gi"
ttl_seconds = 3600

[local]
workdir = {_toml_str(str(base / "sessions"))}
stop_grace_seconds = 2
{local_extra}
{size_wait}

[local.runtimes.sh]
command = ["/bin/sh", "{{entry}}"]

[local.runtimes.python]
command = [{_toml_str(python)}, "-u", "{{entry}}"]
{extra}
"""


def rss_bytes(pid: int) -> int:
    """Resident set size of `pid`, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass
class Daemon:
    proc: trio.Process
    socket_path: Path
    base: Path
    started_s: float  # seconds from spawn to the first healthy answer

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=str(self.socket_path)),
            base_url="http://runnerd",
            timeout=httpx.Timeout(30.0, read=None),
        )

    async def terminate(self, *, timeout_s: float = 30.0) -> float:
        """SIGTERM and wait; returns seconds from signal to exit."""
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        with trio.move_on_after(timeout_s):
            await self.proc.wait()
            return time.perf_counter() - t0
        self.proc.kill()
        await self.proc.wait()
        return float("inf")


@asynccontextmanager
async def open_daemon(
    *,
    max_sessions: int = 64,
    replay_buffer_bytes: int = 5_000_000,
    prefix: tuple[str, ...] = (),
    local_extra: str = "",
    size_wait_s: float | None = None,
    repo: Path = REPO,
    extra: str = "",
    config: Callable[[Path], str] | None = None,
    python_flags: tuple[str, ...] = (),
    stderr: int | None = None,
) -> AsyncIterator[Daemon]:
    """Start `python -m runnerd serve` on a temp config; yield once healthy.
    `prefix` wraps the command (e.g. `prlimit --nofile=1024:1024`); `repo`:
    the checkout whose `runnerd` runs (another worktree, for a before/after);
    `config`: the whole config's text from the temp dir instead (its socket
    must be `<dir>/runnerd.sock`), e.g. a kubernetes backend's;
    `python_flags`: the interpreter's (e.g. `-X importtime`), `stderr`
    where the daemon's goes (an fd; default: ours)."""
    base = Path(tempfile.mkdtemp(prefix="runnerd-bench-"))
    try:
        cfg = base / "runnerd.toml"
        cfg.write_text(
            config(base)
            if config is not None
            else build_config_text(
                base,
                max_sessions=max_sessions,
                replay_buffer_bytes=replay_buffer_bytes,
                local_extra=local_extra,
                size_wait_s=size_wait_s,
                extra=extra,
            )
        )
        sock = base / "runnerd.sock"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NOTIFY_", "LISTEN_"))}
        t0 = time.perf_counter()
        # RUNNERD_BENCH_PROFILE=FILE runs the daemon under cProfile (`bench.profiled`).
        profile = os.environ.get("RUNNERD_BENCH_PROFILE")
        module = ("bench.profiled", profile) if profile else ("runnerd",)
        proc = await trio.lowlevel.open_process(
            [*prefix, sys.executable, *python_flags, "-m", *module, "serve", "--config", str(cfg)],
            cwd=str(repo),
            env=env,
            stderr=stderr,
        )
        try:
            started = await wait_healthy(proc, sock, t0)
            daemon = Daemon(proc=proc, socket_path=sock, base=base, started_s=started)
            yield daemon
        finally:
            if proc.returncode is None:
                await Daemon(proc, sock, base, 0.0).terminate()
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def wait_healthy(proc: trio.Process, sock: Path, t0: float) -> float:
    async with httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(uds=str(sock)), base_url="http://runnerd"
    ) as client:
        with trio.fail_after(20):
            while True:
                if proc.returncode is not None:
                    raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} during start")
                try:
                    r = await client.get("/v1/health")
                    if r.status_code == 200:
                        return time.perf_counter() - t0
                except httpx.TransportError:
                    pass  # not listening yet
                await trio.sleep(0.002)


def sh_bundle(script: str) -> dict[str, Any]:
    return {
        "env": {},
        "config": {"image": "sh", "pullPolicy": "missing"},
        "bundle": {
            "entryRelativePath": "main.sh",
            "files": [{"relativePath": "main.sh", "contents": script}],
        },
    }


def python_bundle(source: str) -> dict[str, Any]:
    return {
        "env": {},
        "config": {"image": "python", "pullPolicy": "missing"},
        "bundle": {
            "entryRelativePath": "main.py",
            "files": [{"relativePath": "main.py", "contents": source}],
        },
    }


async def start_session(
    client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str] | None = None
) -> str:
    r = await client.post("/v1/sessions", json=body, headers=headers)
    if r.status_code != 201:
        raise RuntimeError(f"POST /v1/sessions: {r.status_code} {r.text}")
    return str(r.json()["sessionId"])


async def wait_status(client: httpx.AsyncClient, sid: str, kinds: set[str]) -> dict[str, Any]:
    """Follow the session's SSE stream until a status of one of `kinds`."""
    async with client.stream("GET", f"/v1/sessions/{sid}/events") as r:
        event = ""
        async for line in r.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "status":
                status: dict[str, Any] = json.loads(line[6:])["status"]
                if status["kind"] in kinds:
                    return status
    raise RuntimeError(f"session {sid}: stream ended before {kinds}")


@asynccontextmanager
async def open_pty_channel(
    socket_path: Path, sid: str, last_seq: int = 0
) -> AsyncIterator[WebSocketConnection]:
    """The session's `/io` WebSocket over the UNIX socket."""
    stream = await trio.open_unix_socket(str(socket_path))
    async with stream, trio.open_nursery() as nursery:
        ws = await wrap_client_stream(
            nursery,
            stream,
            "localhost",
            f"/v1/sessions/{sid}/io?lastSeq={last_seq}",
            message_queue_size=64,
            max_message_size=1 << 20,
        )
        try:
            yield ws
        finally:
            await ws.aclose()


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1))))
    return ordered[k]


def upgrade_request(resource: str) -> bytes:
    """A WebSocket upgrade request for `resource` (HTTP/1.1, the socket's
    `localhost`), as a raw client writes it."""
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET {resource} HTTP/1.1\r\nHost: localhost\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


def masked_binary(payload: bytes) -> bytes:
    """One masked binary frame (a client's frames must be masked) of under
    126 bytes."""
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x82, 0x80 | len(payload)]) + mask + masked


async def drain_pty_raw(
    socket_path: Path,
    sid: str,
    *,
    send: bytes = b"",
    query: str = "",
    head_bytes: int = 4,
    until_bytes: int | None = None,
) -> tuple[int, int, float]:
    """Read the session's `/io` channel to its close with a lean raw client.

    `query` (e.g. `?app=NAME`) picks a watch session's app; `head_bytes` is
    what precedes each frame's output (4: the seq; 5 on a watch app: the
    seq and the stream byte); `until_bytes`: stop once that much output
    arrived instead of at the close (a watch app's exit does not close it).

    trio-websocket copies each message several times in Python, which makes
    the *client* the bottleneck of a throughput figure. This client only
    parses frame headers and counts payload bytes, so the figure is the
    daemon's. Returns (payload bytes after the 4-byte seqs, gap messages,
    seconds from the first byte to the close frame).
    """
    stream = await trio.open_unix_socket(str(socket_path))
    async with stream:
        await stream.send_all(upgrade_request(f"/v1/sessions/{sid}/io{query}"))
        buf = bytearray()
        while b"\r\n\r\n" not in buf:
            buf += await stream.receive_some(65536)
        head, _, rest = bytes(buf).partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(f"no upgrade: {head[:80]!r}")
        if send:
            await stream.send_all(masked_binary(send))
        buf = bytearray(rest)
        pos = received = gaps = 0
        t0: float | None = None
        while True:
            # Parse every complete frame in the buffer.
            while len(buf) - pos >= 2:
                opcode, length = buf[pos] & 0x0F, buf[pos + 1] & 0x7F
                hdr = 2
                if length == 126:
                    if len(buf) - pos < 4:
                        break
                    length, hdr = int.from_bytes(buf[pos + 2 : pos + 4], "big"), 4
                elif length == 127:
                    if len(buf) - pos < 10:
                        break
                    length, hdr = int.from_bytes(buf[pos + 2 : pos + 10], "big"), 10
                if len(buf) - pos < hdr + length:
                    break
                if opcode == 0x8:
                    return received, gaps, time.perf_counter() - (t0 or time.perf_counter())
                if opcode == 0x1:
                    gaps += b'"gap"' in buf[pos + hdr : pos + hdr + length]
                elif opcode in (0x0, 0x2):
                    if t0 is None:
                        t0 = time.perf_counter()
                    received += length - head_bytes
                    if until_bytes is not None and received >= until_bytes:
                        return received, gaps, time.perf_counter() - t0
                pos += hdr + length
            if pos:
                del buf[:pos]
                pos = 0
            data = await stream.receive_some(1 << 20)
            if not data:
                raise RuntimeError("connection ended without a close frame")
            buf += data
