"""Every fault the tests can inject, and the accounting clients are measured by."""

from __future__ import annotations

import httpx
import pytest
import trio

from tests.kubesim.conftest import PODS, build_client, build_pod
from tests.kubesim.server import KubeSim
from tests.kubesim.test_apiserver_watch import next_events, open_watch, rest_of, summary


async def test_cut_watches_cleanly(apiserver: KubeSim, kube: httpx.AsyncClient) -> None:
    await kube.post(PODS, json=build_pod("a"))
    async with open_watch(kube) as events:
        await next_events(events, 1)
        assert apiserver.faults.cut_watches() == 1
        assert await rest_of(events) == []  # EOF after the final chunk, no error
    assert (await kube.get(PODS)).status_code == 200


async def test_cut_watches_abruptly(apiserver: KubeSim, kube: httpx.AsyncClient) -> None:
    await kube.post(PODS, json=build_pod("a"))
    async with open_watch(kube) as events:
        await next_events(events, 1)
        apiserver.faults.cut_watches(abrupt=True)
        assert await rest_of(events) == [("BROKEN", {})]


async def test_expire_next_watch(apiserver: KubeSim, kube: httpx.AsyncClient) -> None:
    rv = (await kube.get(PODS)).json()["metadata"]["resourceVersion"]
    apiserver.faults.expire_next_watch()
    async with open_watch(kube, resourceVersion=rv) as events:
        [(kind, obj)] = await rest_of(events)
    assert (kind, obj["code"], obj["reason"]) == ("ERROR", 410, "Expired")
    assert obj["message"].startswith(f"too old resource version: {rv} (")
    async with open_watch(kube, resourceVersion=rv) as events:
        await kube.post(PODS, json=build_pod("b"))
        assert summary(await next_events(events, 1)) == [("ADDED", "b")]


async def test_fail_next_with_429(apiserver: KubeSim, kube: httpx.AsyncClient) -> None:
    apiserver.faults.fail_next(2, 429)
    for _ in range(2):
        r = await kube.get(PODS)
        assert r.status_code == 429
        assert r.headers["retry-after"] == "1"
        assert r.headers["content-type"] == "text/plain; charset=utf-8"
        assert r.text == "Too many requests, please try again later.\n"
    assert (await kube.get(PODS)).status_code == 200


async def test_fail_next_answers_only_authenticated_requests(apiserver: KubeSim) -> None:
    # kube-apiserver authenticates before its in-flight limits: a bad token is a
    # 401 even while the server sheds load, and it does not use up the 429.
    apiserver.faults.fail_next(1, 429)
    async with build_client(apiserver, token="wrong") as stranger:
        assert (await stranger.get(PODS)).status_code == 401
    async with build_client(apiserver) as client:
        assert (await client.get(PODS)).status_code == 429
        assert (await client.get(PODS)).status_code == 200


async def test_fail_next_with_500_and_503(apiserver: KubeSim, kube: httpx.AsyncClient) -> None:
    apiserver.faults.fail_next(1, 500, retry_after_s=None)
    apiserver.faults.fail_next(1, 503, retry_after_s=2)
    r = await kube.get(PODS)
    assert r.status_code == 500 and "retry-after" not in r.headers
    assert r.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Internal error occurred: injected failure",
        "reason": "InternalError",
        "details": {"causes": [{"message": "injected failure"}]},
        "code": 500,
    }
    r = await kube.get(PODS)
    assert (r.status_code, r.headers["retry-after"]) == (503, "2")
    assert r.json()["reason"] == "ServiceUnavailable"
    assert r.json()["details"] == {"retryAfterSeconds": 2}
    assert (await kube.get(PODS)).status_code == 200


async def test_fail_next_only_for_a_verb(apiserver: KubeSim, kube: httpx.AsyncClient) -> None:
    apiserver.faults.fail_next(1, 503, verb="create")
    assert (await kube.get(PODS)).status_code == 200
    assert (await kube.post(PODS, json=build_pod("a"))).status_code == 503
    assert (await kube.get(f"{PODS}/a")).status_code == 404  # the failed create stored nothing
    assert (await kube.post(PODS, json=build_pod("a"))).status_code == 201


async def test_slow_next(apiserver: KubeSim, kube: httpx.AsyncClient) -> None:
    apiserver.faults.slow_next(1, 5.0, verb="list")
    with pytest.raises(httpx.ReadTimeout):
        # Only the read is short: a slow TLS connect on a loaded machine is not the fault.
        await kube.get(PODS, timeout=httpx.Timeout(10, read=0.3))
    assert (await kube.get(PODS)).status_code == 200  # only the next one


async def test_fail_next_rejects_other_codes(apiserver: KubeSim) -> None:
    with pytest.raises(ValueError, match="must be 429, 500 or 503"):
        apiserver.faults.fail_next(1, 404)


