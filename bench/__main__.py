"""`make bench`: runnerd's speed and memory figures, printed as a table.

Each benchmark runs against a real daemon subprocess over its UNIX socket
with real workloads under real PTYs. Figures are printed, never asserted;
the targets come from issue 2 and are shown beside each figure.

Run one with `python -m bench NAME` (names: startup, latency, throughput,
idle, cli, connections, bodies, netns, workspace, watch, watchlocal, kuberun,
spawn); no name runs them all.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from bench.cli import bench_cli
from bench.edge import bench_bodies, bench_connections
from bench.harness import (
    open_daemon,
    percentile,
    rss_bytes,
    sh_bundle,
    start_session,
    wait_status,
)
from bench.kuberun import bench_kuberun
from bench.netns import bench_netns
from bench.spawn import bench_spawn
from bench.startup import bench_startup
from bench.throughput import bench_throughput
from bench.watch import bench_watch
from bench.watchlocal import bench_watchlocal
from bench.workspace import bench_workspace

MB = 1_000_000
Row = tuple[str, str, str]


SIZED = {"x-runnerd-terminal-size": "132x43"}


async def _post_to_running(client: Any, headers: dict[str, str] | None) -> float:
    t0 = time.perf_counter()
    sid = await start_session(client, sh_bundle("exec sleep 60\n"), headers)
    await wait_status(client, sid, {"running"})
    elapsed = time.perf_counter() - t0
    await client.delete(f"/v1/sessions/{sid}")
    return elapsed


async def bench_latency(n: int = 200) -> list[Row]:
    """POST /v1/sessions → `running` on the SSE stream, sequentially, in three
    ways taken in turn (so machine load falls on each alike): the reference
    `local.terminal_size_wait_seconds = 0` (no wait for a first size: as
    before it existed), and on the default wait a POST with its size
    (`x-runnerd-terminal-size`) and one without (nobody attaches)."""
    ways: dict[str, list[float]] = {"no wait": [], "default, sized": [], "default, unsized": []}
    async with (
        open_daemon(max_sessions=n + 8, size_wait_s=0) as ref, ref.client() as reference,
        open_daemon(max_sessions=n + 8) as d, d.client() as client,
    ):  # fmt: skip
        for _ in range(n):
            ways["no wait"].append(await _post_to_running(reference, None))
            ways["default, sized"].append(await _post_to_running(client, SIZED))
            ways["default, unsized"].append(await _post_to_running(client, None))
    base = percentile(ways["no wait"], 50)
    rows: list[Row] = []
    for way, samples in ways.items():
        p50, p99 = percentile(samples, 50), percentile(samples, 99)
        ratio = "" if way == "no wait" else f", p50 {p50 / base:.2f}× the no-wait one"
        rows.append(
            (f"POST → running ({way}; {n} sessions)",
             f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms{ratio}", "—")
        )  # fmt: skip
    return rows


def _marker_pids(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            pids.append(int(entry.name))
    return pids


async def _start_idle_sessions(n: int) -> tuple[list[Row], float, int]:
    """Start n idle sessions; return rows, SIGTERM→exit seconds, survivors."""
    marker = f"3600.{secrets.randbelow(10**6):06d}"
    rows: list[Row] = []
    async with open_daemon(max_sessions=n + 8, replay_buffer_bytes=65536) as d:
        async with d.client() as client:
            await trio.sleep(0.5)
            base_rss = rss_bytes(d.proc.pid)
            ids: list[str] = []

            async def worker(count: int) -> None:
                for _ in range(count):
                    ids.append(await start_session(client, sh_bundle(f"exec sleep {marker}\n")))

            t0 = time.perf_counter()
            async with trio.open_nursery() as nursery:
                per = n // 8
                for i in range(8):
                    nursery.start_soon(worker, per + (1 if i < n % 8 else 0))
            with trio.fail_after(300):
                for sid in ids:
                    # A status poll, not a stream per session: 1,000 open SSE
                    # streams would measure the client, not the daemon.
                    while True:
                        r = await client.get(f"/v1/sessions/{sid}")
                        if r.json()["status"]["kind"] == "running":
                            break
                        await trio.sleep(0.01)
            start_all_s = time.perf_counter() - t0
            await trio.sleep(1.0)
            loaded_rss = rss_bytes(d.proc.pid)
        live = len(_marker_pids(marker))
        shutdown_s = await d.terminate()
    survivors = len(_marker_pids(marker))
    per_session = (loaded_rss - base_rss) / n
    rows += [
        (f"start {n} idle sessions (8 clients)", f"{start_all_s:.1f} s ({live} workloads)", "—"),
        (f"RSS with {n} idle sessions", f"{loaded_rss / MB:.1f} MB", "—"),
        ("RSS per idle session", f"{per_session / 1000:.1f} KB", "≤ 100 KB"),
    ]
    return rows, shutdown_s, survivors


async def bench_idle(n: int = 1000) -> list[Row]:
    rows, shutdown_s, survivors = await _start_idle_sessions(n)
    rows.append(
        (
            f"SIGTERM → exit with {n} live sessions",
            f"{shutdown_s:.2f} s ({survivors} workloads left)",
            "≤ 5 s",
        )
    )
    return rows


BENCHES: dict[str, Callable[[], Awaitable[list[Row]]]] = {
    "startup": bench_startup,
    "latency": bench_latency,
    "throughput": bench_throughput,
    "idle": bench_idle,
    "cli": bench_cli,
    "connections": bench_connections,
    "bodies": bench_bodies,
    "netns": bench_netns,
    "workspace": bench_workspace,
    "watch": bench_watch,
    "watchlocal": bench_watchlocal,
    "kuberun": bench_kuberun,
    "spawn": bench_spawn,
}


async def main(names: list[str]) -> None:
    rows: list[Row] = []
    for name in names or list(BENCHES):
        print(f"running {name} …", file=sys.stderr, flush=True)
        rows += await BENCHES[name]()
    print(f"\nmachine: {os.cpu_count()} cores, Python {sys.version.split()[0]}\n")
    print("| benchmark | measured | target |")
    print("|---|---|---|")
    for what, figure, target in rows:
        print(f"| {what} | {figure} | {target} |")


if __name__ == "__main__":
    trio.run(main, sys.argv[1:])
