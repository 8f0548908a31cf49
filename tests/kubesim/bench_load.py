"""Load figures for kubesim's README: startup, 1,000 pods, 1,000 concurrent watches.

Not a test (no assertions on timings): run it by hand on an idle machine,

    .venv/bin/python -m tests.kubesim.bench_load [--pods 1000] [--watches 1000]

The simulator runs as its own process (`python -m tests.kubesim --no-kubelet`) so its
CPU time can be read from /proc and told apart from the load generator's. Watchers
are bare TLS streams that count event lines, so the generator stays cheap.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio
import yaml

ROOT = Path(__file__).resolve().parents[2]
MARK = b'{"type":'


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Watcher:
    """One watch stream over a raw TLS connection; counts the event lines it receives."""

    def __init__(self) -> None:
        self.events = 0
        self.changed = trio.Event()

    async def run(
        self,
        host: str,
        port: int,
        ctx: ssl.SSLContext,
        token: str,
        path: str,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        stream = await trio.open_ssl_over_tcp_stream(host, port, ssl_context=ctx)
        async with stream:
            request = (
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}"
                "\r\nAccept: application/json\r\n\r\n"
            )
            await stream.send_all(request.encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += await stream.receive_some(65536)
            task_status.started()
            tail = head.split(b"\r\n\r\n", 1)[1]
            self.events += tail.count(MARK)
            keep = tail[-len(MARK) :]
            while data := await stream.receive_some(65536):
                buf = keep + data
                self.events += buf.count(MARK) - keep.count(MARK)
                keep = buf[-len(MARK) :]
                self.changed.set()
                self.changed = trio.Event()


async def bench(pods: int, watches: int, concurrency: int) -> dict[str, Any]:
    results: dict[str, Any] = {"pods": pods, "watches": watches, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="kubesim-bench-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        profile = os.environ.get("KUBESIM_PROFILE_OUT")  # profile the server process
        cmd = [
            sys.executable,
            *(["-m", "cProfile", "-o", profile] if profile else []),
            "-m",
            "tests.kubesim",
            "--listen",
            "127.0.0.1:0",
            "--no-kubelet",
            "--kubeconfig-out",
            str(kubeconfig),
        ]
        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            proc: trio.Process = await nursery.start(_run_process, cmd)
            assert proc.stdout is not None
            url = (await proc.stdout.receive_some(200)).decode().strip()
            results["standalone_start_to_url_s"] = round(time.monotonic() - started, 3)
            try:
                await _drive(results, proc.pid, url, kubeconfig, pods, watches, concurrency)
            finally:
                proc.terminate()
                await proc.wait()
                await proc.stdout.aclose()
    return results


async def _run_process(cmd: list[str], *, task_status: trio.TaskStatus[trio.Process]) -> None:
    await trio.run_process(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, check=False, task_status=task_status
    )


async def _drive(
    results: dict[str, Any],
    pid: int,
    url: str,
    kubeconfig: Path,
    pods: int,
    watches: int,
    concurrency: int,
) -> None:
    config = yaml.safe_load(await trio.Path(kubeconfig).read_text())
    token = config["users"][0]["user"]["token"]
    ctx = ssl.create_default_context()
    ctx.load_verify_locations(
        cadata=base64.b64decode(
            config["clusters"][0]["cluster"]["certificate-authority-data"]
        ).decode()
    )
    host, port = url.removeprefix("https://").split(":")
    pods_path = PODS_PATH
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=url,
        verify=ctx,
        limits=limits,
        timeout=60,
        headers={"Authorization": f"Bearer {token}"},
    ) as client:
        cpu0, t0 = cpu_s(pid), time.monotonic()
        sem = trio.Semaphore(concurrency)

        async def create(i: int) -> None:
            async with sem:
                body = {
                    "metadata": {"name": f"load-{i}", "labels": {"app": "load"}},
                    "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]},
                }
                r = await client.post(pods_path, json=body)
                r.raise_for_status()

        async with trio.open_nursery() as n:
            for i in range(pods):
                n.start_soon(create, i)
        elapsed = time.monotonic() - t0
        results["create_pods_s"] = round(elapsed, 3)
        results["create_pods_per_s"] = round(pods / elapsed)
        results["create_server_cpu_s"] = round(cpu_s(pid) - cpu0, 3)

        t0 = time.monotonic()
        listing = (await client.get(pods_path)).json()
        results["list_all_pods_s"] = round(time.monotonic() - t0, 3)
        results["list_bytes"] = len(json.dumps(listing))
        rv = listing["metadata"]["resourceVersion"]

        await _per_pod_watches(results, pid, client, (host, int(port), ctx, token), rv, watches)
        await _broadcast_watches(results, pid, client, (host, int(port), ctx, token), watches)


Target = tuple[str, int, ssl.SSLContext, str]
PODS_PATH = "/api/v1/namespaces/runnerd/pods"


async def _per_pod_watches(
    results: dict[str, Any],
    pid: int,
    client: httpx.AsyncClient,
    target: Target,
    rv: str,
    watches: int,
) -> None:
    """runnerd's shape: one watch per pod (fieldSelector metadata.name), then every pod deleted."""
    watchers = [Watcher() for _ in range(watches)]
    cpu0, t0 = cpu_s(pid), time.monotonic()
    async with trio.open_nursery() as n:
        for i, w in enumerate(watchers):
            path = (
                f"{PODS_PATH}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
                f"&fieldSelector=metadata.name%3Dload-{i}"
            )
            await n.start(w.run, *target, path)
        results["per_pod_open_watches_s"] = round(time.monotonic() - t0, 3)
        results["per_pod_open_watches_server_cpu_s"] = round(cpu_s(pid) - cpu0, 3)
        cpu0, t0 = cpu_s(pid), time.monotonic()
        sem = trio.Semaphore(50)

        async def delete(i: int) -> None:
            async with sem:
                (await client.delete(f"{PODS_PATH}/load-{i}")).raise_for_status()

        async with trio.open_nursery() as deleters:
            for i in range(watches):
                deleters.start_soon(delete, i)
        for w in watchers:  # MODIFIED (deletionTimestamp) + DELETED each
            while w.events < 2:
                await w.changed.wait()
        elapsed = time.monotonic() - t0
        results["per_pod_delete_all_and_see_s"] = round(elapsed, 3)
        results["per_pod_server_cpu_s"] = round(cpu_s(pid) - cpu0, 3)
        n.cancel_scope.cancel()


