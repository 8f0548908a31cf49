"""The resource table and the discovery documents kubectl and client-go read. Pure.

Only the verbs this simulator implements are advertised, so a client that
trusts discovery never asks for something we would fake badly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.kubesim import configmaps as cm
from tests.kubesim import events as ev
from tests.kubesim import gateway as gw
from tests.kubesim import validation as v

Obj = dict[str, Any]
KUBE_VERSION = {"major": "1", "minor": "37", "gitVersion": "v1.37.0-kubesim"}
NETWORKING = "networking.k8s.io"
EVENTS = ev.GROUP
GATEWAY = gw.GROUP
# The named groups served, in kube-apiserver's /apis order (CRD groups last).
GROUPS = (EVENTS, NETWORKING, GATEWAY)
# The versions each named group serves, preferred first. The apiserver holds
# its own copy (`ApiServer.served`): a test takes the Gateway API away (a
# cluster without its CRDs) or leaves only v1beta1.
VERSIONS: dict[str, tuple[str, ...]] = {EVENTS: ("v1",), NETWORKING: ("v1",), GATEWAY: gw.VERSIONS}
Served = dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class Kind:
    resource: str
    kind: str
    group: str
    namespaced: bool
    verbs: tuple[str, ...]
    short_names: tuple[str, ...] = ()
    validate: Callable[[Obj], list[v.FieldError]] | None = None
    default: Callable[[Obj], Obj] | None = None
    view: Callable[[Obj], Obj] | None = None  # stored shape → this API's (events.k8s.io)
    field_labels: dict[str, Callable[[Obj], str]] | None = None  # None: selectors.py decides
    status_subresource: bool = False  # `<resource>/status` takes get, update and patch
    version: str = "v1"  # the version a request addressed (apiserver: `dataclasses.replace`)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else "v1"

    @property
    def singular(self) -> str:
        return self.kind.lower()


_RW = ("create", "delete", "get", "list", "patch", "update", "watch")
_READ = ("get", "list", "watch")
KINDS: dict[tuple[str, str], Kind] = {
    ("", "namespaces"): Kind(
        "namespaces",
        "Namespace",
        "",
        False,
        ("get", "list", "watch"),
        ("ns",),
        None,
        v.default_namespace,
    ),
    ("", "pods"): Kind("pods", "Pod", "", True, _RW, ("po",), v.validate_pod, v.default_pod),
    ("", "services"): Kind(
        "services", "Service", "", True, _RW, ("svc",), v.validate_service, v.default_service
    ),
    ("", "configmaps"): Kind(
        "configmaps",
        "ConfigMap",
        "",
        True,
        _RW,
        ("cm",),
        cm.validate_configmap,
        cm.default_configmap,
    ),
    ("", "resourcequotas"): Kind(
        "resourcequotas",
        "ResourceQuota",
        "",
        True,
        _RW,
        ("quota",),
        v.validate_quota,
        v.default_quota,
    ),
    (NETWORKING, "ingresses"): Kind(
        "ingresses",
        "Ingress",
        NETWORKING,
        True,
        _RW,
        ("ing",),
        v.validate_ingress,
        v.default_ingress,
        status_subresource=True,
    ),
    (NETWORKING, "ingressclasses"): Kind(
        "ingressclasses",
        "IngressClass",
        NETWORKING,
        False,
        _RW,
        (),
        gw.validate_ingressclass,
        gw.default_ingressclass,
    ),
    (GATEWAY, "gateways"): Kind(
        "gateways",
        "Gateway",
        GATEWAY,
        True,
        _RW,
        ("gtw",),
        gw.validate_gateway,
        gw.default_gateway,
        status_subresource=True,
    ),
    (GATEWAY, "httproutes"): Kind(
        "httproutes",
        "HTTPRoute",
        GATEWAY,
        True,
        _RW,
        (),
        gw.validate_httproute,
        gw.default_httproute,
        status_subresource=True,
    ),
    ("", "events"): Kind("events", "Event", "", True, _READ, ("ev",), field_labels=ev.FIELDS),
    (EVENTS, "events"): Kind(
        "events",
        "Event",
        EVENTS,
        True,
        _READ,
        ("ev",),
        view=ev.to_events_v1,
        field_labels=ev.FIELDS_V1,
    ),
}

SUBRESOURCES = {
    "pods/attach": ("PodAttachOptions", ("create", "get")),
    "pods/exec": ("PodExecOptions", ("create", "get")),
    "pods/log": ("Pod", ("get",)),
    "pods/status": ("Pod", ("get",)),
}


def _entry(k: Kind) -> Obj:
    entry: Obj = {
        "name": k.resource,
        "singularName": k.singular,
        "namespaced": k.namespaced,
        "kind": k.kind,
        "verbs": list(k.verbs),
    }
    if k.short_names:
        entry["shortNames"] = list(k.short_names)
    if k.resource in ("pods", "services"):
        entry["categories"] = ["all"]
    return entry


def _subresources(group: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """`resource/sub` → (kind, verbs) for `group`: the pods' (core) and every
    kind's `status` subresource."""
    subs = dict(SUBRESOURCES) if not group else {}
    for k in KINDS.values():
        if k.group == group and k.status_subresource:
            subs[f"{k.resource}/status"] = (k.kind, ("get", "patch", "update"))
    return subs


