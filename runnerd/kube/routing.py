"""Which layer routes sessions' ports, resolved once at start, and the
per-session routes made with it.

Owns `Routing` (held by `KubeBackend` as `backend.routing`),
`resolve_routing` (the one look at the cluster that decides it:
discovery of `gateway.networking.k8s.io` and the IngressClass list) and
`decide_routing` (the rules, pure). Per session,
`routing.session_routes(identity, pod, report)` is the context in which
`routes.publish(ports)` publishes (`runnerd.kube.routes`).

The rules (issue 21, as the Telo runner resolves them):
- no `routing_base_domain`, or `routing = "none"`: nothing is routed;
- `"ingress"`: Ingress routing, as configured;
- `"gateway"`: Gateway routing; needs `gateway_name` (a config error
  without it) and a served Gateway API (v1 preferred, else v1beta1);
- `"auto"`: a named Gateway → Gateway (the Gateway API must be served); a
  configured or default IngressClass → Ingress; both → refused; the Gateway
  API served but no Gateway named and no IngressClass → refused; exactly
  one IngressClass, not the default → Ingress with `ingressClassName` set
  to it; several, none the default → refused (set `ingress_class`); no
  IngressClass and no Gateway API → refused. A
  class listing that fails is refused naming what is missing (the
  `list ingressclasses` permission on a 403).
A refusal is a `ConfigError` naming the key to set (the daemon exits 2 with
it). A cluster that did not decide is one too, naming what to check: no
answer within RESOLVE_DEADLINE_S (the client retrying meanwhile), or a
5xx/429 it gave up on, names `kubernetes.kubeconfig` (the apiserver), as
does a 401 (its credentials); a 403 on discovery names the permission.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import trio

import runnerd.kube.errors as errors
from runnerd.backend import SessionIdentity
from runnerd.config import ConfigError
from runnerd.kube.client import KubeClient, Retry
from runnerd.kube.routehealth import GATEWAY_GROUP, GatewayRef, Layer
from runnerd.kube.routes import RouteReport, RouteTarget, SessionRoutes, open_session_routes
from runnerd.kube.settings import KubeSettings

log = logging.getLogger(__name__)

DEFAULT_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"
# Versions of the Gateway API runnerd writes, preferred first.
GATEWAY_VERSIONS = ("v1", "v1beta1")
# The start waits this long at most for the two reads (the client's own
# retries included): a cluster that cannot answer them in this time is
# reported, not waited on forever.
RESOLVE_DEADLINE_S = 30.0


@dataclass(frozen=True)
class ClusterRouting:
    """What `resolve_routing` read from the cluster."""

    gateway_version: str | None  # the served Gateway API version runnerd uses; None: not served
    ingress_classes: tuple[str, ...] | None  # None: not listed (not needed)
    default_class: str | None = None


@dataclass(frozen=True)
class Routing:
    """The routing layer of this daemon's life (`runnerd.kube.routes`)."""

    target: RouteTarget
    default_class: str | None = None  # the cluster's default IngressClass, when read

    @property
    def layer(self) -> Layer:
        return self.target.layer

    def describe(self) -> str:
        """One line for the start log."""
        t = self.target
        if t.layer is Layer.NONE:
            return "no public routes"
        if t.gateway is not None:
            return f"HTTPRoutes ({t.gateway.api_version}) on {t.gateway.describe()}"
        if t.settings.ingress_class is not None:
            return f"Ingresses (IngressClass {t.settings.ingress_class})"
        if self.default_class is not None:
            return f"Ingresses (the default IngressClass, {self.default_class})"
        return "Ingresses (no ingressClassName: the cluster's default IngressClass, if any)"

    def session_routes(
        self,
        identity: SessionIdentity,
        pod: Mapping[str, Any],
        report: RouteReport,
        *,
        fresh: bool = False,
    ) -> contextlib.AbstractAsyncContextManager[SessionRoutes]:
        """The session's routes while the block runs (`routes.open_session_routes`),
        owned by `pod` (as the apiserver returned it: its name and uid);
        `fresh`: the pod was just created (no stale route to look for)."""
        return open_session_routes(self.target, identity, pod, report, fresh=fresh)


