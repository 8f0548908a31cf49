"""attach/exec before the kubelet: pre-upgrade checks in §1.9 order, subprotocols, the conn.

The channel protocol itself is K2's (test_attach.py); here a recording kubelet
stands in so the apiserver's half — what it checks, what it hands over, how the
`conn` adapter behaves — is tested on its own, with a real WebSocket client.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    WebSocketConnection,
    wrap_client_stream,
)

from tests.kubesim.conftest import build_pod
from tests.kubesim.server import KubeSim

V5, V4 = "v5.channel.k8s.io", "v4.channel.k8s.io"
ATTACH = "/api/v1/namespaces/runnerd/pods/p/attach"


class RecordingKubelet:
    """Echoes every message back on channel 1, records what it was handed."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.echo = True

    async def serve_stream(self, conn: Any, pod: dict[str, Any], container: str, **kw: Any) -> None:
        self.calls.append({"pod": pod["metadata"]["name"], "container": container, **kw})
        if not self.echo:
            await trio.sleep_forever()
        while (message := await conn.receive()) is not None:
            await conn.send(b"\x01" + message)
        await conn.close(1000)


@pytest.fixture
async def kubelet(apiserver: KubeSim) -> RecordingKubelet:
    stub = RecordingKubelet()
    apiserver.kubelet = stub
    pod = build_pod("p")
    pod["spec"]["containers"].append({"name": "side", "image": "busybox:1.36"})
    await apiserver.store.create("pods", "runnerd", pod)
    await apiserver.store.update("pods", "runnerd", "p", lambda p: p["spec"].update(nodeName="n"))
    return stub


@asynccontextmanager
async def open_ws(
    sim: KubeSim,
    resource: str,
    *,
    subprotocols: tuple[str, ...] = (V5, V4),
    token: str | None = None,
) -> AsyncIterator[WebSocketConnection]:
    """A real WebSocket over TLS; rejections come out unwrapped as ConnectionRejected."""
    headers = [] if token == "" else [(b"Authorization", f"Bearer {token or sim.token}".encode())]
    stream = await trio.open_ssl_over_tcp_stream(
        "127.0.0.1", sim.port, ssl_context=sim.client_ssl_context()
    )
    try:
        async with stream, trio.open_nursery() as nursery:
            ws = await wrap_client_stream(
                nursery,
                stream,
                "127.0.0.1",
                resource,
                subprotocols=list(subprotocols),
                extra_headers=headers,
            )
            try:
                yield ws
            finally:
                await ws.aclose()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


async def rejection(sim: KubeSim, resource: str, **kw: Any) -> tuple[int, bytes]:
    with pytest.raises(ConnectionRejected) as info:
        async with open_ws(sim, resource, **kw):
            pass
    return info.value.status_code, info.value.body or b""


async def test_checks_run_in_order(apiserver: KubeSim, kubelet: RecordingKubelet) -> None:
    missing = "/api/v1/namespaces/runnerd/pods/ghost/attach?container=x"
    assert (await rejection(apiserver, missing, token=""))[0] == 401
    apiserver.faults.deny("create", "pods/attach")
    code, body = await rejection(apiserver, missing)
    assert code == 403 and b'cannot create resource \\"pods/attach\\"' in body
    assert b'pods \\"ghost\\" is forbidden' in body
    apiserver.faults.allow("create", "pods/attach")
    code, body = await rejection(apiserver, missing)
    assert code == 404 and b'"message":"pods \\"ghost\\" not found"' in body
    code, body = await rejection(apiserver, ATTACH)
    assert (
        code == 400
        and b"a container name must be specified for pod p, choose one of: [app side]" in body
    )
    code, body = await rejection(apiserver, ATTACH + "?container=nope")
    assert code == 400 and b"container nope is not valid for pod p" in body
    await apiserver.store.create("pods", "runnerd", build_pod("pending"))
    pending = "/api/v1/namespaces/runnerd/pods/pending/exec"
    code, body = await rejection(apiserver, pending + "?container=nope")
    assert code == 400 and b"container nope is not valid for pod pending" in body  # before host
    code, body = await rejection(apiserver, pending, subprotocols=("channel.k8s.io",))
    assert code == 400 and b"pod pending does not have a host assigned" in body  # before 403
    code, body = await rejection(
        apiserver, ATTACH + "?container=app", subprotocols=("channel.k8s.io",)
    )
    assert (code, body) == (403, b"")
    assert kubelet.calls == []  # nothing was handed over


async def test_exec_needs_get_as_well_as_create(
    apiserver: KubeSim, kubelet: RecordingKubelet
) -> None:
    apiserver.faults.deny("get", "pods/exec")
    code, body = await rejection(apiserver, "/api/v1/namespaces/runnerd/pods/p/exec?container=app")
    assert code == 403
    assert (
        b'User \\"system:serviceaccount:runnerd:runnerd\\" cannot get resource \\"pods/exec\\"'
        in body
    )


@pytest.mark.parametrize(
    ("offer", "chosen"), [((V5, V4), V5), ((V4, V5), V4), ((V4,), V4), (("x", V5), V5)]
)
async def test_subprotocol_follows_the_clients_order(
    apiserver: KubeSim, kubelet: RecordingKubelet, offer: tuple[str, ...], chosen: str
) -> None:
    async with open_ws(apiserver, ATTACH + "?container=app&stdout=1", subprotocols=offer) as ws:
        assert ws.subprotocol == chosen
        await ws.send_message(b"\x00hi")
        assert await ws.get_message() == b"\x01\x00hi"
    assert kubelet.calls[0]["protocol"] == chosen


