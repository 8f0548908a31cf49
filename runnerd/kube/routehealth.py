"""What a session route's status says: its verdicts, read from the objects the
apiserver returns. Pure.

Owns the routing layer's identity (`Layer`, `GatewayRef`: what
`runnerd.kube.routing.resolve_routing` settled on at start), the verdict of
one HTTPRoute (`httproute_verdict`) or Ingress (`ingress_verdict`), and the
hint a route still pending at `route_ready_timeout_seconds` is reported with
(`timeout_hint`: with Gateway routing, whether the Gateway exists, read
then: RBAC `get` on gateways). The states are the contract's `route` event's.

Verdicts (issue 21, as the Telo runner reads them):
- HTTPRoute: only a `status.parents` entry about the route as it is now
  counts: its `parentRef` names the Gateway runnerd attaches to (group and
  kind Gateway, name, namespace (default: the route's), sectionName), and
  every condition carrying `observedGeneration` observed the route's
  current `metadata.generation` (status a controller wrote for an older
  parentRef or an older spec says nothing about this one). Of those:
  `programmed` when one has `Accepted=True` and no `ResolvedRefs=False`;
  `rejected` when one has `Accepted=False` or `ResolvedRefs=False` (the
  reason is `"<Reason>: <message>"` of that condition; the wire state is
  `unprogrammed`: a rejection is final until the route changes); else
  `pending` (no status yet, `Unknown`, a stale entry, or not found yet).
- Ingress: `programmed` once `status.loadBalancer.ingress` has an entry
  (the controller published an address), else `pending`. An Ingress status
  carries no generation, so an address written before runnerd changed the
  Ingress's hosts cannot be told from one written after: it is taken as is
  (a controller publishes its one load-balancer address for every Ingress
  of its class, so it stays right across a host change).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

GATEWAY_GROUP = "gateway.networking.k8s.io"

Verdict = Literal["pending", "programmed", "rejected"]


class Layer(enum.Enum):
    """Which layer routes a session's tcp ports from outside the cluster."""

    NONE = "none"
    INGRESS = "ingress"
    GATEWAY = "gateway"


@dataclass(frozen=True)
class GatewayRef:
    """The Gateway HTTPRoutes attach to, and the Gateway API version served
    (`v1`, else `v1beta1`)."""

    name: str
    namespace: str
    section: str | None
    version: str

    @property
    def api_version(self) -> str:
        return f"{GATEWAY_GROUP}/{self.version}"

    def describe(self) -> str:
        listener = f" listener {self.section}" if self.section else ""
        return f"Gateway {self.namespace}/{self.name}{listener}"


def _conditions(parent: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    conditions = parent.get("conditions")
    if not isinstance(conditions, list):
        return {}
    return {str(c.get("type")): c for c in conditions if isinstance(c, Mapping) and c.get("type")}


def _current(parent: Mapping[str, Any], route: Mapping[str, Any], gateway: GatewayRef) -> bool:
    """Whether a `status.parents` entry is about `gateway` and the route's
    current generation (module docstring)."""
    ref = parent.get("parentRef")
    if not isinstance(ref, Mapping):
        return False
    meta = route.get("metadata") or {}
    wanted = {
        "group": (GATEWAY_GROUP, GATEWAY_GROUP),
        "kind": ("Gateway", "Gateway"),
        "name": (None, gateway.name),
        "namespace": (meta.get("namespace"), gateway.namespace),
        "sectionName": (None, gateway.section),
    }
    if any(ref.get(key, default) != want for key, (default, want) in wanted.items()):
        return False
    generation = meta.get("generation")
    return all(
        c.get("observedGeneration") in (None, generation)
        for c in parent.get("conditions") or []
        if isinstance(c, Mapping)
    )


def httproute_verdict(
    route: Mapping[str, Any] | None, gateway: GatewayRef
) -> tuple[Verdict, str | None]:
    """The verdict of an HTTPRoute as the apiserver returned it (None: not
    found yet, pending) attached to `gateway`, with the reason of a rejection."""
    route = route or {}
    status = route.get("status") or {}
    parents = status.get("parents") if isinstance(status, Mapping) else None
    if not isinstance(parents, list):
        return "pending", None
    programmed = False
    for parent in parents:
        if not isinstance(parent, Mapping) or not _current(parent, route, gateway):
            continue
        conditions = _conditions(parent)
        for kind in ("Accepted", "ResolvedRefs"):
            condition = conditions.get(kind)
            if condition is not None and condition.get("status") == "False":
                reason = str(condition.get("reason") or kind)
                message = str(condition.get("message") or "").strip()
                return "rejected", f"{reason}: {message}" if message else reason
        accepted = conditions.get("Accepted", {}).get("status") == "True"
        programmed = programmed or accepted
    return ("programmed", None) if programmed else ("pending", None)


def ingress_verdict(ingress: Mapping[str, Any] | None) -> tuple[Verdict, str | None]:
    """The verdict of an Ingress: programmed once its load balancer status
    names an address (an IP or a hostname)."""
    status = (ingress or {}).get("status") or {}
    balancer = status.get("loadBalancer") if isinstance(status, Mapping) else None
    entries = balancer.get("ingress") if isinstance(balancer, Mapping) else None
    if isinstance(entries, list) and any(
        isinstance(e, Mapping) and (e.get("ip") or e.get("hostname")) for e in entries
    ):
        return "programmed", None
    return "pending", None


def timeout_hint(
    layer: Layer,
    timeout_s: float,
    *,
    gateway: GatewayRef | None,
    ingress_class: str | None,
    gateway_missing: bool = False,
) -> str:
    """Why a route may still be pending after `timeout_s`, and where to look:
    what the `unprogrammed` event carries (`gateway_missing`: the Gateway
    read back 404). Client-safe: names only what the operator configured."""
    waited = f"not programmed after {timeout_s:g} s"
    if layer is Layer.GATEWAY and gateway is not None:
        if gateway_missing:
            return (
                f"{waited}: Gateway {gateway.namespace}/{gateway.name} does not exist"
                " (kubernetes.gateway_name, gateway_namespace)"
            )
        return (
            f"{waited}: no parent accepted the HTTPRoute; check that {gateway.describe()}"
            " exists, its controller is running, and it allows routes from the session"
            " namespace"
        )
    cls = f"IngressClass {ingress_class}" if ingress_class else "the default IngressClass"
    return (
        f"{waited}: the Ingress has no load balancer address; check that the ingress"
        f" controller of {cls} is running"
    )
