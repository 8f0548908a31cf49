"""`GET /metrics` of a daemon on the Kubernetes backend (the test cluster),
scraped with the Prometheus text parser after real sessions and faults: its
apiserver requests counted as the cluster saw them, watch restarts, a re-list
after a 410 and an attach re-established after it dropped."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import trio

from tests.e2e.contract_client import read_pty, wait_status, wait_terminal
from tests.harness import Daemon, open_ws, start_daemon
from tests.kube.daemon import kube_overrides, start_telo, wait_no_pods
from tests.kubesim.faults import Stats
from tests.kubesim.server import KubeSim
from tests.metrics.test_scrape import Samples, scrape, value

TIMEOUT_S = 20.0
RESTARTS = "runnerd_kube_watch_restarts_total"


def metrics_overrides(sim: KubeSim, tmp_path: Path) -> dict[str, Any]:
    config = kube_overrides(sim, tmp_path)
    config["metrics"] = {"listen": [f"unix:{tmp_path / 'metrics.sock'}"]}
    return config


def runnerd_requests_by_verb(samples: Samples) -> dict[str, float]:
    by_verb: collections.Counter[str] = collections.Counter()
    for (name, labels), count in samples.items():
        if name == "runnerd_kube_apiserver_requests_total":
            by_verb[dict(labels)["verb"]] += count
    return dict(by_verb)


def cluster_requests_by_verb(stats: Stats) -> dict[str, float]:
    """What the cluster saw, but attaches (WebSockets: counted as reconnects)."""
    by_verb: collections.Counter[str] = collections.Counter()
    for (verb, pattern), count in stats.requests.items():
        if not pattern.endswith("/attach"):
            by_verb[verb] += count
    return dict(by_verb)


async def drop_the_attach_and_see_it_back(daemon: Daemon, sim: KubeSim, session_id: str) -> None:
    async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
        transcript = await read_pty(ws, until=b"ready", timeout_s=TIMEOUT_S)
        await sim.stats.wait_until(lambda stats: stats.attaches_open == 1)
        total = sim.stats.attaches_total
        assert await sim.faults.drop_attaches() == 1
        # Backfilled from pods/log, so nothing in the terminal says so (the
        # line this waited for is gone): wait for the new attach, which
        # echoes input.
        await sim.stats.wait_until(lambda s: s.attaches_total > total and s.attaches_open == 1)
        await ws.send_message(b"back\n")
        await read_pty(ws, transcript, until=b"got:back", timeout_s=TIMEOUT_S)


async def counted_alike(
    daemon: Daemon, sim: KubeSim, base: Path
) -> tuple[Samples, dict[str, float]]:
    """A scrape whose request counts by verb are the cluster's: the cluster
    counts a request on arrival, runnerd once its answer is back, so wait
    for the last answers to land."""
    with trio.fail_after(TIMEOUT_S):
        while True:
            samples = await scrape(daemon, base)
            cluster = cluster_requests_by_verb(sim.stats)
            if runnerd_requests_by_verb(samples) == cluster:
                return samples, cluster
            await trio.sleep(0.05)


async def watching_again(sim: KubeSim, watches_total: int) -> None:
    """Return once the cluster saw `watches_total` watches and one is open."""
    await sim.stats.wait_until(lambda s: s.watches_total >= watches_total and s.watches_open == 1)


async def test_kube_scrape_counts_requests_watch_restarts_relists_and_reattaches(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with (
        start_daemon(tmp_path, metrics_overrides(kubesim, tmp_path)) as daemon,
        daemon.client() as client,
    ):
        samples = await scrape(daemon, tmp_path)
        assert value(samples, "runnerd_kube_attach_reconnects_total") == 0
        assert value(samples, "runnerd_kube_relists_total", resource="pods") == 0
        # Two 429s on the create: retried (each attempt is a request).
        kubesim.faults.fail_next(2, 429, verb="create")
        session_id = await start_telo(client, "print ready\necho got:\n")
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        await drop_the_attach_and_see_it_back(daemon, kubesim, session_id)
        # A clean cut (resumed), a cut whose resume gets 410 (re-listed:
        # one more watch), an abrupt one.
        total = kubesim.stats.watches_total
        kubesim.faults.cut_watches()
        await watching_again(kubesim, total + 1)
        kubesim.faults.expire_next_watch()
        kubesim.faults.cut_watches()
        await watching_again(kubesim, total + 3)
        kubesim.faults.cut_watches(abrupt=True)
        await watching_again(kubesim, total + 4)
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            await ws.send_message(b"quit\n")
        assert await wait_terminal(client, session_id) == {"kind": "exited", "code": 0}
        await wait_no_pods(kubesim)
        samples, cluster = await counted_alike(daemon, kubesim, tmp_path)

    assert value(samples, "runnerd_kube_attach_reconnects_total") == 1
    assert value(samples, RESTARTS, resource="pods", reason="closed") == 2
    assert value(samples, RESTARTS, resource="pods", reason="expired") == 1
    assert value(samples, RESTARTS, resource="pods", reason="broken") == 1
    assert value(samples, "runnerd_kube_relists_total", resource="pods") == 1
    requests = "runnerd_kube_apiserver_requests_total"
    refused = {"class": "too_many_requests"}
    assert value(samples, requests, verb="create", code="429", **refused) == 2
    assert value(samples, requests, verb="create", code="201", **{"class": "ok"}) == 1
    assert value(samples, requests, verb="list", code="200", **{"class": "ok"}) == 2
    latency = "runnerd_kube_apiserver_request_seconds_count"
    assert value(samples, latency, verb="watch") == cluster["watch"]
    assert not {name for name, _ in samples if name.endswith("_created")}
