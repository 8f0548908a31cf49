"""The Kubernetes backend's figures through a real daemon, on the test cluster.

`.venv/bin/python -m bench.kube [--sessions N] [--teardown N] [--endpoints]` runs the test cluster
(tests/kubesim, kubelet included) in this process and a real `runnerd serve`
on it (the kubernetes backend over TLS and the cluster's token), then drives
N sequential sessions over `/v1` (`print hello` then `exit 0`, the upstream
runner's bar): POST → the pod exists in the cluster, POST → `running` on SSE,
POST → `exited`; the apiserver requests and new connections per session; the
PTY throughput through the attach; `/v1/health` while the apiserver is
silent; then the teardown of one session and of `--teardown` N concurrent
ones, each against as many raw pod DELETEs in the same run
(`bench.kube_teardown`). With `--endpoints`, runnerd has
`routing_base_domain` set (Ingress routing) and each session declares two tcp ports (so
publishes a Service and an Ingress).
Printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio

from bench.kube_teardown import teardown
from tests.harness import iter_sse, open_ws
from tests.kube.daemon import kube_daemon, telo_body
from tests.kubesim.server import KubeSim, open_kubesim

PTY_LINES = 20_000
LINE = "x" * 99
ENDPOINT_PORTS = [{"port": 8080, "protocol": "tcp"}, {"port": 9000, "protocol": "tcp"}]


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[max(0, int(len(ordered) * 0.9) - 1)]
    return f"{statistics.median(ordered) * 1000:.0f} ms (p90 {p90 * 1000:.0f})"


async def _pod_added(sim: KubeSim, seen: dict[str, float]) -> None:
    async with sim.store.subscribe() as changes:
        async for kind, resource, obj in changes:
            if kind == "ADDED" and resource == "pods":
                seen.setdefault(obj["metadata"]["name"], time.perf_counter())


async def one_session(
    client: httpx.AsyncClient, seen: dict[str, float], ports: list[dict[str, Any]]
) -> tuple[float, ...]:
    body = telo_body("print hello\nexit 0\n", ports=ports)
    t0 = time.perf_counter()
    response = await client.post("/v1/sessions", json=body)
    answered = time.perf_counter() - t0
    sid = response.json()["sessionId"]
    running = exited = 0.0
    async with client.stream("GET", f"/v1/sessions/{sid}/events", timeout=None) as events:
        async for frame in iter_sse(events):
            kind = frame.data.get("status", {}).get("kind") if frame.event == "status" else None
            if kind == "running":
                running = time.perf_counter() - t0
            if kind in ("exited", "failed", "stopped"):
                exited = time.perf_counter() - t0
    return seen[f"runnerd-{sid}"] - t0, running, exited, answered


async def post_floor(client: httpx.AsyncClient) -> float:
    """The same POST with a body the daemon refuses (400, no session): the
    HTTP stack, the route and the body parse, the 201's floor."""
    body = telo_body("print hello\nexit 0\n")
    body["env"] = "not an object"
    t0 = time.perf_counter()
    response = await client.post("/v1/sessions", json=body)
    elapsed = time.perf_counter() - t0
    assert response.status_code == 400, response.text
    return elapsed


async def pty_throughput(daemon: Any, client: httpx.AsyncClient) -> float:
    """MB/s of PTY output from the pod to a WebSocket client, through the attach."""
    script = "sleep 1\n" + f"print {LINE}\n" * PTY_LINES
    sid = (await client.post("/v1/sessions", json=telo_body(script))).json()["sessionId"]
    received, first = 0, 0.0
    async with open_ws(daemon.socket_path, f"/v1/sessions/{sid}/io") as ws:
        while received < PTY_LINES * (len(LINE) + 2):
            message = await ws.get_message()
            if isinstance(message, bytes):
                first = first or time.perf_counter()
                received += len(message) - 4
    return received / (time.perf_counter() - first) / 1e6


