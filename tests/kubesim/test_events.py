"""Events over the wire: core/v1 and events.k8s.io/v1 views, selectors, watch, the client.

The kubelet writes them (kubelet_events.py); these tests read them as the
Kubernetes backend and the official client would.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from kubernetes import client, config

from tests.kubesim.conftest import build_client
from tests.kubesim.server import KubeSim
from tests.kubesim.test_clients_kubectl_pods import create_pod, wait_stored

NS = "runnerd"
CORE = f"/api/v1/namespaces/{NS}/events"
V1 = f"/apis/events.k8s.io/v1/namespaces/{NS}/events"
Obj = dict[str, Any]


@pytest.fixture
async def kube(kubesim: KubeSim) -> AsyncIterator[httpx.AsyncClient]:
    async with build_client(kubesim) as c:
        yield c


def running(pod: Obj | None) -> bool:
    return pod is not None and pod["status"].get("phase") == "Running"


async def test_killing_is_recorded_and_both_views_agree(
    kubesim: KubeSim, kube: httpx.AsyncClient
) -> None:
    await create_pod(kubesim, "doomed", command="sleep 60")
    await wait_stored(kubesim, "doomed", running)
    assert (await kube.delete(f"/api/v1/namespaces/{NS}/pods/doomed")).status_code == 200
    await wait_stored(kubesim, "doomed", lambda p: p is None)

    selector = "involvedObject.name=doomed,reason=Killing"
    core = (await kube.get(CORE, params={"fieldSelector": selector})).json()
    assert core["kind"] == "EventList" and core["apiVersion"] == "v1"
    [killing] = core["items"]
    assert "kind" not in killing  # typed-list items carry none
    assert list(killing)[:4] == ["metadata", "involvedObject", "reason", "message"]
    assert killing["message"] == "Stopping container app"
    assert killing["involvedObject"]["fieldPath"] == "spec.containers{app}"
    assert killing["source"] == {"component": "kubelet", "host": "kubesim-node"}
    assert killing["count"] == 1 and killing["type"] == "Normal"

    name = killing["metadata"]["name"]
    v1 = (await kube.get(f"{V1}/{name}")).json()
    assert v1["apiVersion"] == "events.k8s.io/v1" and v1["note"] == "Stopping container app"
    assert v1["regarding"] == killing["involvedObject"]
    assert v1["reportingController"] == "kubelet" and v1["deprecatedCount"] == 1
    by_regarding = await kube.get(V1, params={"fieldSelector": "regarding.name=doomed"})
    assert name in [e["metadata"]["name"] for e in by_regarding.json()["items"]]
    wrong = await kube.get(V1, params={"fieldSelector": "involvedObject.name=doomed"})
    assert wrong.status_code == 400
    assert wrong.json()["message"] == "field label not supported: involvedObject.name"
    created = await kube.post(CORE, json={"metadata": {"name": "x"}})
    assert created.status_code == 405  # read-only here


async def test_watch_sees_events_as_the_kubelet_writes_them(
    kubesim: KubeSim, kube: httpx.AsyncClient
) -> None:
    params = {"watch": "1", "fieldSelector": "regarding.name=w"}
    seen: list[tuple[str, str]] = []
    with trio.fail_after(15):
        async with kube.stream("GET", V1, params=params) as resp:
            await create_pod(kubesim, "w", command="true")
            async for line in resp.aiter_lines():
                event = json.loads(line)
                seen.append((event["type"], event["object"]["reason"]))
                if event["object"]["reason"] == "Started":
                    break
    assert seen == [
        ("ADDED", reason) for reason in ("Scheduled", "Pulling", "Pulled", "Created", "Started")
    ]


async def test_official_client_reads_both_apis(kubesim: KubeSim, tmp_path: Path) -> None:
    await create_pod(kubesim, "p", command="true")
    await wait_stored(kubesim, "p", lambda p: p is not None and p["status"]["phase"] == "Succeeded")
    kubeconfig = kubesim.write_kubeconfig(tmp_path / "kubeconfig")

    def scenario() -> tuple[list[str], list[str]]:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        try:
            selector = "involvedObject.name=p,involvedObject.kind=Pod"
            core = client.CoreV1Api(api).list_namespaced_event(NS, field_selector=selector)
            # EventsV1Event insists on eventTime, which kubelet events leave null on a real
            # server too (kubernetes-client/python#1826): read that API's JSON undecoded.
            v1 = client.EventsV1Api(api).list_namespaced_event(NS, _preload_content=False)
            notes = [e["note"] for e in json.loads(v1.data)["items"]]
            return [e.reason for e in core.items], notes
        finally:
            api.close()

    with trio.fail_after(20):
        reasons, notes = await trio.to_thread.run_sync(scenario)
    assert reasons == ["Scheduled", "Pulling", "Pulled", "Created", "Started"]
    assert notes[0] == "Successfully assigned runnerd/p to kubesim-node"