async def _broadcast_watches(
    results: dict[str, Any], pid: int, client: httpx.AsyncClient, target: Target, watches: int
) -> None:
    """Worst case: every watcher sees every event (one namespace-wide watch each)."""
    rv = (await client.get(PODS_PATH, params={"limit": 1})).json()["metadata"]["resourceVersion"]
    watchers = [Watcher() for _ in range(watches)]
    t0 = time.monotonic()
    async with trio.open_nursery() as n:
        for w in watchers:
            await n.start(w.run, *target, f"{PODS_PATH}?watch=1&resourceVersion={rv}")
        results["broadcast_open_watches_s"] = round(time.monotonic() - t0, 3)
        changes = 50
        cpu0, t0 = cpu_s(pid), time.monotonic()
        for i in range(changes):
            body = {
                "metadata": {"name": f"b-{i}"},
                "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]},
            }
            (await client.post(PODS_PATH, json=body)).raise_for_status()
        for w in watchers:
            while w.events < changes:
                await w.changed.wait()
        elapsed = time.monotonic() - t0
        delivered = sum(w.events for w in watchers)
        results["broadcast_events_delivered"] = delivered
        results["broadcast_s"] = round(elapsed, 3)
        results["broadcast_events_per_s"] = round(delivered / elapsed)
        results["broadcast_server_cpu_s"] = round(cpu_s(pid) - cpu0, 3)
        n.cancel_scope.cancel()


async def bench_in_process_startup(runs: int = 5) -> float:
    from tests.kubesim.server import open_kubesim

    best = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(runs):
            t0 = time.monotonic()
            async with open_kubesim(Path(tmp), kubelet=False):
                best = min(best, time.monotonic() - t0)
    return round(best, 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--watches", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=50)
    args = parser.parse_args()
    results = trio.run(bench, args.pods, args.watches, args.concurrency)
    results["in_process_startup_best_s"] = trio.run(bench_in_process_startup)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
