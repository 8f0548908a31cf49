"""Fidelity with the official `kubernetes` Python client (sync: it runs in a worker thread).

Nobody here wrote this client: if it deserializes our objects, follows our watch
and recovers from our 410 the way its own code says it does, the wire is right.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from tests.kubesim.conftest import build_pod
from tests.kubesim.server import KubeSim

T = TypeVar("T")
NS = "runnerd"


async def with_core(sim: KubeSim, tmp_path: Path, fn: Callable[[client.CoreV1Api], T]) -> T:
    """Run `fn(CoreV1Api)` in a thread against a kubeconfig the sim wrote."""
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")

    def call() -> T:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        try:
            return fn(client.CoreV1Api(api))
        finally:
            api.close()

    with trio.fail_after(20):
        return await trio.to_thread.run_sync(call)


async def test_create_list_read_delete(apiserver: KubeSim, tmp_path: Path) -> None:
    def scenario(core: client.CoreV1Api) -> dict[str, Any]:
        body = client.V1Pod(
            metadata=client.V1ObjectMeta(name="web", labels={"app": "web"}),
            spec=client.V1PodSpec(containers=[client.V1Container(name="app", image="busybox")]),
        )
        created = core.create_namespaced_pod(NS, body)
        listed = core.list_namespaced_pod(NS, label_selector="app=web")
        read = core.read_namespaced_pod_status("web", NS)
        deleted = core.delete_namespaced_pod("web", NS, grace_period_seconds=0)
        with pytest.raises(ApiException) as gone:
            core.read_namespaced_pod("web", NS)
        return {
            "created": created,
            "listed": listed,
            "read": read,
            "deleted": deleted,
            "gone": gone.value,
        }

    got = await with_core(apiserver, tmp_path, scenario)
    assert got["created"].metadata.uid and got["created"].status.phase == "Pending"
    assert got["created"].spec.termination_grace_period_seconds == 30
    assert [p.metadata.name for p in got["listed"].items] == ["web"]
    assert got["listed"].metadata.resource_version == got["created"].metadata.resource_version
    assert got["read"].status.qos_class == "BestEffort"
    assert got["deleted"].metadata.deletion_timestamp is not None
    assert got["gone"].status == 404 and got["gone"].reason == "Not Found"


async def test_errors_surface_as_api_exceptions(apiserver: KubeSim, tmp_path: Path) -> None:
    apiserver.faults.deny("list", "pods")

    def scenario(core: client.CoreV1Api) -> list[ApiException]:
        errors = []
        for call in (
            lambda: core.list_namespaced_pod(NS),
            lambda: core.create_namespaced_pod(NS, build_pod("Bad_Name")),
        ):
            with pytest.raises(ApiException) as info:
                call()
            errors.append(info.value)
        return errors

    forbidden, invalid = await with_core(apiserver, tmp_path, scenario)
    assert forbidden.status == 403 and "cannot list resource" in forbidden.body
    assert invalid.status == 422 and '"reason":"Invalid"' in invalid.body


async def test_watch_from_a_resource_version(apiserver: KubeSim, tmp_path: Path) -> None:
    await apiserver.store.create("pods", NS, build_pod("before"))
    rv = str(apiserver.store.resource_version)
    await apiserver.store.create("pods", NS, build_pod("after"))
    await apiserver.store.delete("pods", NS, "after")

    def scenario(core: client.CoreV1Api) -> list[tuple[str, str]]:
        seen = []
        w = watch.Watch()
        for event in w.stream(core.list_namespaced_pod, NS, resource_version=rv):
            seen.append((event["type"], event["object"].metadata.name))
            if event["type"] == "DELETED":
                w.stop()
        return seen

    got = await with_core(apiserver, tmp_path, scenario)
    assert got == [("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "after")]


async def test_watch_recovers_from_an_injected_410(apiserver: KubeSim, tmp_path: Path) -> None:
    rv = str(apiserver.store.resource_version)
    await apiserver.store.create("pods", NS, build_pod("p"))
    apiserver.faults.expire_next_watch()

    def scenario(core: client.CoreV1Api) -> list[tuple[str, str]]:
        w = watch.Watch()
        for event in w.stream(core.list_namespaced_pod, NS, resource_version=rv):
            w.stop()
            return [(event["type"], event["object"].metadata.name)]
        return []

    assert await with_core(apiserver, tmp_path, scenario) == [("ADDED", "p")]
    pattern = "/api/v1/namespaces/{namespace}/pods"
    assert apiserver.stats.count("watch", pattern) == 2  # the 410 answer, then the retry


async def test_second_410_is_raised(apiserver: KubeSim, tmp_path: Path) -> None:
    rv = str(apiserver.store.resource_version)
    apiserver.faults.expire_next_watch(2)

    def scenario(core: client.CoreV1Api) -> ApiException:
        with pytest.raises(ApiException) as info:
            for _ in watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=rv):
                pass
        return info.value

    err = await with_core(apiserver, tmp_path, scenario)
    assert err.status == 410 and err.reason.startswith("Expired: too old resource version: ")


async def test_watch_with_timeout_and_bookmarks(apiserver: KubeSim, tmp_path: Path) -> None:
    rv = str(apiserver.store.resource_version)

    def scenario(core: client.CoreV1Api) -> list[str]:
        stream = watch.Watch().stream(
            core.list_namespaced_pod,
            NS,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
        )
        return [event["type"] for event in stream]

    kinds = await with_core(apiserver, tmp_path, scenario)
    assert kinds and set(kinds) == {"BOOKMARK"}  # then the stream ended at timeoutSeconds


async def test_services_and_namespaces(apiserver: KubeSim, tmp_path: Path) -> None:
    def scenario(core: client.CoreV1Api) -> tuple[list[str], str]:
        namespaces = [n.metadata.name for n in core.list_namespace().items]
        svc = client.V1Service(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=80)]),
        )
        created = core.create_namespaced_service(NS, svc)
        core.delete_namespaced_service("web", NS)
        return namespaces, created.spec.cluster_ip

    namespaces, cluster_ip = await with_core(apiserver, tmp_path, scenario)
    assert "runnerd" in namespaces and cluster_ip.startswith("10.96.")


async def test_delete_a_pod_stuck_pulling_its_image(kubesim: KubeSim, tmp_path: Path) -> None:
    def scenario(core: client.CoreV1Api) -> list[str]:
        body = client.V1Pod(
            metadata=client.V1ObjectMeta(name="stuck"),
            spec=client.V1PodSpec(
                containers=[client.V1Container(name="app", image="acme/missing:1")]
            ),
        )
        core.create_namespaced_pod(NS, body)
        w = watch.Watch()
        seen: list[str] = []
        selector = "metadata.name=stuck"
        stream = w.stream(core.list_namespaced_pod, NS, field_selector=selector, timeout_seconds=10)
        for event in stream:
            pod = event["object"]
            statuses = pod.status.container_statuses or []
            waiting = statuses[0].state.waiting if statuses else None
            if waiting and waiting.reason == "ErrImagePull" and "ErrImagePull" not in seen:
                seen.append(waiting.reason)
                core.delete_namespaced_pod("stuck", NS)  # default grace: 30 s
            if event["type"] == "DELETED":
                seen.append("DELETED")
                w.stop()
        return seen

    assert await with_core(kubesim, tmp_path, scenario) == ["ErrImagePull", "DELETED"]
