"""Watch semantics: list-then-watch, RV resume, 410, bookmarks, timeouts, selectors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio

from tests.kubesim.conftest import PODS, build_pod
from tests.kubesim.server import KubeSim

Event = tuple[str, dict[str, Any]]


@asynccontextmanager
async def open_watch(
    kube: httpx.AsyncClient, path: str = PODS, **params: Any
) -> AsyncIterator[trio.MemoryReceiveChannel[Event]]:
    """Stream a watch; yields a channel of (type, object) that ends when the stream does.

    A stream cut mid-body (no final chunk) ends with a synthetic ("BROKEN", {}) item.
    """
    send, recv = trio.open_memory_channel[Event](1000)
    async with kube.stream("GET", path, params={"watch": "1", **params}) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"] == "application/json"
        assert resp.headers["transfer-encoding"] == "chunked"

        async def pump() -> None:
            async with send:
                try:
                    async for line in resp.aiter_lines():
                        if line:
                            ev = json.loads(line)
                            await send.send((ev["type"], ev["object"]))
                except httpx.RemoteProtocolError:
                    await send.send(("BROKEN", {}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump)
            yield recv
            nursery.cancel_scope.cancel()


async def next_events(ch: trio.MemoryReceiveChannel[Event], n: int) -> list[Event]:
    with trio.fail_after(5):
        return [await ch.receive() for _ in range(n)]


async def rest_of(ch: trio.MemoryReceiveChannel[Event]) -> list[Event]:
    with trio.fail_after(5):
        return [ev async for ev in ch]


def summary(events: list[Event]) -> list[tuple[str, str]]:
    return [(t, o["metadata"].get("name", "")) for t, o in events]


async def test_list_then_watch_sees_every_change_once(kube: httpx.AsyncClient) -> None:
    await kube.post(PODS, json=build_pod("old"))
    rv = (await kube.get(PODS)).json()["metadata"]["resourceVersion"]
    await kube.post(PODS, json=build_pod("missed-by-list"))
    async with open_watch(kube, resourceVersion=rv) as events:
        await kube.post(PODS, json=build_pod("new"))
        await kube.delete(f"{PODS}/new")
        got = await next_events(events, 4)
    assert summary(got) == [
        ("ADDED", "missed-by-list"),
        ("ADDED", "new"),
        ("MODIFIED", "new"),
        ("DELETED", "new"),
    ]
    assert got[2][1]["metadata"]["deletionTimestamp"]
    rvs = [int(o["metadata"]["resourceVersion"]) for _, o in got]
    assert rvs == sorted(rvs) and rvs[3] == rvs[2] + 1  # DELETED carries the deletion RV
    assert all(o["kind"] == "Pod" and o["apiVersion"] == "v1" for _, o in got)


async def test_unset_or_zero_rv_starts_with_added(kube: httpx.AsyncClient) -> None:
    await kube.post(PODS, json=build_pod("a"))
    await kube.post(PODS, json=build_pod("b"))
    for rv in (None, "0"):
        params = {"resourceVersion": rv} if rv else {}
        async with open_watch(kube, **params) as events:
            assert summary(await next_events(events, 2)) == [("ADDED", "a"), ("ADDED", "b")]


async def test_headers_are_flushed_before_any_event(kube: httpx.AsyncClient) -> None:
    # Nothing exists, nothing changes, no bookmarks: only the flushed headers can arrive.
    with trio.fail_after(5):
        async with kube.stream("GET", PODS, params={"watch": "1"}) as resp:
            assert resp.status_code == 200
            assert resp.headers["content-type"] == "application/json"
            assert resp.headers["transfer-encoding"] == "chunked"


async def test_timeout_seconds_ends_the_stream_cleanly(kube: httpx.AsyncClient) -> None:
    await kube.post(PODS, json=build_pod("a"))
    with trio.fail_after(5):
        r = await kube.get(PODS, params={"watch": "true", "timeoutSeconds": "1"})
    assert r.status_code == 200
    assert [json.loads(line)["type"] for line in r.text.splitlines()] == ["ADDED"]


async def test_too_old_rv_is_200_then_one_expired_event(
    apiserver: KubeSim, kube: httpx.AsyncClient
) -> None:
    for i in range(60):  # history_limit is 50
        await kube.post(PODS, json=build_pod(f"p{i}"))
    floor = apiserver.store.history_floor
    async with open_watch(kube, resourceVersion="3") as events:
        got = await rest_of(events)
    assert got == [
        (
            "ERROR",
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: 3 ({floor})",
                "reason": "Expired",
                "code": 410,
            },
        )
    ]


async def test_bookmarks_carry_only_the_rv(kube: httpx.AsyncClient) -> None:
    await kube.post(PODS, json=build_pod("a"))
    rv = (await kube.get(PODS)).json()["metadata"]["resourceVersion"]
    async with open_watch(kube, resourceVersion=rv, allowWatchBookmarks="true") as events:
        ((kind, obj),) = await next_events(events, 1)
    assert kind == "BOOKMARK"
    assert obj == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": rv},
        "spec": {"containers": None},
        "status": {},
    }


async def test_no_bookmarks_unless_asked(kube: httpx.AsyncClient) -> None:
    r = await kube.get(PODS, params={"watch": "1", "timeoutSeconds": "1"})
    assert r.text == ""  # 1 s is five bookmark intervals in this fixture


async def test_send_initial_events_ends_with_annotated_bookmark(kube: httpx.AsyncClient) -> None:
    await kube.post(PODS, json=build_pod("a"))
    params = {
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
    }
    async with open_watch(kube, **params) as events:
        (t1, _), (t2, mark) = await next_events(events, 2)
    assert (t1, t2) == ("ADDED", "BOOKMARK")
    assert mark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    r = await kube.get(PODS, params={"watch": "1", "sendInitialEvents": "true"})
    assert r.status_code == 422
    assert [c["message"] for c in r.json()["details"]["causes"]] == [
        "Forbidden: sendInitialEvents is forbidden for watch unless resourceVersionMatch is set "
        "to NotOlderThan",
        "Forbidden: sendInitialEvents requires setting allowWatchBookmarks=true",
    ]


async def test_field_selectors(kube: httpx.AsyncClient) -> None:
    await kube.post(PODS, json=build_pod("a"))
    await kube.post(PODS, json=build_pod("b"))
    r = await kube.get(PODS, params={"fieldSelector": "metadata.name=b"})
    assert [p["metadata"]["name"] for p in r.json()["items"]] == ["b"]
    r = await kube.get(PODS, params={"fieldSelector": "status.phase!=Pending"})
    assert r.json()["items"] == []
    r = await kube.get("/api/v1/pods", params={"fieldSelector": "metadata.namespace==runnerd"})
    assert len(r.json()["items"]) == 2
    r = await kube.get(PODS, params={"fieldSelector": "spec.containers=x"})
    assert r.status_code == 400
    assert r.json()["message"] == "field label not supported: spec.containers"
    async with open_watch(kube, fieldSelector="metadata.name=c") as events:
        await kube.post(PODS, json=build_pod("d"))
        await kube.post(PODS, json=build_pod("c"))
        assert summary(await next_events(events, 1)) == [("ADDED", "c")]


async def test_label_selectors(kube: httpx.AsyncClient) -> None:
    pods = {
        "a": {"app": "web", "tier": "front"},
        "b": {"app": "db"},
        "c": {"app": "web", "canary": "yes"},
        "d": {},
    }
    for name, labels in pods.items():
        await kube.post(PODS, json=build_pod(name, labels=labels))
    cases = {
        "app=web": "ac",
        "app==web": "ac",
        "app!=web": "bd",
        "app in (web,db)": "abc",
        "app notin (web)": "bd",
        "canary": "c",
        "!canary": "abd",
        "app=web,!canary": "a",
        "": "abcd",
    }
    for selector, expected in cases.items():
        r = await kube.get(PODS, params={"labelSelector": selector})
        assert "".join(p["metadata"]["name"] for p in r.json()["items"]) == expected, selector
    assert (await kube.get(PODS, params={"labelSelector": "a=(b"})).status_code == 400


async def test_objects_leaving_a_selector_are_deleted_for_the_watcher(
    apiserver: KubeSim, kube: httpx.AsyncClient
) -> None:
    await kube.post(PODS, json=build_pod("p"))
    async with open_watch(kube, fieldSelector="status.phase=Pending") as events:
        assert summary(await next_events(events, 1)) == [("ADDED", "p")]

        def run(pod: dict[str, Any]) -> None:
            pod["status"]["phase"] = "Running"

        await apiserver.store.update("pods", "runnerd", "p", run)
        ((kind, obj),) = await next_events(events, 1)
    assert kind == "DELETED"
    assert obj["metadata"]["resourceVersion"] == str(apiserver.store.resource_version)


async def test_watch_a_single_namespace_only(kube: httpx.AsyncClient) -> None:
    await kube.post("/api/v1/namespaces/default/pods", json=build_pod("elsewhere"))
    async with open_watch(kube) as events:
        await kube.post(PODS, json=build_pod("here"))
        assert summary(await next_events(events, 1)) == [("ADDED", "here")]


async def test_watch_counts_as_open_then_closed(
    apiserver: KubeSim, kube: httpx.AsyncClient
) -> None:
    async with open_watch(kube, allowWatchBookmarks="1") as events:
        await next_events(events, 1)
        assert apiserver.stats.watches_open == 1
    with trio.fail_after(5):
        await apiserver.stats.wait_until(lambda s: s.watches_open == 0)
    assert apiserver.stats.watches_total == 1
    assert apiserver.store.subscriber_count == 0
