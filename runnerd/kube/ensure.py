"""Create a session's object, or bring the one of its name up to date.

Owns `ensure_object`, what every object a session publishes (its Service,
Ingress, HTTPRoutes) goes through: create it; on `409 AlreadyExists`, read
the existing one; ours (by label) and current (`endpoints.SPEC_KEYS` and the
owner; an Ingress's `ingressClassName` the cluster's DefaultIngressClass
admission filled where runnerd sets none is not drift) is kept; ours and
stale is replaced (a PUT; an HTTPRoute is
merge-patched, the RBAC `patch` the Gateway API's tools use), carrying its
resourceVersion (a compare-and-swap: a `409 Conflict`, a change in between,
re-reads and tries again, at most _ATTEMPTS times) and, for a Service, its
allocated cluster IPs (immutable); not ours, the create's 409 stands.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import runnerd.kube.errors as errors
from runnerd.kube.client import KubeClient, Retry
from runnerd.kube.endpoints import SPEC_KEYS

_ATTEMPTS = 3


async def ensure_object(
    client: KubeClient, collection: str, obj: dict[str, Any], operation: str
) -> None:
    """`obj` in `collection`, created or brought up to date (module docstring).

    Raises:
        errors.KubeError: classified, `operation` naming the object (a
            same-named object that is not ours: the create's AlreadyExists).
    """
    path = f"{collection}/{quote(obj['metadata']['name'], safe='')}"
    last: errors.KubeError | None = None
    for _ in range(_ATTEMPTS):
        try:
            await client.request(
                "POST", collection, operation=operation, retry=Retry.WRITE, body=obj
            )
            return
        except errors.AlreadyExists as exc:
            conflict = exc
        try:
            existing = await client.request("GET", path, operation=operation, retry=Retry.READ)
        except errors.NotFound as exc:  # deleted in between: create again
            last = exc
            continue
        try:
            await _update(client, path, obj, existing, operation, conflict)
            return
        except errors.Conflict as exc:  # changed since the read: read it again
            last = exc
    assert last is not None
    raise last


async def _update(
    client: KubeClient,
    path: str,
    obj: dict[str, Any],
    existing: Mapping[str, Any],
    operation: str,
    conflict: errors.AlreadyExists,
) -> None:
    """Keep `existing` if current, replace it if stale; raise `conflict` if not ours."""
    labels = (existing.get("metadata") or {}).get("labels") or {}
    if any(labels.get(key) != value for key, value in obj["metadata"]["labels"].items()):
        raise conflict  # a same-named object that is not this session's: left alone
    if _is_current(existing, obj):
        return
    method = "PATCH" if obj["kind"] == "HTTPRoute" else "PUT"
    body = _replacement(obj, existing)
    await client.request(method, path, operation=operation, retry=Retry.WRITE, body=body)


def _replacement(obj: dict[str, Any], existing: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` as a write over `existing`: its resourceVersion, a Service's
    allocated cluster IPs (immutable: a replace must carry them), and what
    the cluster filled in that runnerd leaves unset (`_filled`)."""
    meta = existing.get("metadata") or {}
    out = {**obj, "metadata": {**obj["metadata"], "resourceVersion": meta.get("resourceVersion")}}
    have = existing.get("spec") or {}
    kept = {k: have[k] for k in _filled(obj, existing)}
    if obj["kind"] == "Service":
        kept.update({k: have[k] for k in ("clusterIP", "clusterIPs") if k in have})
    if kept:
        out["spec"] = {**obj["spec"], **kept}
    return out


def _filled(wanted: Mapping[str, Any], existing: Mapping[str, Any]) -> tuple[str, ...]:
    """The spec keys the cluster set where runnerd wants none: an Ingress's
    `ingressClassName`, which the DefaultIngressClass admission plugin fills
    on create (the class the cluster chose: not drift, and kept on a replace)."""
    if wanted["kind"] != "Ingress" or "ingressClassName" in wanted["spec"]:
        return ()
    return ("ingressClassName",) if (existing.get("spec") or {}).get("ingressClassName") else ()


def _is_current(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    have, want = existing.get("spec") or {}, wanted["spec"]
    owners = (existing.get("metadata") or {}).get("ownerReferences")
    filled = _filled(wanted, existing)
    return owners == wanted["metadata"]["ownerReferences"] and all(
        have.get(key) == want.get(key) for key in SPEC_KEYS[wanted["kind"]] if key not in filled
    )