def build_resource_list(group: str, version: str = "v1") -> Obj:
    resources = [_entry(k) for k in KINDS.values() if k.group == group]
    resources += [
        {"name": name, "singularName": "", "namespaced": True, "kind": kind, "verbs": list(vs)}
        for name, (kind, vs) in _subresources(group).items()
    ]
    resources.sort(key=lambda r: r["name"])
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else "v1",
        "resources": resources,
    }


def build_api_versions(server_address: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group(name: str, versions: tuple[str, ...]) -> Obj:
    gvs = [{"groupVersion": f"{name}/{ver}", "version": ver} for ver in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def build_group_list(served: Served = VERSIONS) -> Obj:
    groups = [_group(g, served[g]) for g in GROUPS if served.get(g)]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def build_group(name: str, served: Served = VERSIONS) -> Obj | None:
    if not served.get(name):
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, served[name])}


def build_version() -> Obj:
    return {
        **KUBE_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-11-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def _openapi_path(k: Kind) -> str:
    prefix = f"/apis/{k.group}/v1" if k.group else "/api/v1"
    scope = "/namespaces/{namespace}" if k.namespaced else ""
    return f"{prefix}{scope}/{k.resource}/{{name}}"


def build_openapi_v3_index() -> Obj:
    """`/openapi/v3`: where each group-version's document lives (what kubectl fetches first)."""
    return {
        "paths": {
            gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash=kubesim"}
            for gv in ("api/v1", *(f"apis/{g}/v1" for g in GROUPS))
        }
    }


def build_openapi_v3(gv: str) -> Obj | None:
    """Just enough of a group-version's OpenAPI v3 document for kubectl's validation probe.

    kubectl asks whether PATCH on a kind takes `fieldValidation`; saying yes makes it
    leave validation to the server (which answers 422 Invalid itself) instead of
    fetching the full schema for client-side validation.
    """
    group = {"api/v1": "", **{f"apis/{g}/v1": g for g in GROUPS}}.get(gv)
    if group is None:
        return None
    paths = {
        _openapi_path(k): {
            "patch": {
                "x-kubernetes-group-version-kind": {
                    "group": k.group,
                    "version": "v1",
                    "kind": k.kind,
                },
                "parameters": [
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
                ],
            }
        }
        for k in KINDS.values()
        if k.group == group
    }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBE_VERSION["gitVersion"]},
        "paths": paths,
    }


AGGREGATED_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def wants_aggregated(accept: str) -> bool:
    """kubectl ≥1.30 asks `/api` and `/apis` for the aggregated (v2) document first."""
    return any(
        "as=APIGroupDiscoveryList" in part and "v=v2" in part and "g=apidiscovery.k8s.io" in part
        for part in accept.split(",")
    )


def _aggregated_resource(k: Kind, version: str = "v1") -> Obj:
    response_kind = {"group": k.group, "version": version, "kind": k.kind}
    entry: Obj = {
        "resource": k.resource,
        "responseKind": response_kind,
        "scope": "Namespaced" if k.namespaced else "Cluster",
        "singularResource": k.singular,
        "verbs": list(k.verbs),
    }
    if k.short_names:
        entry["shortNames"] = list(k.short_names)
    if k.resource in ("pods", "services"):
        entry["categories"] = ["all"]
    subs = [
        {
            "subresource": name.split("/", 1)[1],
            "responseKind": {"group": k.group, "version": version, "kind": kind},
            "verbs": list(verbs),
        }
        for name, (kind, verbs) in _subresources(k.group).items()
        if name.startswith(f"{k.resource}/")
    ]
    if subs:
        entry["subresources"] = subs
    return entry


def build_aggregated(group_path: str, served: Served = VERSIONS) -> Obj:
    """The APIGroupDiscoveryList for `/api` (core) or `/apis` (named groups)."""
    groups = [""] if group_path == "/api" else [g for g in GROUPS if served.get(g)]
    items = [
        {
            "metadata": {"name": g} if g else {},
            "versions": [
                {
                    "version": ver,
                    "resources": [
                        _aggregated_resource(k, ver) for k in KINDS.values() if k.group == g
                    ],
                    "freshness": "Current",
                }
                for ver in (served[g] if g else ("v1",))
            ],
        }
        for g in groups
    ]
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }
