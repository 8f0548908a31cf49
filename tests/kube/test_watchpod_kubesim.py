"""The watch pod and its ConfigMap on the test cluster (tests/kubesim): the
ConfigMap verbs as the apiserver answers them, and a pod `build_watch_pod`
made, created as is: its workspace container serves the workspace API
(through the stand-in kernel, from the mounted ConfigMap) on the pod IP,
with the token, and its app containers wait for their entries, then run the
watching kernel in the workspace."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from runnerd.backend import BundleSpec, CreationSpec, ImageSpec, Limits, SessionIdentity
from runnerd.backend.watch import AppLaunch, ChangeSet, WatchSpec, Write
from runnerd.kube import errors
from runnerd.kube.attach import run_attach
from runnerd.kube.client import KubeClient
from runnerd.kube.podspec import format_created_at
from runnerd.kube.settings import KubeSettings
from runnerd.kube.watchpod import START_LINE, WORKSPACE_PORT, build_watch_pod, watch_pod_name
from runnerd.kube.workspaceapi import WorkspaceApi, WorkspaceApiError
from runnerd.kube.workspaceapp import configmap_for, ensure_configmap, sweep_stale_configmaps
from tests.kube.helpers import open_client
from tests.kubesim.server import KubeSim

SETTINGS = KubeSettings(self_url="http://127.0.0.1:1")
SID = "wpodtest2345"
TOKEN = "tok-watch-pod-0123"
SPEC = WatchSpec(
    identity=SessionIdentity(
        SID, Limits("500m", "256Mi", "1Gi", ttl_s=600.0), inspect=True, created_at=0.0
    ),
    creation=CreationSpec(
        image=ImageSpec("telorun/node:latest-slim", "missing"),
        env={"GREETING": "hello from the session env"},
        bundle=BundleSpec(entry="web.telo", files=(("web.telo", "print x"),)),
    ),
    apps=(
        AppLaunch("web", "web.telo", "tty", slot=0),
        AppLaunch("worker", "jobs/worker.telo", "streams", slot=1),
    ),
)


async def running_pod(client: KubeClient, name: str) -> dict[str, Any]:
    """The pod once Running with an IP (polled: the condition, not a time)."""
    while True:
        pod = await client.get_pod(name, operation="get")
        status = (pod or {}).get("status") or {}
        if status.get("phase") == "Running" and status.get("podIP"):
            assert pod is not None
            return pod
        assert status.get("phase") not in ("Failed", "Succeeded"), status
        await trio.sleep(0.05)


async def log_of(client: KubeClient, name: str, container: str, wanted: bytes) -> bytes:
    while True:
        try:
            text = await client.read_log(name, container=container, operation="log")
        except errors.BadRequest:  # still waiting
            text = b""
        if wanted in text:
            return text
        await trio.sleep(0.05)


async def test_configmap_verbs_on_the_cluster(kubesim: KubeSim, tmp_path: Path) -> None:
    cm = configmap_for(SETTINGS)
    old = configmap_for(SETTINGS, manifest="an older runnerd's manifest")
    async with open_client(kubesim, tmp_path) as client:
        with trio.fail_after(60):
            for configmap in (cm, cm, old):
                await ensure_configmap(client, configmap)
            listed = await client.list_configmaps(
                label_selector="runnerd.telo.run/role=workspace-app", operation="list"
            )
            assert sorted(c["metadata"]["name"] for c in listed) == sorted(
                [cm["metadata"]["name"], old["metadata"]["name"]]
            )
            assert listed[0]["data"]["telo.yaml"] in (
                cm["data"]["telo.yaml"],
                "an older runnerd's manifest",
            )
            deleted = await sweep_stale_configmaps(
                client, cm["metadata"]["name"], [], settings=SETTINGS
            )
            assert deleted == [old["metadata"]["name"]]
            assert await client.delete_configmap(old["metadata"]["name"], operation="d") is False
            with pytest.raises(errors.Invalid):
                bad = {**cm, "metadata": {**cm["metadata"], "name": "Not_A_Name"}}
                await client.create_configmap(bad, operation="create")


async def workspace_up(client: KubeClient, name: str, api: WorkspaceApi) -> None:
    """Until the workspace API answers; fails at once if its container ended."""
    while not await api.healthy():
        pod = await client.get_pod(name, operation="get") or {}
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = (status.get("state") or {}).get("terminated")
            assert not (status["name"] == "workspace" and ended), ended
        await trio.sleep(0.05)


async def start_streams_app(client: KubeClient, name: str, container: str, wanted: bytes) -> None:
    """Send a `streams` app's start line through an attach, as runnerd does
    (`watchpod._GATED_SCRIPT`: it waits for one before it runs), and keep
    the attach until the app's log shows `wanted`."""
    async with trio.open_nursery() as nursery:
        terminal = await nursery.start(
            partial(
                run_attach, client, name, on_output=lambda _: None, container=container, tty=False
            )
        )
        terminal.write(START_LINE)
        await log_of(client, name, container, wanted)
        nursery.cancel_scope.cancel()


