"""Gateway API (`gateway.networking.k8s.io`) and IngressClass objects: create-time
validation and defaulting, as the Gateway API's CRD schemas and k/k's
networking validation word them. Pure.

Served by the apiserver as any kind (`discovery.KINDS`): Gateways and HTTPRoutes
namespaced, with a `status` subresource (a controller, or a test standing in
for one, writes `status.parents` / `status.conditions` there: `kubectl patch
--subresource=status`); IngressClasses cluster-scoped, the default one marked
by `ingressclass.kubernetes.io/is-default-class: "true"`. HTTPRoutes are
garbage-collected with their owner, as services and ingresses are.
"""

from __future__ import annotations

from typing import Any

from tests.kubesim import validation as v

Obj = dict[str, Any]
GROUP = "gateway.networking.k8s.io"
# Served in the order the real CRDs list them: v1 is the storage and preferred
# version; v1beta1 is still served (an older controller's clients ask for it).
VERSIONS = ("v1", "v1beta1")
DEFAULT_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"


def validate_httproute(route: Obj) -> list[v.FieldError]:
    """The CRD schema's checks that matter to a client: a name, parentRefs
    each naming a Gateway, backendRefs each with a name and a port."""
    errors = v.validate_metadata(route.get("metadata") or {})
    spec = route.get("spec") or {}
    for i, ref in enumerate(spec.get("parentRefs") or []):
        if not isinstance(ref, dict) or not ref.get("name"):
            errors.append(v.required(f"spec.parentRefs[{i}].name"))
    for i, rule in enumerate(spec.get("rules") or []):
        for j, backend in enumerate((rule or {}).get("backendRefs") or []):
            path = f"spec.rules[{i}].backendRefs[{j}]"
            if not isinstance(backend, dict) or not backend.get("name"):
                errors.append(v.required(f"{path}.name"))
            elif backend.get("kind", "Service") == "Service" and not backend.get("port"):
                errors.append(v.required(f"{path}.port", "port is required when kind is Service"))
    return errors


def default_httproute(route: Obj) -> Obj:
    route.setdefault("apiVersion", f"{GROUP}/v1")
    route["kind"] = "HTTPRoute"
    spec = route.setdefault("spec", {})
    for ref in spec.get("parentRefs") or []:
        ref.setdefault("group", GROUP)
        ref.setdefault("kind", "Gateway")
    for rule in spec.setdefault("rules", [{}]) or []:
        rule.setdefault("matches", [{"path": {"type": "PathPrefix", "value": "/"}}])
        for backend in rule.get("backendRefs") or []:
            backend.setdefault("group", "")
            backend.setdefault("kind", "Service")
            backend.setdefault("weight", 1)
    route.setdefault("status", {"parents": []})
    return v.build_ordered(route, "HTTPRoute", route["apiVersion"])


def validate_gateway(gw: Obj) -> list[v.FieldError]:
    errors = v.validate_metadata(gw.get("metadata") or {})
    spec = gw.get("spec") or {}
    if not spec.get("gatewayClassName"):
        errors.append(v.required("spec.gatewayClassName"))
    if not spec.get("listeners"):
        errors.append(v.required("spec.listeners"))
    return errors


def default_gateway(gw: Obj) -> Obj:
    gw.setdefault("apiVersion", f"{GROUP}/v1")
    gw["kind"] = "Gateway"
    pending = {
        "type": "Accepted",
        "status": "Unknown",
        "reason": "Pending",
        "message": "Waiting for controller",
        "lastTransitionTime": "1970-01-01T00:00:00Z",
    }
    gw.setdefault("status", {"conditions": [pending]})
    return v.build_ordered(gw, "Gateway", gw["apiVersion"])


def validate_ingressclass(cls: Obj) -> list[v.FieldError]:
    errors = v.validate_metadata(cls.get("metadata") or {})
    if not (cls.get("spec") or {}).get("controller"):
        errors.append(v.required("spec.controller"))
    return errors


def default_ingressclass(cls: Obj) -> Obj:
    cls.setdefault("apiVersion", "networking.k8s.io/v1")
    cls["kind"] = "IngressClass"
    return v.build_ordered(cls, "IngressClass", "networking.k8s.io/v1")


def as_version(version: str) -> Any:
    """A `Kind.view` rendering a stored Gateway API object at `version`
    (the fields runnerd and kubectl use are the same in v1 and v1beta1)."""

    def view(obj: Obj) -> Obj:
        return {**obj, "apiVersion": f"{GROUP}/{version}"} if "apiVersion" in obj else obj

    return view
