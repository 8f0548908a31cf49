"""A session's public endpoints: one Service and one Ingress, owned by its pod.

Owns the two objects' shapes (`build_service`, `build_ingress`: pure), what
`running` announces for a session's ports (`announced`), and
`publish_endpoints`, the one call the backend makes once the pod exists (and
again for a pod a restarted daemon adopts).

With `kubernetes.ingress_base_domain` set and ports declared:
- the Service `runnerd-<id>` selects the pod by its labels (managed-by and
  session id) and carries every declared port, tcp and udp, under its own
  protocol: inside the cluster, the session is one stable name;
- the Ingress `runnerd-<id>` has one rule per tcp port, host
  `<port>-<id>.<base domain>` (one DNS label under the base domain, so one
  wildcard record and one wildcard certificate cover every session), path
  `/` to that Service port; the configured class, and a TLS block naming the
  configured secret for every host. udp has no Ingress: HTTP routing only.
- the kernel's debug port (`INSPECT_PORT`) of a session run with `inspect`
  is never in either: the debug stream is runnerd's to relay, not public.

Both carry the managed-by and session labels and an ownerReference to the
pod (controller, blockOwnerDeletion): the cluster's garbage collector deletes
them with the pod, so no path of runnerd's (a crash included) leaks them.

Error handling: a failure to publish is never a failed session. It is one
classified line in the session's terminal (`terminal.notice`: the operation,
the HTTP status, the Status reason; never the apiserver's message, which
names the runner's service account), the detail goes to the log, and
`running` announces the unpublished form (`host: ""`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import runnerd.kube.errors as errors
from runnerd.backend import SessionIdentity, Sink
from runnerd.contract import PortMapping, RunnerEndpoint
from runnerd.kube.client import KubeClient, Retry
from runnerd.kube.podspec import INSPECT_PORT, MANAGED_BY_LABEL, SESSION_LABEL, pod_name
from runnerd.kube.settings import KubeSettings
from runnerd.kube.terminal import notice

log = logging.getLogger(__name__)

SERVICE_OPERATION = "could not create the session's Service"
INGRESS_OPERATION = "could not create the session's Ingress"
# What of an existing object runnerd set, per kind: equal means it is current
# (the apiserver fills the rest, e.g. a Service's clusterIP).
_SPEC_KEYS: Mapping[str, tuple[str, ...]] = {
    "Service": ("type", "selector", "ports"),
    "Ingress": ("ingressClassName", "tls", "rules"),
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


def _labels(settings: KubeSettings, session_id: str) -> dict[str, str]:
    return {MANAGED_BY_LABEL: settings.managed_by, SESSION_LABEL: session_id}


def _metadata(
    settings: KubeSettings, identity: SessionIdentity, pod: Mapping[str, Any]
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
        "name": pod_name(identity.session_id),
        "labels": _labels(settings, identity.session_id),
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
    if settings.ingress_base_domain is None or not ports:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(settings, identity, pod),
        "spec": {
            "type": "ClusterIP",
            "selector": _labels(settings, identity.session_id),
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
    domain = settings.ingress_base_domain
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
    domain = settings.ingress_base_domain if published else None
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


async def publish_endpoints(
    client: KubeClient,
    settings: KubeSettings,
    identity: SessionIdentity,
    pod: Mapping[str, Any],
    sink: Sink,
) -> tuple[RunnerEndpoint, ...]:
    """Create (or bring up to date) the session's Service and Ingress, owned
    by `pod`; the endpoints `running` announces.

    Idempotent: objects of the session's fixed names that are already ours
    (by label) are kept when current, replaced when not (an adopted pod after
    a config change; or a foreign owner uid). Never raises a `KubeError`: a
    refusal is a line in the terminal (module docstring) and the unpublished
    endpoints. Cancellation: an object created before it stays, collected
    with the pod.
    """
    service = build_service(settings, identity, pod)
    if service is None:
        return announced(settings, identity, published=False)
    ingress = build_ingress(settings, identity, pod)
    namespace = quote(client.namespace, safe="")
    try:
        await _ensure(
            client, f"/api/v1/namespaces/{namespace}/services", service, SERVICE_OPERATION
        )
        if ingress is not None:
            await _ensure(
                client,
                f"/apis/networking.k8s.io/v1/namespaces/{namespace}/ingresses",
                ingress,
                INGRESS_OPERATION,
            )
    except errors.KubeError as exc:
        log.warning(
            "endpoints not published: %r",
            exc.__cause__ or exc,
            extra={"session_id": identity.session_id},
        )
        sink.output(notice(f"the session's ports are not published: {exc}"))
        return announced(settings, identity, published=False)
    return announced(settings, identity, published=True)


async def _ensure(client: KubeClient, collection: str, obj: dict[str, Any], operation: str) -> None:
    """Create `obj`; on 409, keep the existing object if it is ours and current,
    replace it if ours and stale, else raise the 409.

    Raises:
        errors.KubeError: classified, `operation` naming the object.
    """
    try:
        await client.request("POST", collection, operation=operation, retry=Retry.WRITE, body=obj)
        return
    except errors.AlreadyExists as exc:
        conflict = exc
    path = f"{collection}/{quote(obj['metadata']['name'], safe='')}"
    existing = await client.request("GET", path, operation=operation, retry=Retry.READ)
    meta = existing.get("metadata") or {}
    labels = meta.get("labels") or {}
    if any(labels.get(key) != value for key, value in obj["metadata"]["labels"].items()):
        raise conflict  # a same-named object that is not this session's: left alone
    if _is_current(existing, obj):
        return
    replacement = {
        **obj,
        "metadata": {**obj["metadata"], "resourceVersion": meta.get("resourceVersion")},
    }
    await client.request("PUT", path, operation=operation, retry=Retry.WRITE, body=replacement)


def _is_current(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    have, want = existing.get("spec") or {}, wanted["spec"]
    owners = (existing.get("metadata") or {}).get("ownerReferences")
    return owners == wanted["metadata"]["ownerReferences"] and all(
        have.get(key) == want.get(key) for key in _SPEC_KEYS[wanted["kind"]]
    )
