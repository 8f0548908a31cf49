"""Figures for the Kubernetes backend's parts (runnerd.kube), against the test cluster.

`.venv/bin/python -m bench.kube_parts [--sessions N]` runs the test cluster
(tests/kubesim, kubelet included) in this process and drives N sequential
"sessions" the way the backend will: stage the bundle, build the session pod,
create it through the pooled client, follow it through the ONE shared informer
with the pure status reader until `running` and then until it exits (`print`
then `exit 0`, the upstream runner's bar), delete it. Printed, never asserted.

Not yet the daemon's figures: no HTTP layer, no session manager. Those come
with the backend's seam step (issue 10's bench rows).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import trio

from runnerd.backend import BundleSpec, Exited, ImageSpec, Limits, RunSpec
from runnerd.kube.bundle import BundleTokens, build_bundle_archive
from runnerd.kube.client import KubeClient, open_kube_client
from runnerd.kube.informer import GONE, PodInformer
from runnerd.kube.kubeconfig import load_connection
from runnerd.kube.podspec import build_session_pod, is_ours, managed_by_selector, pod_name
from runnerd.kube.podstatus import PodRunning, StartWatch
from runnerd.kube.settings import KubeSettings
from tests.kube.helpers import serve_bundles
from tests.kubesim.server import KubeSim, open_kubesim

SETTINGS = KubeSettings()
LIMITS = Limits(cpu="500m", memory="512Mi", ephemeral_storage="1Gi", ttl_s=600)


async def one_session(
    i: int, client: KubeClient, informer: PodInformer, tokens: BundleTokens, base: str
) -> tuple[float, float, float]:
    """(create → pod exists, → running, → exited) in seconds for one session."""
    sid = f"bench{i:07d}"
    spec = RunSpec.create(
        session_id=sid,
        image=ImageSpec("telorun/node:latest-slim", "missing"),
        env={},
        limits=LIMITS,
        bundle=BundleSpec("main.telo", (("main.telo", "print hello\nexit 0\n"),)),
    )
    t0 = trio.current_time()
    archive = await trio.to_thread.run_sync(build_bundle_archive, spec.bundle)
    token = tokens.stage(sid, archive, now=t0)
    pod = build_session_pod(
        SETTINGS,
        spec,
        bundle_url=f"{base}/internal/bundles/{sid}?token={token}",
        created_at="2026-12-01T00:00:00Z",
    )
    await client.create_pod(pod, operation="create", is_ours=lambda p: is_ours(p, SETTINGS, sid))
    exists = trio.current_time() - t0
    watch, running = StartWatch(30.0), None
    with informer.subscribe(pod_name(sid)) as sub:
        while True:
            state = await sub.next()
            verdict = watch.observe(None if state is GONE else state, trio.current_time())
            if isinstance(verdict, PodRunning) and running is None:
                running = trio.current_time() - t0
            if isinstance(verdict, Exited):
                exited = trio.current_time() - t0
                break
    await client.delete_pod(pod_name(sid), operation="delete", grace_period_s=0)
    tokens.drop(sid)
    return exists, running if running is not None else exited, exited


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[max(0, int(len(ordered) * 0.9) - 1)]
    return f"{statistics.median(ordered) * 1000:.0f} ms (p90 {p90 * 1000:.0f})"


async def run(sessions: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with open_kubesim(Path(tmp)) as sim:
            await measure(sim, Path(tmp), sessions)


async def measure(sim: KubeSim, tmp: Path, sessions: int) -> None:
    conn = load_connection(KubeSettings(kubeconfig=str(sim.write_kubeconfig(tmp / "kc"))), {}, tmp)
    tokens = BundleTokens()
    async with (
        serve_bundles(tokens) as (base, _),
        open_kube_client(conn) as client,
        trio.open_nursery() as nursery,
    ):
        informer = PodInformer(client, managed_by_selector(SETTINGS))
        await nursery.start(informer.run)
        await informer.wait_synced()
        before = sim.stats.snapshot()
        results = [await one_session(i, client, informer, tokens, base) for i in range(sessions)]
        after = sim.stats.snapshot()
        nursery.cancel_scope.cancel()
    requests = sum(after["requestsByVerb"].values()) - sum(before["requestsByVerb"].values())
    tls = after["connections"]["tls"] - before["connections"]["tls"]
    print(f"runnerd.kube parts, {sessions} sequential sessions (print; exit 0) on kubesim")
    print(f"  create → pod exists    {_ms([r[0] for r in results])}")
    print(f"  create → running       {_ms([r[1] for r in results])}")
    print(f"  create → exited        {_ms([r[2] for r in results])}")
    print(
        f"  apiserver requests per session  {requests / sessions:.2f} "
        "(create + delete; the watch is shared)"
    )
    print(f"  new TLS connections per session {tls / sessions:.2f}")
    print(f"  watch streams ever opened       {after['watches']['total']}")
    print(f"  pods left in the cluster        {len(sim.store.list('pods', 'runnerd'))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=20)
    trio.run(run, parser.parse_args().sessions)


if __name__ == "__main__":
    main()
