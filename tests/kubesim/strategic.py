"""Strategic merge patch, as k8s.io/apimachinery's `strategicpatch` applies it. Pure.

A merge patch (RFC 7386) with the list semantics of the served kinds' Go
struct tags (`patchStrategy`/`patchMergeKey`, in `MERGE_KEYS` by field path)
and the directives kubectl sends:

- `$patch: replace` on a map: the map becomes the patch's (minus directives);
  `$patch: delete`: the map goes; `$patch: merge`: the default.
- In a merge-keyed list: an element `{"$patch": "delete", key: v}` removes the
  element with that key; `{"$patch": "replace"}` as an element replaces the whole
  list with the patch's other elements; other elements merge into the element
  with the same key, or are appended.
- `$setElementOrder/<list>`: the merged list in that order (elements it does not
  name keep their place after the named ones, as the server-only items do).
- `$deleteFromPrimitiveList/<list>`: those values leave a primitive list.
- `$retainKeys`: keys of the merged map that are not listed are dropped.

Lists without a strategy are replaced whole; primitive lists with the merge
strategy (`finalizers`) are unions. A directive never reaches the stored object.
"""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]
Path = tuple[str, ...]

# (field path, list indices dropped) → merge key; "" = primitive list, merge = union.
_CONTAINER_LISTS = {
    "ports": "containerPort",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
}
MERGE_KEYS: dict[Path, str] = {
    ("metadata", "ownerReferences"): "uid",
    ("metadata", "finalizers"): "",
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "ephemeralContainers"): "name",
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "hostAliases"): "ip",
    ("spec", "topologySpreadConstraints"): "topologyKey",
    ("spec", "ports"): "port",  # a Service's
    **{
        ("spec", c, f): k
        for c in ("containers", "initContainers")
        for f, k in _CONTAINER_LISTS.items()
    },
}
_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVES = "$deleteFromPrimitiveList/"


class StrategicPatchError(ValueError):
    """A patch the apiserver would reject; str() is its message."""


def apply_strategic(original: Obj, patch: Obj) -> Obj:
    """`original` with `patch` applied; neither argument is modified."""
    merged = _merge_map(copy.deepcopy(original), patch, ())
    if merged is None:
        raise StrategicPatchError("the patch deletes the whole object")
    return merged


def _merge_map(original: Obj | None, patch: Obj, path: Path) -> Obj | None:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return _strip({k: v for k, v in patch.items() if k != "$patch"}, path)
    if directive not in (None, "merge"):
        raise StrategicPatchError(f"Unknown patch type: {directive}")
    out: Obj = dict(original or {})
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            current = out.get(key)
            merged = _merge_map(current if isinstance(current, dict) else None, value, (*path, key))
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        elif isinstance(value, list):
            current = out.get(key)
            out[key] = _merge_list(
                current if isinstance(current, list) else [], value, (*path, key)
            )
        else:
            out[key] = copy.deepcopy(value)
    for key, values in patch.items():
        if key.startswith(_DELETE_PRIMITIVES) and isinstance(
            out.get(key[len(_DELETE_PRIMITIVES) :]), list
        ):
            name = key[len(_DELETE_PRIMITIVES) :]
            out[name] = [v for v in out[name] if v not in values]
        elif key.startswith(_ORDER) and isinstance(out.get(key[len(_ORDER) :]), list):
            name = key[len(_ORDER) :]
            out[name] = _reorder(out[name], values, MERGE_KEYS.get((*path, name)))
    if "$retainKeys" in patch:
        keep = set(patch["$retainKeys"] or [])
        out = {k: v for k, v in out.items() if k in keep}
    return out


def _merge_list(original: list[Any], patch: list[Any], path: Path) -> list[Any]:
    key = MERGE_KEYS.get(path)
    if key is None:  # no strategy: the patch's list replaces the original
        return [
            _strip(item, path) if isinstance(item, dict) else copy.deepcopy(item) for item in patch
        ]
    if key == "":  # primitives with the merge strategy: a union, order kept
        return list(original) + [v for v in patch if v not in original]
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_strip(item, path) for item in patch if item.get("$patch") != "replace"]
    out = [copy.deepcopy(item) for item in original]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise StrategicPatchError(f"map: {item} does not contain declared merge key: {key}")
        index = next((i for i, o in enumerate(out) if o.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
            continue
        merged = _merge_map(out[index] if index is not None else None, item, path)
        if merged is None:
            continue
        if index is None:
            out.append(merged)
        else:
            out[index] = merged
    return out


def _reorder(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    """Items named in `order` first, in that order; the rest after, in their own order."""

    def ident(item: Any) -> Any:
        return item.get(key) if key and isinstance(item, dict) else item

    wanted = [ident(o) for o in order]
    named = sorted((i for i in items if ident(i) in wanted), key=lambda i: wanted.index(ident(i)))
    return named + [i for i in items if ident(i) not in wanted]


def _strip(value: Any, path: Path) -> Any:
    """A patch value with every directive removed (what a replace or an append stores)."""
    if isinstance(value, dict):
        merged = _merge_map(None, {k: v for k, v in value.items() if k != "$patch"}, path)
        return merged or {}
    if isinstance(value, list):
        return [_strip(v, path) for v in value]
    return copy.deepcopy(value)
