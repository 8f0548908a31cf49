"""Edge benchmarks (issue 6): idle connections and large bodies.

- `connections`: 2,000 clients each send one request and then hold their
  keep-alive connection open doing nothing; meanwhile `/v1/health` latency
  is measured on fresh connections (p50/p99 of 200), and the daemon's open
  descriptors and RSS are read.
- `bodies`: 100 `POST /v1/sessions` bodies of 16 MiB (just under the
  default `max_body_bytes`: one large bundle file, refused at the image
  check so nothing runs) from 4 clients at once; RSS idle, at its peak, and
  2 s after the last answer.

Figures are printed, never asserted.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import trio

from bench.harness import Daemon, open_daemon, percentile, rss_bytes

MB = 1_000_000
Row = tuple[str, str, str]
IDLE_CLIENTS = 2000
PROBES = 200
BODIES = 100
CLIENTS = 4
PROBE_TIMEOUT_S = 2.0
BODY_BYTES = 16 * 1024 * 1024 - 4096


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def _idle_client(
    sock: Path, pace: trio.CapacityLimiter, held: list[trio.SocketStream]
) -> None:
    """One request, then keep the connection open and silent."""
    async with pace:
        with trio.move_on_after(PROBE_TIMEOUT_S):
            try:
                stream = await trio.open_unix_socket(str(sock))
                await stream.send_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
                if await stream.receive_some(4096):
                    held.append(stream)
                    return
                await stream.aclose()
            except (OSError, trio.BrokenResourceError):
                pass  # refused or reset: the daemon is shedding connections


async def _health_once(sock: Path) -> float:
    """One GET /v1/health on a fresh connection (raw bytes: an HTTP client's
    own set-up would dominate the figure)."""
    t0 = time.perf_counter()
    async with await trio.open_unix_socket(str(sock)) as stream:
        await stream.send_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        answer = b""
        while not answer.endswith(b"}"):
            chunk = await stream.receive_some(4096)
            if not chunk:
                raise RuntimeError(f"connection closed; got {answer!r}")
            answer += chunk
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"health answered {answer[:40]!r}")
    return time.perf_counter() - t0


async def _health_latencies(d: Daemon) -> tuple[list[float], int]:
    """Latencies of the probes answered within PROBE_TIMEOUT_S, and how many were not."""
    samples, unanswered = [], 0
    for _ in range(PROBES):
        with trio.move_on_after(PROBE_TIMEOUT_S):
            try:
                samples.append(await _health_once(d.socket_path))
                continue
            except (OSError, trio.BrokenResourceError, RuntimeError):
                pass  # refused, reset or closed unanswered
        unanswered += 1
    return samples, unanswered


def _ms(values: list[float], pct: float) -> str:
    return f"{percentile(values, pct) * 1000:.1f} ms" if values else "—"


async def _connections(prefix: tuple[str, ...]) -> list[Row]:
    async with open_daemon(prefix=prefix) as d:
        baseline, _ = await _health_latencies(d)
        held: list[trio.SocketStream] = []
        # 50 connecting at a time: a steady stream of clients, not a burst
        # the listen backlog alone would refuse.
        pace = trio.CapacityLimiter(50)
        async with trio.open_nursery() as nursery:
            for _ in range(IDLE_CLIENTS):
                nursery.start_soon(_idle_client, d.socket_path, pace, held)
        loaded, unanswered = await _health_latencies(d)
        fds, rss, answered = _open_fds(d.proc.pid), rss_bytes(d.proc.pid), len(held)
        for stream in held:
            await trio.aclose_forcefully(stream)
    where = " (nofile 1024)" if prefix else ""
    return [
        (f"/v1/health on a fresh connection, p50 / p99, no other clients{where}",
         f"{_ms(baseline, 50)} / {_ms(baseline, 99)}", "—"),
        (f"the same with {IDLE_CLIENTS} idle keep-alive clients{where}",
         f"{_ms(loaded, 50)} / {_ms(loaded, 99)}, {unanswered} of {PROBES} unanswered", "—"),
        (f"idle clients answered (of {IDLE_CLIENTS}) / daemon fds / RSS{where}",
         f"{answered} / {fds} / {rss / MB:.1f} MB", "—"),
    ]  # fmt: skip


async def bench_connections() -> list[Row]:
    return await _connections(()) + await _connections(("prlimit", "--nofile=1024:1024"))


async def bench_bodies() -> list[Row]:
    # A 16 MiB bundle refused at its last check (an image the runner does not
    # offer): the whole body is read, parsed, validated and admitted up to
    # the image, in every runnerd version, and no workload runs.
    pad = "x" * (BODY_BYTES - 200)
    body = json.dumps({
        "env": {}, "config": {"image": "no-such-image", "pullPolicy": "missing"},
        "bundle": {"entryRelativePath": "main.sh",
                   "files": [{"relativePath": "main.sh", "contents": pad}]},
    }).encode()  # fmt: skip
    async with open_daemon() as d:
        await trio.sleep(0.5)
        idle = rss_bytes(d.proc.pid)
        peak = idle

        async def send(count: int) -> None:
            nonlocal peak
            async with d.client() as client:
                for _ in range(count):
                    response = await client.post(
                        "/v1/sessions", content=body, headers={"content-type": "application/json"}
                    )
                    if response.json().get("error") != "invalid_config":
                        raise RuntimeError(f"start: {response.status_code} {response.text}")
                    peak = max(peak, rss_bytes(d.proc.pid))

        async with trio.open_nursery() as nursery:  # a few clients at once, as in real use
            for _ in range(CLIENTS):
                nursery.start_soon(send, BODIES // CLIENTS)
        await trio.sleep(2)
        after = rss_bytes(d.proc.pid)
    return [
        (f"RSS idle → peak → 2 s after {BODIES} × 16 MiB bodies",
         f"{idle / MB:.0f} → {peak / MB:.0f} → {after / MB:.0f} MB", "near idle after"),
    ]  # fmt: skip
