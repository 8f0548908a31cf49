"""One session's public routes: its Service and its Ingress or HTTPRoutes,
published (and republished) for a port set, and their health followed.

Owns `SessionRoutes` (what `Routing.session_routes` yields; `publish` once
the pod exists and again on every port change) and `RouteReport` (where
route health goes); each object goes through `ensure.ensure_object`.

Publishing, per port set (`publish`):
- the Service carries every published port (`endpoints.build_service`); with
  none left it is deleted, and every route with it;
- Ingress routing: the one Ingress has a rule per tcp port; with no tcp port
  left it is deleted;
- Gateway routing: one HTTPRoute per tcp port; the session's HTTPRoutes of
  ports no longer in the set are deleted (those this object published, or,
  when it cannot know, those listed by the session's labels);
- the other layer's objects of the session (what a process configured with
  the other layer published before a restart: the Ingress, or the
  HTTPRoutes listed by labels in v1 and v1beta1) are deleted on the first
  publish of an adopted pod (never for a fresh one).
Every object is owned by the pod (collected with it), and created or
brought up to date by `ensure.ensure_object` (a Service re-read and
replaced on a 409, keeping its clusterIP).

Route health (`_follow_health`, a task of the context's own nursery): every
routed host is reported `pending` at once, then its object is read every
ROUTE_POLL_S until each host has a verdict (`routehealth`): `programmed`, or
`unprogrammed` with the rejection's reason, or, at
`route_ready_timeout_seconds`, `unprogrammed` with the layer's hint. A new
`publish` cancels the previous follow and starts over. It never fails the
session: a failed read counts as still pending.

Error handling: a failure to publish is never a failed session. It is one
classified line through `report.notice` (the operation, the HTTP status, the
Status reason; never the apiserver's message, which names the runner's
service account), the detail goes to the log, and the ports come back
`rejected` with the unpublished endpoints (`host: ""`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol
from urllib.parse import quote

import trio

import runnerd.kube.errors as errors
from runnerd.backend import SessionIdentity
from runnerd.backend.watch import Published
from runnerd.contract import PortMapping, RouteState
from runnerd.kube import endpoints as shapes
from runnerd.kube.client import KubeClient, Retry
from runnerd.kube.ensure import ensure_object
from runnerd.kube.podspec import pod_name
from runnerd.kube.routehealth import (
    GATEWAY_GROUP,
    GatewayRef,
    Layer,
    Verdict,
    httproute_verdict,
    ingress_verdict,
    timeout_hint,
)
from runnerd.kube.settings import KubeSettings

log = logging.getLogger(__name__)

# How often a pending route's object is read: the Telo runner's period; a
# controller programs a route in about a second, so a user waits at most two
# more, at one GET per route per period.
ROUTE_POLL_S = 2.0
SERVICE_OPERATION = "could not create the session's Service"
INGRESS_OPERATION = "could not create the session's Ingress"
HTTPROUTE_OPERATION = "could not create the session's HTTPRoute"


class RouteReport(Protocol):
    """Where a session's routes report: `route` events and a notice line.
    Both synchronous, never blocking, never raising (a `Sink`'s `route`, a
    `ProgressReport`'s, plus a terminal or progress line for `notice`)."""

    def route(self, host: str, port: int, state: RouteState, reason: str | None = None) -> None: ...

    def notice(self, text: str) -> None: ...


@dataclass(frozen=True)
class RouteTarget:
    """What the session's routes are made with: the layer resolved at start."""

    client: KubeClient
    settings: KubeSettings
    layer: Layer
    gateway: GatewayRef | None


class _Failed(Exception):
    """A publish step failed: the classified error and the ports it costs."""

    def __init__(self, error: errors.KubeError, ports: tuple[int, ...]) -> None:
        super().__init__(str(error))
        self.error = error
        self.ports = ports


class SessionRoutes:
    """A session's routes while its pod lives (module docstring). Made by
    `open_session_routes`; `publish` from the context's task only."""

    def __init__(
        self,
        target: RouteTarget,
        identity: SessionIdentity,
        pod: Mapping[str, Any],
        report: RouteReport,
        nursery: trio.Nursery,
        *,
        fresh: bool = False,
    ) -> None:
        self._t = target
        # The ports whose HTTPRoutes exist, as far as this object knows; None:
        # unknown (an adopted pod, a failed publish): listed before deleting.
        self._known: frozenset[int] | None = frozenset() if fresh else None
        # Whether any object of the session may exist: not for a fresh pod
        # before its first publish (a port-less run session costs no request).
        self._may_exist = not fresh
        # Whether the other layer's objects are known gone: a fresh pod has none.
        self._other_layer_cleared = fresh
        self._identity = identity
        self._pod = pod
        self._report = report
        self._nursery = nursery
        self._health = trio.CancelScope()
        ns = quote(target.client.namespace, safe="")
        self._services = f"/api/v1/namespaces/{ns}/services"
        self._ingresses = f"/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses"
        version = target.gateway.version if target.gateway else "v1"
        self._httproutes = f"/apis/gateway.networking.k8s.io/{version}/namespaces/{ns}/httproutes"

    @property
    def routed(self) -> bool:
        """Whether anything is published at all (a layer and a base domain)."""
        return self._t.layer is not Layer.NONE and self._t.settings.routing_base_domain is not None

    async def publish(self, ports: tuple[PortMapping, ...]) -> Published:
        """Publish `ports` (module docstring): the endpoints to announce, and
        the ports that could not be published with why. Never raises a
        `KubeError`. Cancellation: what was written stays, owned by the pod."""
        identity = replace(self._identity, ports=ports)
        self._health.cancel()
        if not self.routed:
            return Published(shapes.announced(self._t.settings, identity, published=False))
        try:
            await self._apply(identity)
        except _Failed as failed:
            exc = failed.error
            ids = {"session_id": identity.session_id}
            log.warning("endpoints not published: %r", exc.__cause__ or exc, extra=ids)
            self._report.notice(f"the session's ports are not published: {exc}")
            endpoints = shapes.announced(self._t.settings, identity, published=False)
            return Published(endpoints, tuple((port, str(exc)) for port in failed.ports))
        self._follow(identity)
        return Published(shapes.announced(self._t.settings, identity, published=True))

    async def _apply(self, identity: SessionIdentity) -> None:
        """Write the Service and the routes for `identity.ports`. Raises `_Failed`."""
        t, pod = self._t, self._pod
        everything = tuple(p.port for p in shapes.published_ports(identity))
        tcp = shapes.routed_ports(identity)
        service = shapes.build_service(t.settings, identity, pod)
        if service is None and not self._may_exist:
            return  # nothing to publish, nothing to remove
        self._may_exist = True  # until this publish has landed
        try:
            if service is None:
                await self._delete(f"{self._services}/{pod_name(identity.session_id)}")
            else:
                await ensure_object(t.client, self._services, service, SERVICE_OPERATION)
        except errors.KubeError as exc:
            raise _Failed(exc, everything) from exc
        try:
            if t.layer is Layer.INGRESS:
                await self._apply_ingress(identity)
            elif t.gateway is not None:
                await self._apply_httproutes(identity, t.gateway, tcp)
        except errors.KubeError as exc:
            raise _Failed(exc, tcp) from exc
        if not self._other_layer_cleared:
            await self._clear_other_layer(identity.session_id)
        self._may_exist = service is not None

    async def _clear_other_layer(self, session_id: str) -> None:
        """Delete what a process routing with the other layer published for
        the session (the layer switched across a restart): its Ingress, or
        its HTTPRoutes (listed by labels; none when the API is not served).
        A failure costs no port (this layer routes them): one notice line."""
        try:
            if self._t.layer is Layer.INGRESS:
                for collection in _httproute_collections(self._t.client.namespace):
                    if await self._delete_listed(collection, session_id):
                        break  # one served version lists them all
            else:
                await self._delete(f"{self._ingresses}/{pod_name(session_id)}")
        except errors.KubeError as exc:
            log.warning("old routes not removed: %r", exc, extra={"session_id": session_id})
            self._report.notice(f"the session's routes of the other layer stay: {exc}")
        self._other_layer_cleared = True

    async def _delete_listed(self, collection: str, session_id: str) -> bool:
        """Delete the session's objects `collection` lists; False: not served."""
        try:
            names = await self._session_names(collection, session_id)
        except errors.NotFound:
            return False  # this version of the Gateway API is not served
        for name in names:
            await self._delete(f"{collection}/{quote(name, safe='')}")
        return True

    async def _apply_ingress(self, identity: SessionIdentity) -> None:
        ingress = shapes.build_ingress(self._t.settings, identity, self._pod)
        if ingress is None:
            await self._delete(f"{self._ingresses}/{pod_name(identity.session_id)}")
        else:
            await ensure_object(self._t.client, self._ingresses, ingress, INGRESS_OPERATION)

    async def _apply_httproutes(
        self, identity: SessionIdentity, gateway: GatewayRef, tcp: tuple[int, ...]
    ) -> None:
        client, settings = self._t.client, self._t.settings
        known, self._known = self._known, None  # unknown until every write landed
        for port in tcp:
            route = shapes.build_httproute(settings, gateway, identity, port, self._pod)
            await ensure_object(client, self._httproutes, route, HTTPROUTE_OPERATION)
        stale = await self._routed_ports(identity.session_id) if known is None else known
        for port in sorted(stale - set(tcp)):  # ports that left the set
            await self._delete(
                f"{self._httproutes}/{shapes.httproute_name(identity.session_id, port)}"
            )
        self._known = frozenset(tcp)

    async def _routed_ports(self, session_id: str) -> frozenset[int]:
        """The ports the session's HTTPRoutes in the cluster route (listed by
        its labels): what an adopted pod, or a failed publish, left."""
        prefix = shapes.httproute_name(session_id, 0)[:-1]
        names = await self._session_names(self._httproutes, session_id)
        return frozenset(
            int(name[len(prefix) :])
            for name in names
            if name.startswith(prefix) and name[len(prefix) :].isdigit()
        )

    async def _session_names(self, collection: str, session_id: str) -> list[str]:
        """The names of the session's objects in `collection` (by its labels)."""
        labels = shapes.session_labels(self._t.settings, session_id)
        listing = await self._t.client.request(
            "GET",
            collection,
            operation="could not list the session's HTTPRoutes",
            retry=Retry.READ,
            params={"labelSelector": ",".join(f"{k}={v}" for k, v in labels.items())},
        )
        items = listing.get("items") or []
        names = [(item.get("metadata") or {}).get("name") for item in items]
        return [name for name in names if isinstance(name, str)]

    async def _delete(self, path: str) -> None:
        try:
            await self._t.client.request(
                "DELETE",
                path,
                operation="could not delete a stale route of the session",
                retry=Retry.IDEMPOTENT,
            )
        except errors.NotFound:
            pass  # already gone: what was asked

    # -- health -------------------------------------------------------------

    def _follow(self, identity: SessionIdentity) -> None:
        """Report every routed host `pending` now; follow them in a new task."""
        domain = self._t.settings.routing_base_domain
        assert domain is not None
        hosts = {
            port: shapes.endpoint_host(port, identity.session_id, domain)
            for port in shapes.routed_ports(identity)
        }
        for port, host in hosts.items():
            self._report.route(host, port, "pending")
        self._health = trio.CancelScope()
        if hosts:
            self._nursery.start_soon(self._follow_health, identity.session_id, hosts, self._health)

    async def _follow_health(
        self, session_id: str, hosts: dict[int, str], scope: trio.CancelScope
    ) -> None:
        """Poll until every host has a verdict, or the ready timeout (module docstring)."""
        t = self._t
        waiting = dict(hosts)
        with scope:
            with trio.move_on_after(t.settings.route_ready_timeout_s):
                while waiting:
                    await trio.sleep(ROUTE_POLL_S)
                    for port, (verdict, reason) in (
                        await self._verdicts(session_id, waiting)
                    ).items():
                        if verdict != "pending":
                            state: RouteState = (
                                "programmed" if verdict == "programmed" else "unprogrammed"
                            )
                            self._report.route(waiting.pop(port), port, state, reason)
            hint = timeout_hint(
                t.layer,
                t.settings.route_ready_timeout_s,
                gateway=t.gateway,
                ingress_class=t.settings.ingress_class,
                gateway_missing=waiting != {} and await self._gateway_missing(),
            )
            for port, host in waiting.items():
                self._report.route(host, port, "unprogrammed", hint)

    async def _verdicts(
        self, session_id: str, waiting: Mapping[int, str]
    ) -> dict[int, tuple[Verdict, str | None]]:
        """Each waiting port's verdict now; a failed read is `pending`."""
        if self._t.layer is Layer.INGRESS:
            ingress = await self._read(f"{self._ingresses}/{pod_name(session_id)}")
            verdict = ingress_verdict(ingress)
            return dict.fromkeys(waiting, verdict)
        out: dict[int, tuple[Verdict, str | None]] = {}
        gateway = self._t.gateway
        assert gateway is not None  # Gateway routing: the only other routed layer
        for port in waiting:
            route = await self._read(
                f"{self._httproutes}/{shapes.httproute_name(session_id, port)}"
            )
            out[port] = httproute_verdict(route, gateway)
        return out

    async def _gateway_missing(self) -> bool:
        """Whether the Gateway reads back 404 (any other answer: not known missing)."""
        gateway = self._t.gateway
        if gateway is None:
            return False
        ns, name = quote(gateway.namespace, safe=""), quote(gateway.name, safe="")
        path = f"/apis/{GATEWAY_GROUP}/{gateway.version}/namespaces/{ns}/gateways/{name}"
        try:
            await self._t.client.request(
                "GET", path, operation="could not read the Gateway", retry=Retry.READ
            )
        except errors.NotFound:
            return True
        except errors.KubeError:
            return False
        return False

    async def _read(self, path: str) -> dict[str, Any] | None:
        try:
            return await self._t.client.request(
                "GET", path, operation="could not read a session route", retry=Retry.READ
            )
        except errors.KubeError as exc:  # a 404 included: not programmed yet
            log.debug("route read failed: %r", exc)
            return None


def _httproute_collections(namespace: str) -> tuple[str, ...]:
    ns = quote(namespace, safe="")
    return tuple(
        f"/apis/{GATEWAY_GROUP}/{version}/namespaces/{ns}/httproutes"
        for version in ("v1", "v1beta1")
    )


@asynccontextmanager
async def open_session_routes(
    target: RouteTarget,
    identity: SessionIdentity,
    pod: Mapping[str, Any],
    report: RouteReport,
    *,
    fresh: bool = False,
) -> AsyncIterator[SessionRoutes]:
    """A session's routes for the block's duration: health followed in the
    block's own nursery, cancelled when it ends (the objects stay, owned by
    the pod). `fresh`: `pod` was just created, so no route of it exists yet
    (the first publish lists none to delete).

    Error handling: the health task never raises, so what the block raises
    comes out as it was raised, not in an ExceptionGroup (the nursery's
    wrapping undone: no group crosses this line)."""
    try:
        async with trio.open_nursery() as nursery:
            yield SessionRoutes(target, identity, pod, report, nursery, fresh=fresh)
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1 and not isinstance(group.exceptions[0], BaseExceptionGroup):
            raise group.exceptions[0] from None
        raise
