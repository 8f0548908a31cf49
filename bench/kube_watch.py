"""Watch sessions on the Kubernetes backend, through a real daemon on the test
cluster (`python -m bench.kube --watch [--sessions N]`).

Per watch session (two apps, the stand-in kernel under `telo run --watch`),
sequentially: POST → `running` on SSE; a workspace write → the first app's
generation 2 `started`; idle → the pod gone (from the idle deadline: the last
subscriber's close plus `idle_seconds`); `POST /resume` → `running` again;
then DELETE → no pod. The apiserver requests of that whole lifecycle
(kubesim's accounting). Beside each, the run-session figure of the same run
(`print hello; exit 0`: POST → `running`, requests per session), alternated
so load drifts hit both alike, and the load average. Printed, never asserted.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import trio

from bench.kube import one_session
from tests.harness import SseFrame, iter_sse
from tests.kube.daemon import KERNEL_CONFIG, kube_daemon, session_pods
from tests.kubesim.server import KubeSim

IDLE_S = 1
APPS = [
    {"name": "web", "entryRelativePath": "web.telo"},
    {"name": "worker", "entryRelativePath": "worker.telo", "io": "streams"},
]
FILES = {"web.telo": "port 3000\nprint web\nwait\n", "worker.telo": "print worker\nwait\n"}


def _body() -> dict[str, Any]:
    return {
        "env": {},
        "mode": "watch",
        "config": dict(KERNEL_CONFIG),
        "apps": APPS,
        "bundle": {
            "entryRelativePath": "web.telo",
            "files": [{"relativePath": p, "contents": c} for p, c in FILES.items()],
        },
    }


def _status(frame: SseFrame) -> str | None:
    return frame.data["status"]["kind"] if frame.event == "status" else None


def _started(frame: SseFrame, app: str, generation: int) -> bool:
    data = frame.data
    return (
        frame.event == "run"
        and data.get("app") == app
        and data.get("generation") == generation
        and data.get("phase") == "started"
    )


async def _until(frames: Any, done: Callable[[SseFrame], bool]) -> float:
    async for frame in frames:
        if done(frame):
            return time.perf_counter()
    raise AssertionError("the event stream ended first")


@contextlib.asynccontextmanager
async def _events(client: httpx.AsyncClient, sid: str) -> Any:
    async with client.stream("GET", f"/v1/sessions/{sid}/events", timeout=None) as response:
        async with contextlib.aclosing(iter_sse(response)) as frames:
            yield frames


async def _pods_gone(sim: KubeSim) -> float:
    async with sim.store.subscribe() as changes:
        while session_pods(sim):
            await changes.receive()
    return time.perf_counter()


async def one_watch(sim: KubeSim, client: httpx.AsyncClient) -> tuple[float, float, float, float]:
    """(POST → running, write → started, idle deadline → pod gone, resume → running)."""
    t0 = time.perf_counter()
    sid = (await client.post("/v1/sessions", json=_body())).json()["sessionId"]
    async with _events(client, sid) as frames:
        running = await _until(frames, lambda f: _status(f) == "running") - t0
        write = {"write": [{"path": "web.telo", "content": "port 3000\nprint web 2\nwait\n"}]}
        t1 = time.perf_counter()
        await client.post(f"/v1/sessions/{sid}/workspace", json=write)
        started = await _until(frames, lambda f: _started(f, "web", 2)) - t1
    idle_deadline = time.perf_counter() + IDLE_S
    gone = await _pods_gone(sim) - idle_deadline
    while True:  # the status follows the pod's delete closely
        if (await client.get(f"/v1/sessions/{sid}")).json()["status"]["kind"] == "suspended":
            break
        await trio.sleep(0.01)
    async with _events(client, sid) as frames:
        t2 = time.perf_counter()
        headers = {"content-type": "application/json"}
        await client.post(f"/v1/sessions/{sid}/resume", headers=headers)
        await _until(frames, lambda f: _status(f) == "suspended")  # the replayed one
        resumed = await _until(frames, lambda f: _status(f) == "running") - t2
    await client.delete(f"/v1/sessions/{sid}")
    await _pods_gone(sim)
    return running, started, gone, resumed


def _requests(sim: KubeSim) -> int:
    return sum(sim.stats.snapshot()["requestsByVerb"].values())


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms (max {max(values) * 1000:.0f})"


async def measure_watch(sim: KubeSim, tmp: Path, sessions: int) -> None:
    """Print the watch figures with the run-session ones beside them."""
    (tmp / "watch").mkdir()
    watch_cfg = {"enabled": True, "idle_seconds": IDLE_S}
    seen: dict[str, float] = {}
    async with (
        kube_daemon(sim, tmp / "watch", watch=watch_cfg) as daemon,
        daemon.client() as client,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(_pod_added, sim, seen)
        await sim.stats.wait_until(lambda s: s.watches_open == 1)
        watch, run, watch_requests, run_requests = [], [], [], []
        for _ in range(sessions):  # alternated: load drifts hit both alike
            before = _requests(sim)
            watch.append(await one_watch(sim, client))
            watch_requests.append(_requests(sim) - before)
            before = _requests(sim)
            run.append(await one_session(client, seen, []))
            run_requests.append(_requests(sim) - before)
        nursery.cancel_scope.cancel()
    load = os.getloadavg()
    print(f"runnerd (kubernetes backend), {sessions} watch sessions (2 apps) vs run sessions")
    print(f"  load average              {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    watch_up, run_up = [w[0] for w in watch], [r[1] for r in run]
    ratio = statistics.median(watch_up) / statistics.median(run_up)
    print(
        f"  POST → running            watch {_ms(watch_up)}; run {_ms(run_up)}; ratio {ratio:.2f}"
    )
    print(f"  write → started (gen 2)   {_ms([w[1] for w in watch])}")
    print(f"  idle deadline → pod gone  {_ms([w[2] for w in watch])}")
    print(f"  resume → running          {_ms([w[3] for w in watch])}")
    per_watch, per_run = statistics.median(watch_requests), statistics.median(run_requests)
    print(
        f"  apiserver requests        watch lifecycle {per_watch:.0f} (create, write, suspend,"
        f" resume, delete); run session {per_run:.0f}; ratio {per_watch / per_run:.2f}"
    )
    print(f"  pods left in the cluster  {len(sim.store.list('pods', 'runnerd'))}")
    print(f"  configmaps left           {len(sim.store.list('configmaps', 'runnerd'))}")


async def _pod_added(sim: KubeSim, seen: dict[str, float]) -> None:
    async with sim.store.subscribe() as changes:
        async for kind, resource, obj in changes:
            if kind == "ADDED" and resource == "pods":
                seen.setdefault(obj["metadata"]["name"], time.perf_counter())