async def health_when_silent(sim: KubeSim, tmp: Path) -> float:
    sim.faults.go_silent()
    try:
        async with kube_daemon(sim, tmp / "silent") as daemon, daemon.client() as client:
            t0 = time.perf_counter()
            await client.get("/v1/health")
            return time.perf_counter() - t0
    finally:
        sim.faults.resume()


async def measure(sim: KubeSim, tmp: Path, sessions: int, endpoints: bool, concurrent: int) -> None:
    seen: dict[str, float] = {}
    (tmp / "daemon").mkdir()
    (tmp / "silent").mkdir()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pod_added, sim, seen)
        keys = (
            {"routing_base_domain": "sessions.example.test", "routing": "ingress"}
            if endpoints
            else {}
        )
        ports = ENDPOINT_PORTS if endpoints else []
        async with kube_daemon(sim, tmp / "daemon", **keys) as daemon, daemon.client() as client:
            await sim.stats.wait_until(lambda s: s.watches_open == 1)
            before = sim.stats.snapshot()
            results, floors = [], []
            for _ in range(sessions):  # alternated, so load drifts hit both alike
                floors.append(await post_floor(client))
                results.append(await one_session(client, seen, ports))
            after = sim.stats.snapshot()
            throughput = await pty_throughput(daemon, client)
            # One alone (a DELETE's own latency), then N at once.
            torn = [await teardown(sim, client, n) for n in (1, concurrent) if n]
        health = await health_when_silent(sim, tmp)
        nursery.cancel_scope.cancel()
    requests = sum(after["requestsByVerb"].values()) - sum(before["requestsByVerb"].values())
    conns = after["connections"]["accepted"] - before["connections"]["accepted"]
    print(
        f"runnerd (kubernetes backend), {sessions} sequential sessions (print; exit 0)"
        + (", each publishing 2 tcp ports (Service + Ingress)" if endpoints else "")
    )
    answered = statistics.median(r[3] for r in results)
    floor = statistics.median(floors)
    print(
        f"  POST → 201             {answered * 1000:.1f} ms median; floor (the same POST"
        f" refused, 400) {floor * 1000:.1f} ms; ratio {answered / floor:.2f}"
    )
    print(f"  POST → pod exists      {_ms([r[0] for r in results])}")
    print(f"  POST → running         {_ms([r[1] for r in results])}")
    print(f"  POST → exited          {_ms([r[2] for r in results])}")
    print(
        f"  apiserver requests per session  {requests / sessions:.2f}"
        f" {dict(after['requestsByVerb'])}"
    )
    print(f"  new TCP connections per session {conns / sessions:.2f} (attaches included)")
    print(f"  watch streams ever opened       {after['watches']['total']}")
    print(f"  pods left in the cluster        {len(sim.store.list('pods', 'runnerd'))}")
    print(f"  PTY throughput through attach   {throughput:.1f} MB/s")
    print(f"  /v1/health, apiserver silent    {health * 1000:.1f} ms")
    for figure in torn:
        for line in figure.lines():
            print(line)


async def run(sessions: int, endpoints: bool, concurrent: int, watch: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with open_kubesim(Path(tmp)) as sim:
            if watch:  # watch sessions instead (`bench.kube_watch`)
                from bench.kube_watch import measure_watch

                await measure_watch(sim, Path(tmp), sessions)
                return
            await measure(sim, Path(tmp), sessions, endpoints, concurrent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument(
        "--teardown",
        type=int,
        default=20,
        help="concurrent sessions to tear down at the end (0: none)",
    )
    parser.add_argument(
        "--endpoints",
        action="store_true",
        help="publish each session's ports (routing_base_domain set)",
    )
    parser.add_argument(
        "--watch",
        action="store_true",
        help="watch sessions (two apps) beside run sessions (bench.kube_watch)",
    )
    args = parser.parse_args()
    trio.run(run, args.sessions, args.endpoints, args.teardown, args.watch)


if __name__ == "__main__":
    main()