async def test_handover_parses_booleans_and_commands(
    apiserver: KubeSim, kubelet: RecordingKubelet
) -> None:
    query = (
        "container=side&stdin=true&stdout=1&stderr=false&tty="
        "&command=sh&command=-c&command=echo%20hi"
    )
    async with open_ws(apiserver, f"/api/v1/namespaces/runnerd/pods/p/exec?{query}") as ws:
        await ws.send_message("\x00text frame")  # kubernetes-client/python sends str frames
        assert await ws.get_message() == b"\x01\x00text frame"
        await ws.send_message(b"")
        assert await ws.get_message() == b"\x01"
    (call,) = kubelet.calls
    assert call == {
        "pod": "p",
        "container": "side",
        "kind": "exec",
        "stdin": True,
        "stdout": True,
        "stderr": False,
        "tty": True,
        "command": ["sh", "-c", "echo hi"],
        "protocol": V5,
    }


async def test_attach_defaults_to_the_only_container_and_no_streams(apiserver: KubeSim) -> None:
    stub = RecordingKubelet()
    apiserver.kubelet = stub
    await apiserver.store.create("pods", "runnerd", build_pod("solo"))
    await apiserver.store.update(
        "pods", "runnerd", "solo", lambda p: p["spec"].update(nodeName="n")
    )
    async with open_ws(apiserver, "/api/v1/namespaces/runnerd/pods/solo/attach?stdin=0"):
        pass
    assert stub.calls[0]["container"] == "app"
    assert not any(stub.calls[0][k] for k in ("stdin", "stdout", "stderr", "tty"))
    assert stub.calls[0]["command"] == []


async def test_token_as_a_subprotocol(apiserver: KubeSim, kubelet: RecordingKubelet) -> None:
    encoded = base64.urlsafe_b64encode(apiserver.token.encode()).decode().rstrip("=")
    offer = (f"base64url.bearer.authorization.k8s.io.{encoded}", V5)
    async with open_ws(apiserver, ATTACH + "?container=app", subprotocols=offer, token="") as ws:
        assert ws.subprotocol == V5


async def test_pings_are_answered_while_the_kubelet_is_busy(
    apiserver: KubeSim, kubelet: RecordingKubelet
) -> None:
    kubelet.echo = False  # never calls receive()
    async with open_ws(apiserver, ATTACH + "?container=app") as ws:
        with trio.fail_after(5):
            await ws.ping(b"are you there")


async def test_drop_attaches_cuts_without_a_close_frame(
    apiserver: KubeSim, kubelet: RecordingKubelet
) -> None:
    async with open_ws(apiserver, ATTACH + "?container=app") as ws:
        await ws.send_message(b"\x00x")
        await ws.get_message()
        assert apiserver.stats.attaches_open == 1
        assert await apiserver.faults.drop_attaches() == 1
        with pytest.raises(ConnectionClosed) as info, trio.fail_after(5):
            await ws.get_message()
        assert info.value.reason.code == 1006  # abnormal closure: no close frame arrived
    with trio.fail_after(5):
        await apiserver.stats.wait_until(lambda s: s.attaches_open == 0)
    assert apiserver.stats.attaches_total == 1


async def test_attaches_are_counted_on_the_stats_endpoint(
    apiserver: KubeSim, kubelet: RecordingKubelet, kube: httpx.AsyncClient
) -> None:
    resource = ATTACH + "?container=app&stdout=1"
    async with (
        open_ws(apiserver, resource, subprotocols=(V5,)),
        open_ws(apiserver, resource, subprotocols=(V4,)),
    ):
        with trio.fail_after(5):  # the server counts just after its 101 went out
            await apiserver.stats.wait_until(lambda s: s.attaches_open == 2)
        attaches = (await kube.get("/_kubesim/stats")).json()["attaches"]
        assert attaches == {"open": 2, "total": 2, "byProtocol": {V4: 1, V5: 1}}
    with trio.fail_after(5):
        await apiserver.stats.wait_until(lambda s: s.attaches_open == 0)
    attaches = (await kube.get("/_kubesim/stats")).json()["attaches"]
    assert (attaches["open"], attaches["total"]) == (0, 2)


async def test_without_a_kubelet_the_stream_reports_an_internal_error(apiserver: KubeSim) -> None:
    await apiserver.store.create("pods", "runnerd", build_pod("p"))
    await apiserver.store.update("pods", "runnerd", "p", lambda p: p["spec"].update(nodeName="n"))
    async with open_ws(apiserver, ATTACH + "?stdout=1") as ws:
        with trio.fail_after(5):
            assert await ws.get_message() == b"\x01"  # upgraded first: the empty frame (§1.4)
            message = await ws.get_message()
            assert message[:1] == b"\x03" and b'"reason":"InternalError"' in message
            assert b'"kind"' not in message  # Go's encoding/json of metav1.Status (§1.7)
            with pytest.raises(ConnectionClosed) as info:
                await ws.get_message()
        assert info.value.reason.code == 1000
