"""A pod's volumes and volumeMounts, validated as k/k's `ValidateVolumes` and
`validateVolumeMounts` word it (the parts the simulated kubelet acts on). Pure.

Volumes: a DNS-1123 label name, unique, exactly one source (`must specify a volume
type`); configMap sources: `name` required, `defaultMode`/item `mode` within 0..0777,
item `key`/`path` required, `path` relative, without `..` elements, not starting with
`..`. Mounts: `name` naming a volume of the pod (`Not found`), `mountPath` required
and unique per container, `subPath` relative without `..`.
"""

from __future__ import annotations

from typing import Any

from tests.kubesim.validation import FieldError, invalid_value, required, validate_name
from tests.kubesim.validation import validate_pod as base_validate_pod

Obj = dict[str, Any]
FILE_MODE_MSG = "must be a number between 0 and 0777 (octal), both inclusive"


def validate_volumes(spec: Obj) -> list[FieldError]:
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        path = f"spec.volumes[{i}]"
        name = volume.get("name")
        if not name:
            errors.append(required(f"{path}.name"))
        elif name in seen:
            errors.append(("FieldValueDuplicate", f"{path}.name", f"Duplicate value: {_q(name)}"))
        else:
            errors += validate_name(name, f"{path}.name", "label")
            seen.add(name)
        sources = [k for k in volume if k != "name"]
        if not sources:
            errors.append(required(path, "must specify a volume type"))
        for extra in sources[1:]:
            forbidden = "Forbidden: may not specify more than 1 volume type"
            errors.append(("FieldValueForbidden", f"{path}.{extra}", forbidden))
        if isinstance(volume.get("configMap"), dict):
            errors += _configmap_source(volume["configMap"], f"{path}.configMap")
    for field in ("initContainers", "containers"):
        for i, ctr in enumerate(spec.get(field) or []):
            errors += _mounts(ctr, f"spec.{field}[{i}].volumeMounts", seen)
    return errors


def _configmap_source(source: Obj, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if not source.get("name"):
        errors.append(required(f"{path}.name"))
    errors += _mode(source.get("defaultMode"), f"{path}.defaultMode")
    for i, item in enumerate(source.get("items") or []):
        at = f"{path}.items[{i}]"
        if not item.get("key"):
            errors.append(required(f"{at}.key"))
        if not item.get("path"):
            errors.append(required(f"{at}.path"))
        errors += _local_path(str(item.get("path") or ""), f"{at}.path", reserved=True)
        errors += _mode(item.get("mode"), f"{at}.mode")
    return errors


def _mounts(ctr: Obj, path: str, volumes: set[str]) -> list[FieldError]:
    errors: list[FieldError] = []
    paths: set[str] = set()
    for i, mount in enumerate(ctr.get("volumeMounts") or []):
        at = f"{path}[{i}]"
        name = mount.get("name")
        if not name:
            errors.append(required(f"{at}.name"))
        elif name not in volumes:
            errors.append(("FieldValueNotFound", f"{at}.name", f"Not found: {_q(name)}"))
        mount_path = mount.get("mountPath")
        if not mount_path:
            errors.append(required(f"{at}.mountPath"))
        elif mount_path in paths:
            errors.append(invalid_value(f"{at}.mountPath", mount_path, "must be unique"))
        else:
            paths.add(mount_path)
        if mount.get("subPath"):
            errors += _local_path(str(mount["subPath"]), f"{at}.subPath", reserved=False)
    return errors


def _mode(mode: Any, path: str) -> list[FieldError]:
    if mode is None or (isinstance(mode, int) and 0 <= mode <= 0o777):
        return []
    return [("FieldValueInvalid", path, f"Invalid value: {mode}: {FILE_MODE_MSG}")]


def _local_path(value: str, path: str, *, reserved: bool) -> list[FieldError]:
    """validateLocalDescendingPath (+ ValidateLocalNonReservedPath's `..` prefix rule)."""
    errors: list[FieldError] = []
    if value.startswith("/"):
        errors.append(invalid_value(path, value, "must be a relative path"))
    if ".." in value.split("/"):
        errors.append(invalid_value(path, value, "must not contain '..'"))
    if reserved and value.startswith(".."):
        errors.append(invalid_value(path, value, "must not start with '..'"))
    return errors


def _q(value: Any) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def validate_pod(pod: Obj) -> list[FieldError]:
    """`validation.validate_pod` plus the volume rules above (what the pods Kind runs)."""
    return base_validate_pod(pod) + validate_volumes(pod.get("spec") or {})
