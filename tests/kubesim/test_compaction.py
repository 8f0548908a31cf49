"""History compaction: the schedule (fake clock), then 410s on watch, Exact list and continue."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from tests.kubesim.conftest import PODS, build_pod
from tests.kubesim.server import KubeSim
from tests.kubesim.store import Store, TooOld, run_compactor
from tests.kubesim.test_apiserver_watch import open_watch, rest_of

NS = "runnerd"


async def test_compactor_compacts_to_the_rv_of_its_previous_tick(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = Store()
    await store.create("pods", NS, build_pod("a"))
    before_first_tick = store.resource_version
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_compactor, store, 300.0)
        await trio.sleep(301)  # tick 1: nothing compacted, the current RV remembered
        assert store.compacted == 0
        await store.create("pods", NS, build_pod("b"))
        await store.open_watch(before_first_tick - 1)[1].aclose()  # still resumable
        await trio.sleep(300)  # tick 2: compacted to what tick 1 saw
        assert store.compacted == before_first_tick
        with pytest.raises(TooOld):
            store.open_watch(before_first_tick - 1)
        await store.open_watch(before_first_tick)[1].aclose()
        nursery.cancel_scope.cancel()


async def compact_now(sim: KubeSim) -> int:
    """Two ticks: everything up to the current RV is compacted."""
    sim.store.compact()
    target = sim.store.compact()
    assert target is not None
    return target


async def test_watch_from_a_compacted_rv_is_an_error_event(
    apiserver: KubeSim, kube: httpx.AsyncClient
) -> None:
    old = str(apiserver.store.resource_version)
    await kube.post(PODS, json=build_pod("a"))
    compacted = await compact_now(apiserver)
    async with open_watch(kube, resourceVersion=old) as events:
        [(kind, obj)] = await rest_of(events)
    assert kind == "ERROR"
    assert obj == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: {old} ({compacted})",
        "reason": "Expired",
        "code": 410,
    }


async def test_lists_at_an_exact_rv(apiserver: KubeSim, kube: httpx.AsyncClient) -> None:
    await kube.post(PODS, json=build_pod("a", labels={"v": "1"}))
    at_one = apiserver.store.resource_version
    await kube.patch(
        f"{PODS}/a",
        json={"metadata": {"labels": {"v": "2"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    await kube.post(PODS, json=build_pod("b"))
    exact = {"resourceVersion": str(at_one), "resourceVersionMatch": "Exact"}
    r = await kube.get(PODS, params=exact)
    assert r.json()["metadata"]["resourceVersion"] == str(at_one)
    [pod] = r.json()["items"]
    assert pod["metadata"]["labels"] == {"v": "1"}
    assert pod["metadata"]["resourceVersion"] == str(at_one)
    newer = {"resourceVersion": str(at_one), "resourceVersionMatch": "NotOlderThan"}
    assert len((await kube.get(PODS, params=newer)).json()["items"]) == 2

    await compact_now(apiserver)
    r = await kube.get(PODS, params=exact)
    assert (r.status_code, r.json()["reason"]) == (410, "Expired")
    assert r.json()["message"] == "The resourceVersion for the provided list is too old."
    future = {"resourceVersion": "999999", "resourceVersionMatch": "Exact"}
    r = await kube.get(PODS, params=future)
    assert (r.status_code, r.json()["reason"], r.headers["retry-after"]) == (504, "Timeout", "1")
    r = await kube.get(PODS, params={"resourceVersionMatch": "Exact"})
    assert r.status_code == 422
    assert r.json()["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
        "resourceVersionMatch is forbidden unless resourceVersion is provided"
    )


async def test_a_continue_token_from_before_compaction_is_410_with_a_new_token(
    apiserver: KubeSim, kube: httpx.AsyncClient
) -> None:
    for name in ("a", "b", "c"):
        await kube.post(PODS, json=build_pod(name))
    first = (await kube.get(PODS, params={"limit": "1"})).json()
    await compact_now(apiserver)
    r = await kube.get(PODS, params={"limit": "1", "continue": first["metadata"]["continue"]})
    assert (r.status_code, r.json()["reason"]) == (410, "Expired")
    assert r.json()["message"].startswith("The provided continue parameter is too old")
    resumed = await kube.get(
        PODS, params={"limit": "5", "continue": r.json()["metadata"]["continue"]}
    )
    assert [p["metadata"]["name"] for p in resumed.json()["items"]] == ["b", "c"]


async def test_official_client_relists_after_compaction(apiserver: KubeSim, tmp_path: Path) -> None:
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    listed = trio.Event()
    compacted = trio.Event()
    token = trio.lowlevel.current_trio_token()

    def scenario() -> list[str]:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        core, seen, relists = client.CoreV1Api(api), [], 0
        try:
            rv = core.list_namespaced_pod(NS).metadata.resource_version
            trio.from_thread.run_sync(listed.set, trio_token=token)
            trio.from_thread.run(compacted.wait, trio_token=token)
            while "late" not in seen:
                try:
                    w = watch.Watch()
                    for event in w.stream(
                        core.list_namespaced_pod, NS, resource_version=rv, timeout_seconds=5
                    ):
                        seen.append(event["object"].metadata.name)
                        w.stop()
                except ApiException as exc:  # 410: the documented recovery is list + watch
                    assert exc.status == 410
                    relists += 1
                    pods = core.list_namespaced_pod(NS)
                    seen += [p.metadata.name for p in pods.items]
                    rv = pods.metadata.resource_version
                    trio.from_thread.run(
                        apiserver.store.create, "pods", NS, build_pod("late"), trio_token=token
                    )
            return [*seen, f"relists={relists}"]
        finally:
            api.close()

    async with trio.open_nursery() as nursery:
        result: list[list[str]] = []

        async def run() -> None:
            result.append(await trio.to_thread.run_sync(scenario))

        nursery.start_soon(run)
        with trio.fail_after(20):
            await listed.wait()
            await apiserver.store.create("pods", NS, build_pod("early"))
            await compact_now(apiserver)
            compacted.set()
    assert result == [["early", "late", "relists=1"]]
