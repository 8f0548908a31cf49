"""PUT and PATCH: patch application and the update rules the apiserver enforces. Pure.

Supported patch types: `application/merge-patch+json` (RFC 7386),
`application/strategic-merge-patch+json` (strategic.py: merge keys and directives)
and `application/json-patch+json` (RFC 6902: add, remove, replace, test). Server-side
apply is not implemented (415).

What an update may change follows the real strategies: `status` is ignored on the
main resource; `metadata.name`/`namespace`/`uid`/`creationTimestamp` are kept; a
pod's spec may change only in the fields pod updates allow (422 Forbidden otherwise);
a PUT whose `metadata.resourceVersion` is stale is a 409 Conflict.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.kubesim.strategic import StrategicPatchError, apply_strategic

Obj = dict[str, Any]

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
PATCH_TYPES = (JSON_PATCH, MERGE, STRATEGIC)  # the order of the 415 message
POD_UPDATE_FORBIDDEN = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)"
)


class PatchError(ValueError):
    """A patch that cannot be applied; str() is the apiserver-style message."""


def apply_patch(current: Obj, patch: Any, content_type: str) -> Obj:
    if content_type == JSON_PATCH:
        if not isinstance(patch, list):
            raise PatchError("json patch must be a list of operations")
        patched = _json_patch(copy.deepcopy(current), patch)
    elif isinstance(patch, dict) and content_type == STRATEGIC:
        try:
            patched = apply_strategic(current, patch)
        except StrategicPatchError as exc:
            raise PatchError(str(exc)) from exc
    elif isinstance(patch, dict):
        patched = _merge(current, patch)
    else:
        raise PatchError("merge patch must be a JSON object")
    if not isinstance(patched, dict):
        raise PatchError("the patched document is not an object")
    return patched


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


def _json_patch(doc: Any, ops: list[Any]) -> Any:
    for op in ops:
        if not isinstance(op, dict) or "path" not in op or "op" not in op:
            raise PatchError(f"invalid json patch operation: {op!r}")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent, last = _walk(doc, parts[:-1]), parts[-1] if parts else ""
        kind = op["op"]
        if kind == "test":
            if _get(parent, last) != op.get("value"):
                raise PatchError(f"testing value {op['path']} failed")
        elif kind == "remove":
            _get(parent, last)
            del parent[int(last) if isinstance(parent, list) else last]
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(index, copy.deepcopy(op.get("value")))
                else:
                    _get(parent, last)
                    parent[index] = copy.deepcopy(op.get("value"))
            else:
                if kind == "replace":
                    _get(parent, last)
                parent[last] = copy.deepcopy(op.get("value"))
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc


def _walk(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        doc = _get(doc, part)
    return doc


def _get(doc: Any, part: str) -> Any:
    try:
        return doc[int(part)] if isinstance(doc, list) else doc[part]
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise PatchError(f"doc is missing path: {part}") from exc


def build_updated(current: Obj, proposed: Obj) -> Obj:
    """What the strategy keeps of `proposed`: server-owned metadata and status come from
    `current` (status is its own subresource)."""
    out = copy.deepcopy(proposed)
    meta = out.setdefault("metadata", {})
    for key in (
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generateName",
    ):
        if key in current["metadata"]:
            meta[key] = current["metadata"][key]
        else:
            meta.pop(key, None)
    out["kind"], out["apiVersion"] = current["kind"], current["apiVersion"]
    if "status" in current:
        out["status"] = copy.deepcopy(current["status"])
    return out


def keep_allocated(current: Obj, proposed: Obj) -> Obj:
    """A Service update keeps the cluster IPs it was given when it omits them
    (the registry's `PatchAllocatedValues`), so defaulting allocates nothing new."""
    if current.get("kind") == "Service":
        old, new = current.get("spec") or {}, proposed.setdefault("spec", {})
        for key in ("clusterIP", "clusterIPs"):
            if key in old and not new.get(key):
                new[key] = copy.deepcopy(old[key])
    return proposed


def pod_spec_change_allowed(old: Obj, new: Obj) -> bool:
    """True when only the mutable pod spec fields differ."""

    def frozen(spec: Obj) -> Obj:
        spec = copy.deepcopy(spec)
        for field in ("containers", "initContainers"):
            for ctr in spec.get(field) or []:
                ctr.pop("image", None)
        spec.pop("activeDeadlineSeconds", None)
        spec.pop("tolerations", None)
        return spec

    old_tolerations = old.get("tolerations") or []
    if any(t not in (new.get("tolerations") or []) for t in old_tolerations):
        return False
    return frozen(old) == frozen(new)
