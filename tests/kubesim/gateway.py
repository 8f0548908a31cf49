"""Gateway API (`gateway.networking.k8s.io`) and IngressClass objects: create-time
validation and defaulting, as the Gateway API's CRD schemas and k/k's
networking validation word them. Pure.

Served by the apiserver as any kind (`discovery.KINDS`): Gateways and HTTPRoutes
namespaced, with a `status` subresource (a controller, or a test standing in
for one, writes `status.parents` / `status.conditions` there: `kubectl patch
--subresource=status`); IngressClasses cluster-scoped, the default one marked
by `ingressclass.kubernetes.io/is-default-class: "true"`. HTTPRoutes are
garbage-collected with their owner, as services and ingresses are.

A create of a status-subresource kind (Ingresses, Gateways, HTTPRoutes) drops
the `status` sent, as the real registries do; `metadata.generation` is 1 on
create and bumped by a write that changes `spec` (`GENERATION_KINDS`, pods
included); a class-less Ingress create gets the default IngressClass
(`default_class_of`: the DefaultIngressClass admission plugin, create only).
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
# Kinds whose create drops the status sent (a status subresource, reset on create).
STATUS_RESET_KINDS = ("ingresses", "gateways", "httproutes")
# Kinds with `metadata.generation` (bumped on spec changes only).
GENERATION_KINDS = ("pods", "ingresses", "gateways", "httproutes")


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
    # The v1 CRD's status default: both conditions Unknown until a controller writes.
    pending = [
        {
            "type": kind,
            "status": "Unknown",
            "reason": "Pending",
            "message": "Waiting for controller",
            "lastTransitionTime": "1970-01-01T00:00:00Z",
        }
        for kind in ("Accepted", "Programmed")
    ]
    gw.setdefault("status", {"conditions": pending})
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


def default_class_of(classes: list[Obj]) -> str | None:
    """The IngressClass the DefaultIngressClass admission plugin gives a
    class-less Ingress on create: the one annotated default; of several, the
    newest (then the first by name), as current releases choose (older ones
    refused the create: "2 default IngressClasses were found, only 1
    allowed")."""
    defaults = [
        c
        for c in classes
        if (c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"
    ]
    if not defaults:
        return None
    defaults.sort(key=lambda c: c["metadata"]["name"])
    defaults.sort(key=lambda c: c["metadata"].get("creationTimestamp") or "", reverse=True)
    return str(defaults[0]["metadata"]["name"])


def admit_create(resource: str, obj: Obj, store: Any) -> Obj:
    """What create adds to a defaulted `obj` of `resource`: generation 1,
    and a class-less Ingress the default IngressClass (`store`'s)."""
    if resource in GENERATION_KINDS:
        obj["metadata"]["generation"] = 1
    if resource == "ingresses" and not (obj.get("spec") or {}).get("ingressClassName"):
        if cls := default_class_of(store.list("ingressclasses", "")):
            obj.setdefault("spec", {})["ingressClassName"] = cls
    return obj


def keep_generation(resource: str, current: Obj, updated: Obj) -> None:
    """An update's `metadata.generation`: server-owned, the current one, +1
    when `spec` changed (a metadata-only or status write keeps it)."""
    if resource not in GENERATION_KINDS:
        return
    generation = current["metadata"].get("generation", 1)
    changed = updated.get("spec") != current.get("spec")
    updated["metadata"]["generation"] = generation + 1 if changed else generation


def as_version(version: str) -> Any:
    """A `Kind.view` rendering a stored Gateway API object at `version`
    (the fields runnerd and kubectl use are the same in v1 and v1beta1)."""

    def view(obj: Obj) -> Obj:
        return {**obj, "apiVersion": f"{GROUP}/{version}"} if "apiVersion" in obj else obj

    return view
