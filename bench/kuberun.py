"""A run session's cost on the Kubernetes backend, as rows for `python -m bench`.

`python -m bench kuberun` runs the test cluster (tests/kubesim, kubelet
included) in this process and a real `runnerd serve` on it, then N
sequential sessions (`print hello` then `exit 0`, as `bench.kube`),
alternated with the same POST refused (400: the HTTP stack, the route and
the body parse; the 201's floor, measured in the same run): POST → 201
against that floor, and the apiserver requests per session by verb (issue
22's goal: ≤ 3 where the attach is up before the container starts; the
upstream runner makes 3, losing the output written before its attach).
`RUNNERD_BENCH_SESSIONS` sets N (default 20). Printed, never asserted.

With `RUNNERD_BENCH_UPSTREAM` set (as for `bench startup`, its health URL in
`RUNNERD_BENCH_UPSTREAM_HEALTH`), the upstream runner is started too, on a
second test cluster of its own (`KUBECONFIG`, `RUNNER_SESSION_NAMESPACE`),
and each round also POSTs the same body to it: its POST → 201 beside
runnerd's, both timed by the same blocking httpx client (runnerd over its
UNIX socket, the upstream over TCP). The upstream answers 201 before its
cluster work, which then fails on the test cluster (it has no batch/v1
Jobs for the upstream's image build), so only its 201 is comparable.
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import trio

from bench.kube import _pod_added, one_session, post_floor
from tests.kube.daemon import kube_daemon, telo_body
from tests.kubesim.server import open_kubesim

Row = tuple[str, str, str]


def _timed_post(client: httpx.Client, started: list[str]) -> float:
    body = telo_body("print hello\nexit 0\n")
    t0 = time.perf_counter()
    response = client.post("/v1/sessions", json=body)
    elapsed = time.perf_counter() - t0
    if response.status_code != 201:
        raise RuntimeError(f"POST /v1/sessions: {response.status_code} {response.text[:200]}")
    started.append(response.json()["sessionId"])
    return elapsed


async def _compare(
    ours: httpx.Client,
    others: dict[str, httpx.Client],
    rounds: int,
    our_times: list[float],
    their_times: dict[str, list[float]],
    health: dict[str, list[float]],
) -> None:
    """POST → 201 on runnerd and on each of `others` (the upstream, the
    serving layer's floor), taking turns, with one blocking client each;
    runnerd's sessions are deleted before the next round (the upstream's
    fail on the test cluster on their own). `GET /v1/health` on each too."""
    clients = {"runnerd": ours, **others}
    for _ in range(rounds):
        for name, other in others.items():
            their_times[name].append(await trio.to_thread.run_sync(_timed_post, other, []))
        started: list[str] = []
        our_times.append(await trio.to_thread.run_sync(_timed_post, ours, started))
        for sid in started:
            await trio.to_thread.run_sync(ours.delete, f"/v1/sessions/{sid}")
        for name, client in clients.items():
            health[name].append(await trio.to_thread.run_sync(_timed_get, client))


def _timed_get(client: httpx.Client) -> float:
    """GET /v1/health: the serving layer's own cost per request."""
    t0 = time.perf_counter()
    client.get("/v1/health").raise_for_status()
    return time.perf_counter() - t0


@asynccontextmanager
async def _upstream(tmp: Path) -> AsyncIterator[httpx.Client | None]:
    """The upstream runner on a test cluster of its own, and a blocking
    client for it; None when `RUNNERD_BENCH_UPSTREAM` is unset."""
    command = os.environ.get("RUNNERD_BENCH_UPSTREAM")
    if not command:
        yield None
        return
    url = os.environ.get("RUNNERD_BENCH_UPSTREAM_HEALTH", "http://127.0.0.1:8080/v1/health")
    (tmp / "upstream").mkdir()
    async with open_kubesim(tmp / "upstream") as sim:
        kubeconfig = sim.write_kubeconfig(tmp / "upstream" / "kubeconfig")
        env = dict(os.environ, KUBECONFIG=str(kubeconfig), RUNNER_SESSION_NAMESPACE=sim.namespace)
        env.pop("KUBERNETES_SERVICE_HOST", None)
        proc = await trio.lowlevel.open_process(
            command, shell=True, env=env, start_new_session=True
        )
        try:
            with httpx.Client(base_url=url.removesuffix("/v1/health")) as client:
                await _until_healthy(client)
                yield client
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


