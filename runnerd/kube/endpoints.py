"""A session's public endpoints: one Service, and one Ingress or one HTTPRoute
per tcp port, owned by its pod. Pure.

Owns the objects' shapes (`build_service`, `build_ingress`,
`build_httproute`) and what `running` announces for a session's ports
(`announced`). Creating them, and following their health, is
`runnerd.kube.routes`' (through `runnerd.kube.routing`).

With `kubernetes.routing_base_domain` set and ports declared:
- the Service `runnerd-<id>` selects the pod by its labels (managed-by and
  session id) and carries every declared port, tcp and udp, under its own
  protocol: inside the cluster, the session is one stable name;
- the Ingress `runnerd-<id>` has one rule per tcp port, host
  `<port>-<id>.<base domain>` (one DNS label under the base domain, so one
  wildcard record and one wildcard certificate cover every session), path
  `/` to that Service port; the configured class, and a TLS block naming the
  configured secret for every host. udp has no Ingress: HTTP routing only.
- with Gateway routing instead, one HTTPRoute `runnerd-<id>-<port>` per tcp
  port: the configured Gateway as its parent (namespace and `sectionName`),
  the one hostname `<port>-<id>.<base domain>`, `PathPrefix /` to that
  Service port. Every defaulted field is spelled out, so an object read back
  compares equal to the one built (no rewrite on every publish).
- the kernel's debug port (`INSPECT_PORT`) of a session run with `inspect`
  is never in either: the debug stream is runnerd's to relay, not public.

Both carry the managed-by and session labels and an ownerReference to the
pod (controller, blockOwnerDeletion): the cluster's garbage collector deletes
them with the pod, so no path of runnerd's (a crash included) leaks them.

"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runnerd.backend import SessionIdentity
from runnerd.contract import PortMapping, RunnerEndpoint
from runnerd.kube.podspec import INSPECT_PORT, MANAGED_BY_LABEL, SESSION_LABEL, pod_name
from runnerd.kube.routehealth import GATEWAY_GROUP, GatewayRef
from runnerd.kube.settings import KubeSettings

# What of an existing object runnerd set, per kind: equal means it is current
# (the apiserver fills the rest, e.g. a Service's clusterIP).
SPEC_KEYS: Mapping[str, tuple[str, ...]] = {
    "Service": ("type", "selector", "ports"),
    "Ingress": ("ingressClassName", "tls", "rules"),
    "HTTPRoute": ("parentRefs", "hostnames", "rules"),
}


def endpoint_host(port: int, session_id: str, base_domain: str) -> str:
    """`<port>-<session id>.<base domain>`: one DNS label under the domain."""
    return f"{port}-{session_id}.{base_domain}"


def published_ports(identity: SessionIdentity) -> tuple[PortMapping, ...]:
    """The ports the Service carries: every declared one but the debug port."""
    return tuple(
        p
        for p in identity.ports
        if not (identity.inspect and p.port == INSPECT_PORT and p.protocol == "tcp")
    )


def httproute_name(session_id: str, port: int) -> str:
    """`runnerd-<session id>-<port>`: one HTTPRoute per routed port."""
    return f"{pod_name(session_id)}-{port}"


def routed_ports(identity: SessionIdentity) -> tuple[int, ...]:
    """The tcp ports routed from outside (an Ingress rule or an HTTPRoute each)."""
    return tuple(p.port for p in published_ports(identity) if p.protocol == "tcp")


def session_labels(settings: KubeSettings, session_id: str) -> dict[str, str]:
    """The labels every object of the session carries (and is listed by)."""
    return {MANAGED_BY_LABEL: settings.managed_by, SESSION_LABEL: session_id}


def _metadata(
    settings: KubeSettings,
    identity: SessionIdentity,
    pod: Mapping[str, Any],
    object_name: str = "",
) -> dict[str, Any]:
    """Name, labels and the ownerReference to `pod` (as the apiserver stored it).

    Raises:
        ValueError: `pod` has no name or uid (not an object the apiserver returned).
    """
    meta = pod.get("metadata") or {}
    name, uid = meta.get("name"), meta.get("uid")
    if not isinstance(name, str) or not isinstance(uid, str) or not name or not uid:
        raise ValueError("the owner pod needs the name and uid the apiserver gave it")
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "name": object_name or pod_name(identity.session_id),
        "labels": session_labels(settings, identity.session_id),
        "ownerReferences": [owner],
    }


def build_service(
    settings: KubeSettings, identity: SessionIdentity, pod: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The session's Service, or None when nothing is to be published (no
    base domain, or no port beside the debug one).

    Raises:
        ValueError: `pod` has no name or uid.
    """
    ports = published_ports(identity)
    if settings.routing_base_domain is None or not ports:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(settings, identity, pod),
        "spec": {
            "type": "ClusterIP",
            "selector": session_labels(settings, identity.session_id),
            # A multi-port Service needs a name per port, unique per protocol.
            "ports": [
                {
                    "name": f"{p.protocol}-{p.port}",
                    "protocol": p.protocol.upper(),
                    "port": p.port,
                    "targetPort": p.port,
                }
                for p in ports
            ],
        },
    }