def needs_cluster(settings: KubeSettings) -> tuple[bool, bool]:
    """(Gateway API discovery, IngressClass listing): what `decide_routing`
    needs read for `settings`."""
    if settings.routing_base_domain is None or settings.routing in ("none", "ingress"):
        return False, False
    if settings.routing == "gateway":
        return True, False
    if settings.ingress_class is not None:  # Ingress, or refused for naming both
        return False, False
    return True, True


def decide_routing(
    settings: KubeSettings, namespace: str, cluster: ClusterRouting
) -> tuple[Layer, GatewayRef | None]:
    """The rules of the module docstring. Pure.

    Raises:
        ConfigError: a refusal, naming the key to set.
    """
    if settings.routing_base_domain is None or settings.routing == "none":
        return Layer.NONE, None
    if settings.routing == "ingress":
        return Layer.INGRESS, None
    gateway = _gateway(settings, namespace, cluster.gateway_version)
    if settings.routing == "gateway":
        if gateway is None:
            raise _no_gateway_api("kubernetes.routing")
        return Layer.GATEWAY, gateway
    configured = settings.ingress_class or cluster.default_class
    if settings.gateway_name is not None:
        if configured is not None:
            raise ConfigError(
                "kubernetes.routing",
                f'is "auto" and both layers are usable (Gateway {settings.gateway_name} and'
                f' IngressClass {configured}): set routing = "gateway" or "ingress"',
            )
        if gateway is None:
            raise _no_gateway_api("kubernetes.gateway_name")
        return Layer.GATEWAY, gateway
    if configured is not None or cluster.ingress_classes:
        if configured is None and len(cluster.ingress_classes or ()) > 1:
            raise ConfigError(
                "kubernetes.ingress_class",
                'must be set: routing is "auto" and the cluster has several IngressClasses'
                f" ({', '.join(cluster.ingress_classes or ())}), none of them the default",
            )
        return Layer.INGRESS, None
    if gateway is not None or cluster.gateway_version is not None:
        raise ConfigError(
            "kubernetes.gateway_name",
            'must be set: routing is "auto", the cluster serves the Gateway API and has no'
            ' IngressClass, and no Gateway is named (or set routing = "ingress")',
        )
    raise ConfigError(
        "kubernetes.routing",
        'is "auto" but the cluster has no IngressClass and serves no Gateway API: install'
        ' an ingress controller or the Gateway API, or set routing = "none"',
    )


def _gateway(settings: KubeSettings, namespace: str, version: str | None) -> GatewayRef | None:
    if version is None or settings.gateway_name is None:
        return None
    return GatewayRef(
        settings.gateway_name,
        settings.gateway_namespace or namespace,
        settings.gateway_section,
        version,
    )


def _no_gateway_api(key: str) -> ConfigError:
    return ConfigError(
        key,
        f"needs the Gateway API, but the cluster serves no {GATEWAY_GROUP}"
        f' {" or ".join(GATEWAY_VERSIONS)}: install its CRDs, or set routing = "ingress"',
    )


def pick_gateway_version(group: Mapping[str, Any]) -> str | None:
    """The version runnerd uses of an APIGroup document: v1 when served, else v1beta1."""
    served = {v.get("version") for v in group.get("versions") or [] if isinstance(v, Mapping)}
    return next((v for v in GATEWAY_VERSIONS if v in served), None)