@asynccontextmanager
async def _serving_floor(tmp: Path) -> AsyncIterator[httpx.Client]:
    """`bench.servefloor` (the bare quart-trio app on hypercorn) on a UNIX
    socket of its own, and a blocking client for it."""
    sock = tmp / "floor.sock"
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "bench.servefloor", str(sock)], start_new_session=True
    )
    try:
        client = httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://floor")
        with client:
            await _until_healthy(client)
            yield client
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


async def _until_healthy(client: httpx.Client) -> None:
    """Until `GET /v1/health` answers 2xx (a minute at most)."""
    with trio.fail_after(60):
        while True:
            try:
                if (await trio.to_thread.run_sync(client.get, "/v1/health")).is_success:
                    return
            except httpx.TransportError:
                pass  # not listening yet
            await trio.sleep(0.01)


def _compared_rows(
    load: str,
    ours: list[float],
    theirs: dict[str, list[float]],
    health: dict[str, list[float]],
) -> list[Row]:
    """runnerd, the upstream and the bare serving layer, medians in ms: the
    POST → 201 and the `GET /v1/health` each answered one blocking client."""
    post = {"runnerd": statistics.median(ours)} | {
        name: statistics.median(times) for name, times in theirs.items()
    }
    get = {name: statistics.median(times) for name, times in health.items()}

    def line(ms: dict[str, float]) -> str:
        ours, upstream, floor = ms["runnerd"], ms["upstream"], ms["floor"]
        return (
            f"runnerd {ours * 1e3:.1f} ms ({ours / upstream:.2f}× the upstream's"
            f" {upstream * 1e3:.1f} ms); the bare quart-trio app {floor * 1e3:.1f} ms"
            f" ({floor / upstream:.2f}×); runnerd's own share {(ours - floor) * 1e3:.1f} ms"
        )

    return [
        (f"POST → 201, one blocking client ({load})", line(post), "runnerd ≤ 1.00× the upstream"),
        ("GET /v1/health, the same client", line(get), "—"),
    ]


async def bench_kuberun() -> list[Row]:
    sessions = int(os.environ.get("RUNNERD_BENCH_SESSIONS", "20"))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="runnerd-bench-kube-") as tmp:
        async with open_kubesim(Path(tmp)) as sim, trio.open_nursery() as nursery:
            seen: dict[str, float] = {}
            nursery.start_soon(_pod_added, sim, seen)
            async with (
                kube_daemon(sim, Path(tmp)) as daemon,
                daemon.client() as client,
                _upstream(Path(tmp)) as upstream,
            ):
                await sim.stats.wait_until(lambda s: s.watches_open == 1)
                before = sim.stats.snapshot()
                answered, floors = [], []
                same_client: list[float] = []
                theirs: dict[str, list[float]] = {"upstream": [], "floor": []}
                health: dict[str, list[float]] = {"runnerd": [], "upstream": [], "floor": []}
                ours = httpx.Client(
                    transport=httpx.HTTPTransport(uds=str(daemon.socket_path)),
                    base_url="http://runnerd",
                )
                for _ in range(sessions):  # alternated: load drifts hit both alike
                    floors.append(await post_floor(client))
                    answered.append((await one_session(client, seen, []))[3])
                after = sim.stats.snapshot()
                if upstream is not None:
                    async with _serving_floor(Path(tmp)) as bare:
                        others = {"upstream": upstream, "floor": bare}
                        with ours:
                            await _compare(ours, others, sessions, same_client, theirs, health)
            nursery.cancel_scope.cancel()
    verbs = {
        verb: (count - before["requestsByVerb"].get(verb, 0)) / sessions
        for verb, count in after["requestsByVerb"].items()
        if count != before["requestsByVerb"].get(verb, 0)
    }
    floor, median = statistics.median(floors), statistics.median(answered)
    by_verb = ", ".join(f"{verb} {n:g}" for verb, n in sorted(verbs.items()))
    compared: list[Row] = []
    if theirs["upstream"]:
        compared = _compared_rows(load, same_client, theirs, health)
    return compared + [
        (
            f"POST → 201 (kubernetes, {sessions} sessions; load {load})",
            f"{median * 1e3:.1f} ms median; {median / floor:.2f}× the same POST refused"
            f" ({floor * 1e3:.1f} ms)",
            "≤ the upstream runner",
        ),
        (
            "apiserver requests per run session",
            f"{sum(verbs.values()):.2f} ({by_verb}; `get`: the attach and the pods/log reads)",
            "≤ 3 where the attach is up before the container starts",
        ),
    ]


if __name__ == "__main__":
    for name, figure, target in trio.run(bench_kuberun):
        print(f"{name:50} {figure} ({target})")
