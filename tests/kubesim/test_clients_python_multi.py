"""The official Python client on ConfigMaps and on a pod with several containers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.kubesim.server import KubeSim
from tests.kubesim.test_clients_python import NS, with_core
from tests.kubesim.test_kubelet_multi import multi_pod


async def test_config_map_crud_watch_and_errors(apiserver: KubeSim, tmp_path: Path) -> None:
    def scenario(core: client.CoreV1Api) -> dict[str, Any]:
        meta = client.V1ObjectMeta(name="app", labels={"role": "workspace-app"})
        body = client.V1ConfigMap(metadata=meta, data={"manifest.yaml": "kind: App\n"})
        created = core.create_namespaced_config_map(NS, body)
        read = core.read_namespaced_config_map("app", NS)
        listed = core.list_namespaced_config_map(NS, label_selector="role=workspace-app")
        patched = core.patch_namespaced_config_map("app", NS, {"data": {"extra": "1"}})
        with pytest.raises(ApiException) as exists:
            core.create_namespaced_config_map(NS, body)
        bad = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="bad"), data={"a/b": "x"})
        with pytest.raises(ApiException) as invalid:
            core.create_namespaced_config_map(NS, bad)
        w = watch.Watch()
        stream = w.stream(
            core.list_namespaced_config_map,
            NS,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=5,
        )
        events = []
        for event in stream:  # w.stop(), not break: the stream then closes its connection
            events.append((event["type"], event["object"].data))
            w.stop()
        core.delete_namespaced_config_map("app", NS)
        with pytest.raises(ApiException) as gone:
            core.read_namespaced_config_map("app", NS)
        return {
            "created": created,
            "read": read,
            "listed": listed,
            "patched": patched,
            "exists": exists,
            "invalid": invalid,
            "events": events,
            "gone": gone,
        }

    got = await with_core(apiserver, tmp_path, scenario)
    assert got["created"].metadata.uid and got["read"].data == {"manifest.yaml": "kind: App\n"}
    assert [c.metadata.name for c in got["listed"].items] == ["app"]
    assert got["patched"].data == {"manifest.yaml": "kind: App\n", "extra": "1"}
    assert got["events"] == [("MODIFIED", got["patched"].data)]
    assert got["exists"].value.status == 409
    assert got["invalid"].value.status == 422
    assert got["gone"].value.status == 404


async def test_multi_container_pod_statuses_and_logs(kubesim: KubeSim, tmp_path: Path) -> None:
    pod = multi_pod("pair", {"a": "echo from-a", "b": "echo from-b; exit 4"})

    def scenario(core: client.CoreV1Api) -> dict[str, Any]:
        core.create_namespaced_pod(NS, pod)
        w = watch.Watch()
        stream = w.stream(
            core.list_namespaced_pod, NS, field_selector="metadata.name=pair", timeout_seconds=15
        )
        final = None
        for event in stream:
            if event["object"].status.phase in ("Succeeded", "Failed"):
                final = event["object"]
                w.stop()
        log_b = core.read_namespaced_pod_log("pair", NS, container="b")
        with pytest.raises(ApiException) as unnamed:
            core.read_namespaced_pod_log("pair", NS)
        return {"final": final, "log_b": log_b, "unnamed": unnamed.value}

    got = await with_core(kubesim, tmp_path, scenario)
    final = got["final"]
    assert final is not None and final.status.phase == "Failed"
    statuses = final.status.container_statuses
    assert [s.name for s in statuses] == ["a", "b"]
    assert [s.state.terminated.exit_code for s in statuses] == [0, 4]
    assert [s.state.terminated.reason for s in statuses] == ["Completed", "Error"]
    assert all(s.state.terminated.finished_at is not None for s in statuses)
    assert got["log_b"] == "from-b\n"
    assert got["unnamed"].status == 400
    assert b"choose one of: [a b]" in got["unnamed"].body.encode()
