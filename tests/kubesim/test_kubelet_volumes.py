"""configMap volumes as a container sees them: files, items paths, modes, waiting for a
missing ConfigMap with the real FailedMount event, optional ones mounted empty."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

from tests.kubesim.conftest import build_client
from tests.kubesim.server import KubeSim
from tests.kubesim.test_kubelet import create_pod, phase_is, wait_pod, waiting_reason

NS = "runnerd"
CMS = f"/api/v1/namespaces/{NS}/configmaps"
Obj = dict[str, Any]


@pytest.fixture
async def kube(kubesim: KubeSim) -> AsyncIterator[httpx.AsyncClient]:
    async with build_client(kubesim) as client:
        yield client


def shell_pod(name: str, script: str, volumes: list[Obj], mounts: list[Obj]) -> Obj:
    container = {"name": "c", "image": "busybox:1.36", "command": ["sh", "-c", script]}
    container["volumeMounts"] = mounts
    spec = {"restartPolicy": "Never", "containers": [container], "volumes": volumes}
    return {"metadata": {"name": name}, "spec": spec}


async def pod_log(kube: httpx.AsyncClient, name: str) -> str:
    r = await kube.get(f"/api/v1/namespaces/{NS}/pods/{name}/log")
    assert r.status_code == 200, r.text
    return r.text


async def test_keys_become_files_with_their_modes(kube: httpx.AsyncClient) -> None:
    data = {"app.yaml": "kind: app\n", "other": "x"}
    assert (await kube.post(CMS, json={"metadata": {"name": "cfg"}, "data": data})).is_success
    volumes = [
        {
            "name": "picked",
            "configMap": {
                "name": "cfg",
                "items": [{"key": "app.yaml", "path": "sub/app.yaml", "mode": 0o600}],
            },
        },
        {"name": "all", "configMap": {"name": "cfg", "defaultMode": 0o440}},
    ]
    mounts = [
        {"name": "picked", "mountPath": "/etc/picked", "readOnly": True},
        {"name": "all", "mountPath": "/etc/all"},
    ]
    script = (
        "cat /etc/picked/sub/app.yaml; stat -c %a /etc/picked/sub/app.yaml; ls /etc/picked; "
        "ls /etc/all; stat -L -c %a /etc/all/other; cat /etc/all/other; echo; "
        "readlink /etc/all/..data | cut -c1-3"
    )
    await create_pod(kube, shell_pod("reader", script, volumes, mounts))
    pod = await wait_pod(kube, "reader", phase_is("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded"
    assert (await pod_log(kube, "reader")).splitlines() == [
        "kind: app",
        "600",
        "sub",
        "app.yaml",
        "other",
        "440",
        "x",
        "..2",  # ..data points at the timestamped payload directory, as AtomicWriter does
    ]


async def test_a_missing_configmap_keeps_the_pod_waiting_until_it_appears(
    kube: httpx.AsyncClient,
) -> None:
    volumes = [{"name": "cfg", "configMap": {"name": "late"}}]
    mounts = [{"name": "cfg", "mountPath": "/etc/cfg"}]
    await create_pod(kube, shell_pod("waiter", "cat /etc/cfg/k", volumes, mounts))
    message = 'MountVolume.SetUp failed for volume "cfg" : configmap "late" not found'
    events: list[Obj] = []
    with trio.fail_after(15):
        while not events:  # the event is what a user reads in `kubectl describe`
            params = {"fieldSelector": "reason=FailedMount,involvedObject.name=waiter"}
            r = await kube.get(f"/api/v1/namespaces/{NS}/events", params=params)
            events = r.json()["items"]
            if not events:
                await trio.sleep(0.05)
    assert events[0]["type"] == "Warning" and events[0]["message"] == message
    assert events[0]["source"]["component"] == "kubelet"
    pod = (await kube.get(f"/api/v1/namespaces/{NS}/pods/waiter")).json()
    assert pod["status"]["phase"] == "Pending" and waiting_reason(pod) == "ContainerCreating"
    await kube.post(CMS, json={"metadata": {"name": "late"}, "data": {"k": "here"}})
    pod = await wait_pod(kube, "waiter", phase_is("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded"
    assert await pod_log(kube, "waiter") == "here"


async def test_missing_items_key_and_optional_volumes(kube: httpx.AsyncClient) -> None:
    await kube.post(CMS, json={"metadata": {"name": "cfg"}, "data": {"a": "1"}})
    volumes = [
        {"name": "absent", "configMap": {"name": "nope", "optional": True}},
        {
            "name": "partial",
            "configMap": {
                "name": "cfg",
                "optional": True,
                "items": [{"key": "a", "path": "a"}, {"key": "zz", "path": "zz"}],
            },
        },
    ]
    mounts = [
        {"name": "absent", "mountPath": "/etc/absent"},
        {"name": "partial", "mountPath": "/etc/partial"},
    ]
    script = "ls /etc/absent | wc -l; ls /etc/partial"
    await create_pod(kube, shell_pod("optional", script, volumes, mounts))
    pod = await wait_pod(kube, "optional", phase_is("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded"
    assert (await pod_log(kube, "optional")).split() == ["0", "a"]
    volumes = [{"name": "v", "configMap": {"name": "cfg", "items": [{"key": "zz", "path": "z"}]}}]
    await create_pod(kube, shell_pod("strict", "true", volumes, []))
    message = (
        'MountVolume.SetUp failed for volume "v" : configmap references non-existent config key: zz'
    )
    with trio.fail_after(15):
        while True:
            params = {"fieldSelector": "reason=FailedMount,involvedObject.name=strict"}
            items = (await kube.get(f"/api/v1/namespaces/{NS}/events", params=params)).json()
            if items["items"]:
                break
            await trio.sleep(0.05)
    assert items["items"][0]["message"] == message
    r = await kube.delete(f"/api/v1/namespaces/{NS}/pods/strict")  # deletable while waiting
    assert r.status_code == 200
    await wait_deleted(kube, "strict", r.json()["metadata"]["resourceVersion"])


async def wait_deleted(kube: httpx.AsyncClient, name: str, rv: str) -> None:
    """Watch from the delete's RV (so a removal that came first is replayed) until DELETED."""
    params = {"watch": "1", "fieldSelector": f"metadata.name={name}", "resourceVersion": rv}
    with trio.fail_after(15):
        async with kube.stream("GET", f"/api/v1/namespaces/{NS}/pods", params=params) as resp:
            async for line in resp.aiter_lines():
                if line and json.loads(line)["type"] == "DELETED":
                    return