def build_ingress(
    settings: KubeSettings, identity: SessionIdentity, pod: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The session's Ingress, or None (no base domain, or no tcp port to route).

    Raises:
        ValueError: `pod` has no name or uid.
    """
    domain = settings.routing_base_domain
    tcp = [p.port for p in published_ports(identity) if p.protocol == "tcp"]
    if domain is None or not tcp:
        return None
    service = pod_name(identity.session_id)
    hosts = [endpoint_host(port, identity.session_id, domain) for port in tcp]
    spec: dict[str, Any] = {}
    if settings.ingress_class is not None:
        spec["ingressClassName"] = settings.ingress_class
    if settings.ingress_tls_secret is not None:
        spec["tls"] = [{"hosts": hosts, "secretName": settings.ingress_tls_secret}]
    spec["rules"] = [
        {
            "host": host,
            "http": {
                "paths": [
                    {
                        "path": "/",
                        "pathType": "Prefix",
                        "backend": {"service": {"name": service, "port": {"number": port}}},
                    }
                ]
            },
        }
        for host, port in zip(hosts, tcp, strict=True)
    ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": _metadata(settings, identity, pod),
        "spec": spec,
    }


def announced(
    settings: KubeSettings, identity: SessionIdentity, *, published: bool
) -> tuple[RunnerEndpoint, ...]:
    """What `running` announces per declared port: with `published`, each
    routed tcp port's host and `https://` URL; every other port (udp, the
    debug port, nothing published) with an empty host."""
    domain = settings.routing_base_domain if published else None
    routed = {p.port for p in published_ports(identity) if p.protocol == "tcp"}
    out: list[RunnerEndpoint] = []
    for p in identity.ports:
        if domain is not None and p.protocol == "tcp" and p.port in routed:
            host = endpoint_host(p.port, identity.session_id, domain)
            out.append(
                {"host": host, "port": p.port, "protocol": p.protocol, "url": f"https://{host}"}
            )
        else:
            out.append({"host": "", "port": p.port, "protocol": p.protocol})
    return tuple(out)


def build_httproute(
    settings: KubeSettings,
    gateway: GatewayRef,
    identity: SessionIdentity,
    port: int,
    pod: Mapping[str, Any],
) -> dict[str, Any]:
    """The HTTPRoute of one routed tcp `port` of the session.

    Raises:
        ValueError: `pod` has no name or uid, or no base domain is set.
    """
    domain = settings.routing_base_domain
    if domain is None:
        raise ValueError("an HTTPRoute needs kubernetes.routing_base_domain")
    parent: dict[str, Any] = {
        "group": GATEWAY_GROUP,
        "kind": "Gateway",
        "name": gateway.name,
        "namespace": gateway.namespace,
    }
    if gateway.section is not None:
        parent["sectionName"] = gateway.section
    backend = {
        "group": "",
        "kind": "Service",
        "name": pod_name(identity.session_id),
        "port": port,
        "weight": 1,
    }
    name = httproute_name(identity.session_id, port)
    return {
        "apiVersion": gateway.api_version,
        "kind": "HTTPRoute",
        "metadata": _metadata(settings, identity, pod, name),
        "spec": {
            "parentRefs": [parent],
            "hostnames": [endpoint_host(port, identity.session_id, domain)],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": [backend],
                }
            ],
        },
    }