def watch_pod(session_id: str, configmap: str) -> dict[str, Any]:
    spec = replace(SPEC, identity=replace(SPEC.identity, session_id=session_id))
    return build_watch_pod(
        SETTINGS,
        spec,
        name=watch_pod_name(session_id),
        configmap=configmap,
        workspace_token=TOKEN,
        created_at=format_created_at(0.0),
    )


@asynccontextmanager
async def created(client: KubeClient, *pods: dict[str, Any]) -> AsyncIterator[list[str]]:
    """The pods created, Running; their IPs. Deleted on the way out."""
    try:
        for pod in pods:
            await client.create_pod(pod, operation="create", is_ours=lambda _: False)
        yield [(await running_pod(client, p["metadata"]["name"]))["status"]["podIP"] for p in pods]
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(30):
            for pod in pods:
                await client.delete_pod(pod["metadata"]["name"], operation="d", grace_period_s=0)


async def test_a_built_watch_pod_runs_on_the_cluster(kubesim: KubeSim, tmp_path: Path) -> None:
    cm = configmap_for(SETTINGS)
    pod = watch_pod(SID, cm["metadata"]["name"])
    name = pod["metadata"]["name"]
    async with open_client(kubesim, tmp_path) as client:
        with trio.fail_after(120):
            await ensure_configmap(client, cm)
            async with created(client, pod) as [ip], WorkspaceApi(ip, WORKSPACE_PORT, TOKEN) as api:
                await workspace_up(client, name, api)
                async with WorkspaceApi(ip, WORKSPACE_PORT, "not-the-token") as wrong:
                    with pytest.raises(WorkspaceApiError, match="token"):
                        await wrong.list()
                writes = (
                    Write("web.telo", b"print web up\nwait\n"),
                    Write("jobs/worker.telo", b"env GREETING\nwait\n"),
                )
                await api.apply(ChangeSet(writes=writes))
                await log_of(client, name, "app-web", b"web up")
                greeting = b"GREETING=hello from the session env"
                await start_streams_app(client, name, "app-worker", greeting)
                assert [f.path for f in await api.list()] == ["jobs/worker.telo", "web.telo"]
                # The workspace container has no session env.
                ws_log = await client.read_log(name, container="workspace", operation="log")
                assert b"hello from the session env" not in ws_log


async def test_two_watch_pods_serve_their_workspaces_side_by_side(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # Every watch pod's workspace container listens on 8099: each pod's own.
    cm = configmap_for(SETTINGS)
    pods = [watch_pod(sid, cm["metadata"]["name"]) for sid in ("wpodone23456", "wpodtwo23456")]
    async with open_client(kubesim, tmp_path) as client:
        with trio.fail_after(120):
            await ensure_configmap(client, cm)
            async with created(client, *pods) as ips:
                for pod, ip, text in zip(pods, ips, (b"one", b"two"), strict=True):
                    async with WorkspaceApi(ip, WORKSPACE_PORT, TOKEN) as api:
                        await workspace_up(client, pod["metadata"]["name"], api)
                        await api.apply(ChangeSet(writes=(Write("mine", text),)))
                for ip, text in zip(ips, (b"one", b"two"), strict=True):
                    async with WorkspaceApi(ip, WORKSPACE_PORT, TOKEN) as api:
                        assert await api.read("mine") == text
