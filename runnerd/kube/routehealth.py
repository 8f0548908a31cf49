"""What a session route's status says: its verdicts, read from the objects the
apiserver returns. Pure.

Owns the routing layer's identity (`Layer`, `GatewayRef`: what
`runnerd.kube.routing.resolve_routing` settled on at start), the verdict of
one HTTPRoute (`httproute_verdict`) or Ingress (`ingress_verdict`), and the
hint a route still pending at `route_ready_timeout_seconds` is reported with
(`timeout_hint`). The states are the contract's `route` event's.

Verdicts (issue 21, as the Telo runner reads them):
- HTTPRoute: `programmed` when some parent in `status.parents` has
  `Accepted=True` and no `ResolvedRefs=False`; `rejected` when a parent has
  `Accepted=False` or `ResolvedRefs=False` (the reason is
  `"<Reason>: <message>"` of that condition; the wire state is
  `unprogrammed`: a rejection is final until the route changes); else
  `pending` (no status yet, `Unknown`, or the route not found yet).
- Ingress: `programmed` once `status.loadBalancer.ingress` has an entry
  (the controller published an address), else `pending`.
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


def httproute_verdict(route: Mapping[str, Any] | None) -> tuple[Verdict, str | None]:
    """The verdict of an HTTPRoute as the apiserver returned it (None: not
    found yet, pending), with the reason of a rejection."""
    status = (route or {}).get("status") or {}
    parents = status.get("parents") if isinstance(status, Mapping) else None
    if not isinstance(parents, list):
        return "pending", None
    programmed = False
    for parent in parents:
        if not isinstance(parent, Mapping):
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
    layer: Layer, timeout_s: float, *, gateway: GatewayRef | None, ingress_class: str | None
) -> str:
    """Why a route may still be pending after `timeout_s`, and where to look:
    what the `unprogrammed` event carries. Client-safe: names only what the
    operator configured."""
    waited = f"not programmed after {timeout_s:g} s"
    if layer is Layer.GATEWAY and gateway is not None:
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
