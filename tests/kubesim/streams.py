"""pods/attach and pods/exec up to the handover: pre-upgrade checks, subprotocol, the 101.

After authentication and RBAC (apiserver.py), in the real apiserver's order:
pod exists (404) → container valid (400) → node assigned (400) → a subprotocol we
speak among the client's offers, walked in the client's order (else 403 with an
empty body, as golang.org/x/net/websocket answers). Then the WebSocket is accepted
with that subprotocol and handed to the kubelet's `serve_stream` through
`wire.WebSocketConn` (send/receive/close). Booleans follow §1.1.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import trio

from tests.kubesim import attach, status
from tests.kubesim.faults import Faults, Stats
from tests.kubesim.store import Store
from tests.kubesim.wire import Exchange, WebSocketConn

Obj = dict[str, Any]
SUPPORTED = ("v5.channel.k8s.io", "v4.channel.k8s.io")
TOKEN_PROTOCOL = "base64url.bearer.authorization.k8s.io."


def token_from_subprotocols(offers: list[str]) -> str | None:
    """The bearer token carried as a subprotocol, if any (k/k websocket/protocol.go)."""
    for offer in offers:
        if offer.startswith(TOKEN_PROTOCOL):
            encoded = offer[len(TOKEN_PROTOCOL) :]
            try:
                return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
            except (binascii.Error, UnicodeDecodeError):
                return None
    return None


def choose_subprotocol(offers: list[str]) -> str | None:
    """First offer (client order) that we speak."""
    return next((p for p in offers if p in SUPPORTED), None)


def pick_container(pod: Obj, requested: str | None) -> str:
    """The container an attach/exec/log names, as k/k's `validateContainer` checks it.

    With several containers and none named: 400 listing every container in
    `VisitContainers` order (init containers first), e.g. `choose one of: [init app
    side]`; a name the pod does not have: 400 `container X is not valid for pod P`.
    """
    name = pod["metadata"]["name"]
    containers = [c["name"] for c in pod["spec"].get("containers", [])]
    every = [c["name"] for c in pod["spec"].get("initContainers") or []] + containers
    if not requested:
        if len(containers) == 1:
            return str(containers[0])
        raise status.bad_request(
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(every)}]"
        )
    if requested not in every:
        raise status.bad_request(f"container {requested} is not valid for pod {name}")
    return requested


async def serve_upgrade(
    ex: Exchange,
    kind: str,
    store: Store,
    faults: Faults,
    stats: Stats,
    ns: str,
    name: str,
    kubelet: Any,
) -> None:
    req = ex.request
    pod = store.get("pods", ns, name)
    if pod is None:
        raise status.not_found("pods", name)
    container = pick_container(pod, req.param("container"))
    if not pod["spec"].get("nodeName"):
        raise status.bad_request(f"pod {name} does not have a host assigned")
    if not req.is_websocket:
        raise status.bad_request("Upgrade request required")
    if req.headers.get("sec-websocket-version") != "13" or not req.headers.get("sec-websocket-key"):
        raise status.bad_request("websocket: Sec-WebSocket-Version 13 and a key are required")
    protocol = choose_subprotocol(req.subprotocols)
    if protocol is None:
        raise status.ApiError(403, b"", content_type="text/plain; charset=utf-8")
    async with ex.open_websocket(protocol) as conn:
        faults.attaches.add(conn)
        stats.attaches_open += 1
        stats.attaches_total += 1
        stats.attaches_by_protocol[protocol] += 1
        stats.note()
        try:
            if faults.attach_lag_s:
                await trio.sleep(faults.attach_lag_s)
            await _hand_over(conn, pod, container, kind, req, kubelet, protocol)
        finally:
            faults.attaches.discard(conn)
            stats.attaches_open -= 1
            stats.note()


async def _hand_over(
    conn: WebSocketConn, pod: Obj, container: str, kind: str, req: Any, kubelet: Any, protocol: str
) -> None:
    options = {
        "kind": kind,
        "stdin": req.flag("stdin"),
        "stdout": req.flag("stdout"),
        "stderr": req.flag("stderr"),
        "tty": req.flag("tty"),
        "command": req.query.get("command", []) if kind == "exec" else [],
        "protocol": protocol,
    }
    if kubelet is not None:
        await kubelet.serve_stream(conn, pod, container, **options)
        return
    await _serve_without_kubelet(conn, options)


async def _serve_without_kubelet(conn: WebSocketConn, options: dict[str, Any]) -> None:
    """No kubelet in this sim: answer as the v5 translator does when it cannot reach one.

    The translator upgrades and sends its one empty frame (§1.4) before dialling the
    kubelet, so the failure arrives after that frame, as a channel-3 Status (§1.8).
    """
    cause = "unable to upgrade connection: no kubelet is running in this kubesim"
    wanted = attach.Streams(
        options["stdin"], options["stdout"], options["stderr"], options["tty"], options["protocol"]
    )
    await attach.send_failure(conn, wanted, cause)
