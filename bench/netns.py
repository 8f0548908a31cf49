"""`python -m bench netns`: the price of a network namespace per session.

Runs the same two measurements against three daemons side by side, taking
turns session by session, one per `[local] network` mode: `host` (no
network namespace: the reference, what sessions cost before), `none` (the
namespace and its loopback) and `isolated` (the namespace, and slirp4netns
per session when installed):

- `POST /v1/sessions` → `running` (a status poll), sequential, p50 / p99;
- host memory per idle session: the PSS of the session's processes (the
  two nsinit processes, `sleep`, and slirp4netns), and the daemon's own
  RSS growth, over `n` idle sessions;
- a declared port's throughput from the host: the workload sends 256 MiB
  on one connection; with `host` the client reads the workload's own
  socket, otherwise the daemon's published port spliced into the namespace.

Figures are printed as ratios to `host` measured in the same run, with the
load average, never asserted.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import time
from pathlib import Path

import httpx
import trio

from bench.harness import (
    open_daemon,
    percentile,
    python_bundle,
    rss_bytes,
    sh_bundle,
    start_session,
)

Row = tuple[str, str, str]
MODES = ("host", "none", "isolated")


def _pss_kb(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def _session_pids(daemon_pid: int, marker: str) -> list[int]:
    """The daemon's descendants that are a session's (nsinit, its init, the
    workload with `marker`, slirp4netns)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == daemon_pid:
                return True
        return False

    return [pid for pid in parents if descends(pid)]


async def _running(client: httpx.AsyncClient, sid: str) -> None:
    while True:
        r = await client.get(f"/v1/sessions/{sid}")
        if r.json()["status"]["kind"] == "running":
            return
        await trio.sleep(0.002)


async def _measure(n: int) -> dict[str, tuple[list[float], float, float]]:
    """Per mode: start latencies, PSS per session (KB), daemon RSS growth per
    session (KB). The three daemons run side by side and take turns, one
    session each, so load on the machine falls on all of them alike."""
    marker = f"3600.{secrets.randbelow(10**6):06d}"
    async with contextlib.AsyncExitStack() as stack:
        daemons, clients, base_rss = {}, {}, {}
        for mode in MODES:
            d = await stack.enter_async_context(
                open_daemon(max_sessions=n + 8, local_extra=f'network = "{mode}"')
            )
            daemons[mode], clients[mode] = d, await stack.enter_async_context(d.client())
        await trio.sleep(0.5)
        for mode, d in daemons.items():
            base_rss[mode] = rss_bytes(d.proc.pid)
        samples: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(n):
            for mode in MODES:
                t0 = time.perf_counter()
                sid = await start_session(clients[mode], sh_bundle(f"exec sleep {marker}\n"))
                await _running(clients[mode], sid)
                samples[mode].append(time.perf_counter() - t0)
        await trio.sleep(1.0)
        results = {}
        for mode, d in daemons.items():
            pss = sum(_pss_kb(pid) for pid in _session_pids(d.proc.pid, marker))
            grown = (rss_bytes(d.proc.pid) - base_rss[mode]) / 1000
            results[mode] = (samples[mode], pss / n, grown / n)
    return results


SENDER = """
import socket
server = socket.create_server(("127.0.0.1", PORT))
chunk = bytes(1 << 16)
while True:  # the reachability probe connects (and leaves) first
    conn, _ = server.accept()
    try:
        for _ in range(TOTAL >> 16):
            conn.sendall(chunk)
        break
    except OSError:
        pass
    finally:
        conn.close()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _port_rate(mode: str, total_bytes: int) -> float:
    """MB/s from the host reading `total_bytes` off a declared port."""
    port = _free_port()
    source = SENDER.replace("PORT", str(port)).replace("TOTAL", str(total_bytes))
    body = python_bundle(source)
    body["ports"] = [{"port": port, "protocol": "tcp"}]
    async with open_daemon(local_extra=f'network = "{mode}"') as d, d.client() as client:
        sid = await start_session(client, body)
        await _running(client, sid)
        with trio.fail_after(120):
            while True:  # until the workload listens (nothing answers before)
                with contextlib.suppress(OSError, trio.BrokenResourceError):
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                    if first := await stream.receive_some(1 << 16):
                        break
                    await stream.aclose()
                await trio.sleep(0.05)
            t0, got = time.perf_counter(), len(first)
            async with stream:
                while chunk := await stream.receive_some(1 << 20):
                    got += len(chunk)
            rate = got / (time.perf_counter() - t0) / 1e6
        await client.delete(f"/v1/sessions/{sid}")
    return rate


async def bench_netns(n: int = 50, total_bytes: int = 256 << 20) -> list[Row]:
    direct = await _port_rate("host", total_bytes)
    spliced = await _port_rate("isolated", total_bytes)
    results = await _measure(n)
    load = "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    tool = "slirp4netns" if shutil.which("slirp4netns") else "no slirp4netns"
    ref_lat, ref_pss, _ = results["host"]
    rows: list[Row] = []
    for mode, (lat, pss, grown) in results.items():
        p50, p99 = percentile(lat, 50) * 1000, percentile(lat, 99) * 1000
        ratio = p50 / (percentile(ref_lat, 50) * 1000)
        rows.append((
            f"network={mode}: POST → running p50 / p99 ({n} sessions)",
            f"{p50:.1f} / {p99:.1f} ms (×{ratio:.2f} of host)",
            f"{load}, {tool}",
        ))  # fmt: skip
        rows.append((
            f"network={mode}: host memory per idle session (PSS; daemon RSS growth)",
            f"{pss / 1000:.2f} MB (×{pss / ref_pss:.2f} of host); {grown:.0f} KB",
            "—",
        ))  # fmt: skip
    rows.append((
        f"a declared port, {total_bytes >> 20} MiB to the host: direct (host) / published",
        f"{direct:.0f} / {spliced:.0f} MB/s (×{spliced / direct:.2f})",
        load,
    ))  # fmt: skip
    return rows
