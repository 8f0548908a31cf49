"""The pure pod-status reading, fed by the shared informer with real pods the test
cluster's kubelet runs from podspec's builders: the verdicts a session will see."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import trio

from runnerd.backend import BundleSpec, Exited, Failed, ImageSpec, Limits, RunSpec
from runnerd.kube.bundle import BundleTokens, build_bundle_archive
from runnerd.kube.client import KubeClient
from runnerd.kube.informer import GONE, PodInformer
from runnerd.kube.podspec import build_pod, is_ours, managed_by_selector, pod_name
from runnerd.kube.podstatus import PodRunning, Progress, StartFailed, StartWatch, Verdict
from runnerd.kube.settings import KubeSettings
from tests.kube.helpers import FAST, open_client, serve_bundles
from tests.kubesim.server import KubeSim

SETTINGS = KubeSettings()
SPEC = RunSpec.create(
    session_id="life23456789",
    image=ImageSpec("telorun/node:latest-slim", "missing"),
    env={},
    limits=Limits(cpu="500m", memory="512Mi", ephemeral_storage="1Gi", ttl_s=60),
    bundle=BundleSpec("main.telo", (("main.telo", "print up\nwait\n"),)),
)


def variant(
    session_id: str, *, image: ImageSpec | None = None, limits: Limits | None = None
) -> RunSpec:
    """SPEC under another session id, with another image or limits."""
    assert SPEC.creation is not None
    identity = replace(SPEC.identity, session_id=session_id, limits=limits or SPEC.limits)
    return RunSpec(identity, replace(SPEC.creation, image=image or SPEC.image))


async def verdicts(
    client: KubeClient,
    informer: PodInformer,
    spec: RunSpec,
    url: str | None,
    done: Callable[[Verdict], bool],
    grace_s: float = 30.0,
) -> list[Verdict]:
    """Create the session's pod and read verdicts until `done`; every one seen."""
    pod = build_pod(SETTINGS, spec, bundle_url=url, created_at="2026-12-01T00:00:00Z")
    created = await client.create_pod(
        pod, operation="create", is_ours=lambda p: is_ours(p, SETTINGS, spec.session_id)
    )
    watch, seen = StartWatch(grace_s), [StartWatch(grace_s).observe(created, 0.0)]
    with informer.subscribe(pod_name(spec.session_id)) as sub, trio.fail_after(20):
        while not done(seen[-1]):
            state = await sub.next()
            seen.append(watch.observe(None if state is GONE else state, trio.current_time()))
    return seen


async def test_verdicts_from_real_pods(kubesim: KubeSim, tmp_path: Path) -> None:
    assert kubesim.kubelet is not None
    kubesim.kubelet.image_pull_backoff_s = 0.1
    tokens = BundleTokens()
    archive = build_bundle_archive(SPEC.bundle)  # type: ignore[arg-type]
    async with (
        serve_bundles(tokens) as (base, _),
        open_client(kubesim, tmp_path) as client,
        trio.open_nursery() as nursery,
    ):
        informer = PodInformer(client, managed_by_selector(SETTINGS), policy=FAST)
        await nursery.start(informer.run)

        def url(spec: RunSpec) -> str:
            token = tokens.stage(spec.session_id, archive, now=trio.current_time())
            return f"{base}/internal/bundles/{spec.session_id}?token={token}"

        # Starts, reports progress on the way, then runs with its pod IP.
        seen = await verdicts(
            client, informer, SPEC, url(SPEC), lambda v: isinstance(v, PodRunning)
        )
        assert isinstance(seen[0], Progress) and seen[0].message == "waiting for a node"
        assert any(isinstance(v, Progress) and v.message != seen[0].message for v in seen)
        running = seen[-1]
        assert isinstance(running, PodRunning) and running.pod_ip
        await client.delete_pod(pod_name(SPEC.session_id), operation="delete")

        # A reference that never parses fails at once, with the kubelet's reason.
        bad = variant("bad234567890", image=ImageSpec("Bad//Image", "missing"))
        last = (
            await verdicts(client, informer, bad, url(bad), lambda v: not isinstance(v, Progress))
        )[-1]
        assert isinstance(last, StartFailed)
        assert last.message.startswith("container session: InvalidImageName: ")

        # Never pulled under `never`: permanent too.
        never = variant("nev234567890", image=ImageSpec("acme/none:1", "never"))
        last = (
            await verdicts(
                client, informer, never, url(never), lambda v: not isinstance(v, Progress)
            )
        )[-1]
        assert isinstance(last, StartFailed) and "ErrImageNeverPull" in last.message

        # An unknown image backs off; the start fails only once the grace is over.
        pull = variant("pul234567890", image=ImageSpec("acme/none:1", "always"))
        seen = await verdicts(
            client, informer, pull, url(pull), lambda v: not isinstance(v, Progress), grace_s=0.5
        )
        assert any(
            isinstance(v, Progress)
            and "ErrImagePull" in v.message
            or isinstance(v, Progress)
            and "ImagePullBackOff" in v.message
            for v in seen
        )
        assert isinstance(seen[-1], StartFailed)
        assert "ErrImagePull" in seen[-1].message or "ImagePullBackOff" in seen[-1].message

        # A bundle URL whose token is wrong: the init container fails the pod.
        fetch = variant("fet234567890")
        last = (
            await verdicts(
                client,
                informer,
                fetch,
                f"{base}/internal/bundles/x?token=no",
                lambda v: isinstance(v, Failed | Exited),
            )
        )[-1]
        assert isinstance(last, Failed)
        assert last.message.startswith("init container body-fetch failed (Error, exit 1)")

        # The TTL as activeDeadlineSeconds: failed, not exited, whatever the exit code.
        ttl = variant("ttl234567890", limits=replace(SPEC.limits, ttl_s=1))
        last = (
            await verdicts(
                client, informer, ttl, url(ttl), lambda v: isinstance(v, Failed | Exited)
            )
        )[-1]
        assert last == Failed(
            "DeadlineExceeded: Pod was active on the node longer than the specified deadline"
        )
        nursery.cancel_scope.cancel()