def pick_classes(listing: Mapping[str, Any]) -> tuple[tuple[str, ...], str | None]:
    """The IngressClass names of a list, and the default one (annotated; of
    several, the newest, then the first by name: the one the
    DefaultIngressClass admission plugin gives a class-less Ingress)."""
    names: list[str] = []
    defaults: list[tuple[str, str]] = []
    for item in listing.get("items") or []:
        meta = item.get("metadata") or {} if isinstance(item, Mapping) else {}
        name = meta.get("name")
        if not isinstance(name, str):
            continue
        names.append(name)
        if (meta.get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true":
            defaults.append((str(meta.get("creationTimestamp") or ""), name))
    newest = max((created for created, _ in defaults), default=None)
    default = min((name for created, name in defaults if created == newest), default=None)
    return tuple(names), default


async def resolve_routing(client: KubeClient, settings: KubeSettings) -> Routing:
    """Read what the rules need from the cluster, once, and decide. Only
    `auto` without `ingress_class`, and `gateway`, ask the apiserver; the
    start (and `/v1/health`) waits for that, RESOLVE_DEADLINE_S at most,
    the client retrying what did not answer.

    Raises:
        ConfigError: a refusal (module docstring); the credentials refused
            (401) or the apiserver not answered in time, naming
            `kubernetes.kubeconfig`; a 403 naming the permission missing.
    """
    discover, list_classes = needs_cluster(settings)
    version: str | None = None
    classes: Sequence[str] | None = None
    default: str | None = None
    if discover or list_classes:
        log.info(
            "routing = %r: asking the apiserver which layer to use (up to %g s, before"
            " /v1/health answers)",
            settings.routing,
            RESOLVE_DEADLINE_S,
        )
    with trio.move_on_after(RESOLVE_DEADLINE_S) as waited:
        try:
            if discover:
                version = await _discover_gateway_api(client)
            if list_classes:
                classes, default = await _list_classes(client)
        except errors.NoCredentials:
            raise  # the provider names kubernetes.kubeconfig
        except errors.KubeError as exc:
            raise _unresolved(exc) from exc
    if waited.cancelled_caught:
        raise _unresolved(None)
    cluster = ClusterRouting(version, tuple(classes) if classes is not None else None, default)
    layer, gateway = decide_routing(settings, client.namespace, cluster)
    if layer is Layer.INGRESS and settings.ingress_class is None and default is None and classes:
        # `auto` on the one class there is, none the default: name it, or
        # no controller would take a class-less Ingress.
        settings = replace(settings, ingress_class=classes[0])
    return Routing(RouteTarget(client, settings, layer, gateway), default)


# What starts without asking the apiserver: the advice of an unanswered one.
_WITHOUT_ASKING = (
    'routing = "ingress" (or "auto" with ingress_class set) and "none" start without'
    ' asking it; "gateway" asks it too (Gateway API discovery)'
)


def _unresolved(exc: errors.KubeError | None) -> ConfigError:
    """The error of a resolution the cluster did not decide: `exc` what the
    client gave up with (None: RESOLVE_DEADLINE_S passed). Not a refusal of
    the rules: the key named is the one to check."""
    if isinstance(exc, errors.Unauthorized):
        return ConfigError(
            "kubernetes.kubeconfig",
            f"its credentials were refused while resolving the routing layer ({exc}): check"
            " the token or client certificate of its context",
        )
    if isinstance(exc, errors.Forbidden):
        return ConfigError(
            "kubernetes.routing",
            f"could not be resolved ({exc}): the runner needs get on the non-resource URLs"
            " /apis and /apis/* (API discovery; the system:discovery ClusterRole grants it"
            ' to every authenticated user by default), or set routing = "ingress" or "none"',
        )
    why = str(exc) if exc is not None else f"no answer in {RESOLVE_DEADLINE_S:g} s"
    return ConfigError(
        "kubernetes.kubeconfig",
        f"the apiserver it names could not be asked which routing layer to use ({why};"
        f" asked once at start): check that it is reachable; {_WITHOUT_ASKING}",
    )


async def _discover_gateway_api(client: KubeClient) -> str | None:
    try:
        group = await client.request(
            "GET",
            f"/apis/{GATEWAY_GROUP}",
            operation="could not discover the Gateway API",
            retry=Retry.READ,
        )
    except errors.NotFound:
        return None
    return pick_gateway_version(group)


async def _list_classes(client: KubeClient) -> tuple[tuple[str, ...], str | None]:
    try:
        listing = await client.request(
            "GET",
            "/apis/networking.k8s.io/v1/ingressclasses",
            operation="could not list IngressClasses",
            retry=Retry.READ,
        )
    except errors.Forbidden as exc:
        raise ConfigError(
            "kubernetes.routing",
            'is "auto" but the runner may not list IngressClasses: grant its service account'
            ' list on ingressclasses (networking.k8s.io), or set routing = "ingress" or'
            ' "gateway"',
        ) from exc
    return pick_classes(listing)