async def test_go_silent_then_resume(apiserver: KubeSim, kube: httpx.AsyncClient) -> None:
    accepted = apiserver.stats.connections_accepted
    apiserver.faults.go_silent()
    async with build_client(apiserver) as fresh:
        with pytest.raises(httpx.ReadTimeout):  # connected and handshaken, never answered
            await fresh.get(PODS, timeout=httpx.Timeout(10, read=0.5))
    assert apiserver.stats.connections_accepted == accepted + 1
    apiserver.faults.resume()
    assert (await kube.get(PODS)).status_code == 200


async def test_go_silent_before_the_handshake(apiserver: KubeSim) -> None:
    apiserver.faults.go_silent(handshakes=True)
    async with build_client(apiserver) as fresh:
        with pytest.raises(httpx.ConnectTimeout):
            await fresh.get(PODS, timeout=0.5)
        apiserver.faults.resume()
        assert (await fresh.get(PODS)).status_code == 200
    assert apiserver.stats.tls_handshakes == 1  # the stalled one never completed


async def test_silent_server_holds_back_watch_events(
    apiserver: KubeSim, kube: httpx.AsyncClient
) -> None:
    async with open_watch(kube) as events:
        apiserver.faults.go_silent()
        await apiserver.store.create("pods", "runnerd", build_pod("quiet"))
        with trio.move_on_after(0.3):
            await events.receive()
            pytest.fail("a silent server sent an event")
        apiserver.faults.resume()
        assert summary(await next_events(events, 1)) == [("ADDED", "quiet")]


async def test_stop_and_start_on_the_same_port(apiserver: KubeSim, kube: httpx.AsyncClient) -> None:
    port = apiserver.port
    await kube.post(PODS, json=build_pod("survivor"))
    await apiserver.stop()
    async with build_client(apiserver) as probe:
        with pytest.raises(httpx.ConnectError):
            await probe.get(PODS)
    await apiserver.start()
    assert apiserver.port == port
    async with build_client(apiserver) as after:
        names = [p["metadata"]["name"] for p in (await after.get(PODS)).json()["items"]]
    assert names == ["survivor"]


async def test_restart_fault(apiserver: KubeSim, kube: httpx.AsyncClient) -> None:
    before = apiserver.stats.connections_accepted
    await apiserver.faults.restart(0.05)
    assert (await kube.get(PODS)).status_code == 200  # httpx reconnects to the same port
    assert apiserver.stats.connections_accepted == before + 1


async def test_restart_breaks_open_watches(apiserver: KubeSim, kube: httpx.AsyncClient) -> None:
    async with open_watch(kube, allowWatchBookmarks="1") as events:
        await next_events(events, 1)
        await apiserver.restart()
        assert await rest_of(events) == [("BROKEN", {})]


async def test_stats_count_requests_and_connections(
    apiserver: KubeSim, kube: httpx.AsyncClient
) -> None:
    await kube.post(PODS, json=build_pod("a"))
    await kube.get(f"{PODS}/a")
    await kube.get(f"{PODS}/b")
    apiserver.faults.expire_next_watch()  # a watch that ends at once
    await kube.get(PODS, params={"watch": "1", "resourceVersion": "1"})
    snap = (await kube.get("/_kubesim/stats")).json()
    pattern = "/api/v1/namespaces/{namespace}/pods"
    assert {"verb": "get", "path": pattern + "/{name}", "count": 2} in snap["requests"]
    assert {"verb": "create", "path": pattern, "count": 1} in snap["requests"]
    assert snap["requestsByVerb"] == {"create": 1, "get": 2, "watch": 1}
    assert snap["watches"] == {"open": 0, "total": 1}
    # Keep-alive reuses one, and the client has not let it go.
    assert snap["connections"] == {"accepted": 1, "tls": 1, "closedIdle": 0}
    assert apiserver.stats.count("watch", pattern) == 1
    # Same scope as requests (no /_kubesim/*): one response per request answered.
    assert snap["responses"] == {"200": 2, "201": 1, "404": 1}
    async with open_watch(kube) as events:
        await next_events(events, 1)  # a stream counts as it starts, not when it ends
        assert apiserver.stats.responses[200] == 3
        assert sum(apiserver.stats.requests.values()) == sum(apiserver.stats.responses.values())
    # A client that closes its idle keep-alive connection: counted once seen.
    async with build_client(apiserver) as other:
        await other.get(f"{PODS}/a")
    with trio.fail_after(5):
        await apiserver.stats.wait_until(lambda s: s.connections_closed_idle == 1)


async def test_graceful_restart_ends_watches_cleanly(
    apiserver: KubeSim, kube: httpx.AsyncClient
) -> None:
    async with open_watch(kube, allowWatchBookmarks="1") as events:
        await next_events(events, 1)
        await apiserver.faults.restart(graceful=True)
        assert await rest_of(events) == []  # final chunk, then EOF: no error
