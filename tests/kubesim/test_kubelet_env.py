"""Container env read from ConfigMaps (envFrom, configMapKeyRef) as a process sees it,
and CreateContainerConfigError while the ConfigMap or key is missing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

from tests.kubesim.conftest import build_client
from tests.kubesim.server import KubeSim
from tests.kubesim.test_kubelet import create_pod, phase_is, wait_pod, waiting_reason
from tests.kubesim.test_kubelet_volumes import pod_log

NS = "runnerd"
CMS = f"/api/v1/namespaces/{NS}/configmaps"
Obj = dict[str, Any]


@pytest.fixture
async def kube(kubesim: KubeSim) -> AsyncIterator[httpx.AsyncClient]:
    async with build_client(kubesim) as client:
        yield client


def env_pod(name: str, script: str, **container: Any) -> Obj:
    ctr = {"name": "c", "image": "busybox:1.36", "command": ["sh", "-c", script], **container}
    return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [ctr]}}


async def events_for(kube: httpx.AsyncClient, pod: str, reason: str) -> list[Obj]:
    """The pod's events of `reason`, waiting until there is one."""
    params = {"fieldSelector": f"reason={reason},involvedObject.name={pod}"}
    with trio.fail_after(15):
        while True:
            items: list[Obj] = (
                await kube.get(f"/api/v1/namespaces/{NS}/events", params=params)
            ).json()["items"]
            if items:
                return items
            await trio.sleep(0.05)


async def test_env_from_configmaps(kube: httpx.AsyncClient) -> None:
    data = {"A": "1", "DOLLAR": "$(ONE)", "1abc": "skipped"}
    await kube.post(CMS, json={"metadata": {"name": "settings"}, "data": data})
    env_from = [
        {"configMapRef": {"name": "settings"}, "prefix": "S_"},
        {"configMapRef": {"name": "settings"}},
        {"configMapRef": {"name": "absent", "optional": True}},
    ]
    env = [
        {"name": "ONE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "A"}}},
        {"name": "LIT", "value": "$(ONE)-x"},  # expands: ONE is defined above it
        {
            "name": "NOPE",
            "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "zz", "optional": True}},
        },
    ]
    script = 'echo "$S_A|$ONE|$LIT|$S_DOLLAR|$A|${NOPE-unset}"'
    await create_pod(kube, env_pod("envy", script, envFrom=env_from, env=env))
    pod = await wait_pod(kube, "envy", phase_is("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded"
    # Values from a ConfigMap are not $(VAR)-expanded; literal env values are.
    assert await pod_log(kube, "envy") == "1|1|1-x|$(ONE)|1|unset\n"
    (event,) = await events_for(kube, "envy", "InvalidEnvironmentVariableNames")
    assert event["type"] == "Warning" and event["message"] == (
        "Keys [1abc] from the EnvFrom configMap runnerd/settings were skipped since they are "
        "considered invalid environment variable names."
    )


async def test_missing_configmap_or_key_is_create_container_config_error(
    kube: httpx.AsyncClient,
) -> None:
    ref = {"configMapKeyRef": {"name": "later", "key": "k"}}
    await create_pod(kube, env_pod("waits", "echo $V", env=[{"name": "V", "valueFrom": ref}]))
    (event,) = await events_for(kube, "waits", "Failed")
    assert event["message"] == 'Error: configmap "later" not found'
    assert event["involvedObject"]["fieldPath"] == "spec.containers{c}"
    pod = (await kube.get(f"/api/v1/namespaces/{NS}/pods/waits")).json()
    assert (
        waiting_reason(pod) == "CreateContainerConfigError" and pod["status"]["phase"] == "Pending"
    )
    waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["message"] == 'configmap "later" not found'
    r = await kube.get(f"/api/v1/namespaces/{NS}/pods/waits/log")
    assert r.status_code == 400 and r.json()["message"] == (
        'container "c" in pod "waits" is waiting to start: CreateContainerConfigError'
    )
    await kube.post(CMS, json={"metadata": {"name": "later"}, "data": {"other": "x"}})
    with trio.fail_after(15):
        while True:  # the kubelet retries: now the key is what is missing
            pod = (await kube.get(f"/api/v1/namespaces/{NS}/pods/waits")).json()
            message = (
                pod["status"]["containerStatuses"][0]["state"].get("waiting", {}).get("message")
            )
            if message != 'configmap "later" not found':
                break
            await trio.sleep(0.05)
    assert message == "couldn't find key k in ConfigMap runnerd/later"
    patch = {"data": {"k": "found"}}
    headers = {"content-type": "application/merge-patch+json"}
    await kube.patch(f"{CMS}/later", json=patch, headers=headers)
    pod = await wait_pod(kube, "waits", phase_is("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded" and await pod_log(kube, "waits") == "found\n"
