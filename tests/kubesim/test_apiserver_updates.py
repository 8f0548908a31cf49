"""PUT and PATCH: patch types, what an update may change, RV preconditions, watchers."""

from __future__ import annotations

import json

import httpx

from tests.kubesim.conftest import PODS, build_pod
from tests.kubesim.test_apiserver_watch import next_events, open_watch, summary

MERGE = {"Content-Type": "application/merge-patch+json"}
STRATEGIC = {"Content-Type": "application/strategic-merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}


async def patch(
    kube: httpx.AsyncClient, path: str, body: object, headers: dict[str, str]
) -> httpx.Response:
    return await kube.patch(path, content=json.dumps(body), headers=headers)


async def test_merge_patch_changes_labels_and_bumps_rv(kube: httpx.AsyncClient) -> None:
    created = (await kube.post(PODS, json=build_pod("a", labels={"x": "1", "y": "2"}))).json()
    r = await patch(kube, f"{PODS}/a", {"metadata": {"labels": {"x": "9", "y": None}}}, MERGE)
    assert r.status_code == 200
    pod = r.json()
    assert pod["metadata"]["labels"] == {"x": "9"}
    assert int(pod["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert pod["metadata"]["uid"] == created["metadata"]["uid"]
    assert pod["status"] == created["status"]  # status is its own subresource


async def test_strategic_patch_merges_containers_by_name(kube: httpx.AsyncClient) -> None:
    pod = build_pod("a")
    pod["spec"]["containers"].append({"name": "side", "image": "busybox:1.36"})
    await kube.post(PODS, json=pod)
    body = {"spec": {"containers": [{"name": "side", "image": "busybox:1.37"}]}}
    r = await patch(kube, f"{PODS}/a", body, STRATEGIC)
    images = [c["image"] for c in r.json()["spec"]["containers"]]
    assert images == ["busybox:1.36", "busybox:1.37"]


async def test_json_patch(kube: httpx.AsyncClient) -> None:
    await kube.post(PODS, json=build_pod("a"))
    ops = [
        {"op": "add", "path": "/metadata/annotations", "value": {"a/b": "c"}},
        {"op": "test", "path": "/metadata/name", "value": "a"},
    ]
    r = await patch(kube, f"{PODS}/a", ops, JSON_PATCH)
    assert r.json()["metadata"]["annotations"] == {"a/b": "c"}
    failing = [{"op": "test", "path": "/metadata/name", "value": "b"}]
    r = await patch(kube, f"{PODS}/a", failing, JSON_PATCH)
    assert r.status_code == 422 and "testing value /metadata/name failed" in r.text


async def test_pod_spec_is_immutable_but_images_are_not(kube: httpx.AsyncClient) -> None:
    await kube.post(PODS, json=build_pod("a"))
    r = await patch(kube, f"{PODS}/a", {"spec": {"restartPolicy": "Never"}}, MERGE)
    assert r.status_code == 422
    assert r.json()["message"].startswith(
        'Pod "a" is invalid: spec: Forbidden: pod updates may not change fields other than '
    )
    assert (await kube.get(f"{PODS}/a")).json()["spec"]["restartPolicy"] == "Always"
    body = {"spec": {"containers": [{"name": "app", "image": "busybox:1.37"}]}}
    assert (await patch(kube, f"{PODS}/a", body, STRATEGIC)).status_code == 200


async def test_bad_labels_and_unknown_patch_types(kube: httpx.AsyncClient) -> None:
    await kube.post(PODS, json=build_pod("a"))
    r = await patch(kube, f"{PODS}/a", {"metadata": {"labels": {"k": "bad value"}}}, MERGE)
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "metadata.labels"
    r = await patch(kube, f"{PODS}/a", {}, {"Content-Type": "application/apply-patch+yaml"})
    assert r.status_code == 415 and r.json()["reason"] == "UnsupportedMediaType"
    r = await patch(kube, f"{PODS}/missing", {}, MERGE)
    assert r.status_code == 404


async def test_put_with_a_stale_rv_is_a_conflict(kube: httpx.AsyncClient) -> None:
    svcs = "/api/v1/namespaces/runnerd/services"
    svc = (
        await kube.post(svcs, json={"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
    ).json()
    svc["metadata"]["labels"] = {"v": "2"}
    fresh = await kube.put(f"{svcs}/s", json=svc)
    assert fresh.status_code == 200 and fresh.json()["metadata"]["labels"] == {"v": "2"}
    r = await kube.put(f"{svcs}/s", json=svc)  # svc still carries the old RV
    assert r.status_code == 409
    assert r.json()["message"] == (
        'Operation cannot be fulfilled on services "s": the object has been modified; please '
        "apply your changes to the latest version and try again"
    )
    assert r.json()["reason"] == "Conflict"


async def test_watchers_see_the_update(kube: httpx.AsyncClient) -> None:
    await kube.post(PODS, json=build_pod("a"))
    async with open_watch(kube, labelSelector="tier=web") as events:
        await patch(kube, f"{PODS}/a", {"metadata": {"labels": {"tier": "web"}}}, MERGE)
        await patch(kube, f"{PODS}/a", {"metadata": {"labels": {"tier": "db"}}}, MERGE)
        assert summary(await next_events(events, 2)) == [("ADDED", "a"), ("DELETED", "a")]
