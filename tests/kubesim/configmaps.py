"""ConfigMaps (`v1` `configmaps`): decoding checks, validation, defaults, the table row. Pure.

Worded as k/k words them: `ValidateConfigMap` (a DNS-1123 subdomain name; every
`data`/`binaryData` key `IsConfigMapKey`; a key in both bags; all values together
at most `MaxSecretSize`, 1 MiB, reported on the whole object as `[]: Too long`),
`ValidateConfigMapUpdate` (an `immutable: true` ConfigMap keeps its data and its
flag), and the JSON decoder's 400 for values of the wrong type (`cannot unmarshal
number into Go struct field ConfigMap.data of type string`), raised before any
validation as the real decoder fails first. Go's field order on output: kind,
apiVersion, metadata, immutable, data, binaryData (empty maps omitted).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from typing import Any

from tests.kubesim import status
from tests.kubesim.validation import FieldError, invalid_value, validate_metadata

Obj = dict[str, Any]
MAX_SIZE = 1024 * 1024  # core.MaxSecretSize: the limit on data + binaryData together
_KEY_FMT = "[-._a-zA-Z0-9]+"
KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    f"'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '{_KEY_FMT}')"
)
IMMUTABLE_MSG = "Forbidden: field is immutable when `immutable` is set"
COLUMNS = [("Name", "name", 0), ("Data", "", 0), ("Age", "", 0)]
_B64 = re.compile(r"[A-Za-z0-9+/]")


def validate_configmap(cm: Obj) -> list[FieldError]:
    """ValidateConfigMap; raises the decoder's 400 first for values of the wrong type."""
    _check_types(cm)
    errors = validate_metadata(cm.get("metadata") or {})
    data, binary = cm.get("data") or {}, cm.get("binaryData") or {}
    size = 0
    for key, value in data.items():
        errors += key_errors(f"data[{key}]", key)
        if key in binary:
            errors.append(
                invalid_value(f"data[{key}]", key, "duplicate of key present in binaryData")
            )
        size += len((value or "").encode())
    for key, value in binary.items():
        errors += key_errors(f"binaryData[{key}]", key)
        size += len(base64.b64decode(value or ""))
    if size > MAX_SIZE:
        errors.append(
            ("FieldValueTooLong", "[]", f"Too long: may not be more than {MAX_SIZE} bytes")
        )
    return errors


def key_errors(path: str, key: str) -> list[FieldError]:
    """validation.IsConfigMapKey: length, charset, and no `.`/`..` (the volume's own names)."""
    errors: list[FieldError] = []
    if len(key) > 253:
        errors.append(invalid_value(path, key, "must be no more than 253 characters"))
    if not re.fullmatch(_KEY_FMT, key):
        errors.append(invalid_value(path, key, KEY_MSG))
    if key in (".", ".."):
        errors.append(invalid_value(path, key, f"must not be '{key}'"))
    elif key.startswith(".."):
        errors.append(invalid_value(path, key, "must not start with '..'"))
    return errors


def validate_update(old: Obj, new: Obj) -> list[FieldError]:
    """ValidateConfigMapUpdate's immutability rules (the rest is validate_configmap's)."""
    if old.get("immutable") is not True:
        return []
    errors: list[FieldError] = []
    if new.get("immutable") is not True:
        errors.append(("FieldValueForbidden", "immutable", IMMUTABLE_MSG))
    for bag in ("data", "binaryData"):
        if (old.get(bag) or {}) != (new.get(bag) or {}):
            errors.append(("FieldValueForbidden", bag, IMMUTABLE_MSG))
    return errors


def default_configmap(cm: Obj) -> Obj:
    """Go's field order, empty maps dropped (omitempty), `immutable` kept only when set."""
    head: Obj = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": cm.get("metadata") or {}}
    if cm.get("immutable") is not None:
        head["immutable"] = cm["immutable"]
    for bag in ("data", "binaryData"):
        if cm.get(bag):  # a JSON null value decodes to Go's zero value, ""
            head[bag] = {key: value or "" for key, value in cm[bag].items()}
    skip = {"kind", "apiVersion", "metadata", "immutable", "data", "binaryData"}
    return head | {k: v for k, v in cm.items() if k not in skip}


def build_cells(cm: Obj, age: Callable[[str | None], str]) -> list[Any]:
    """printConfigMap: NAME, DATA (number of keys in both bags), AGE."""
    count = len(cm.get("data") or {}) + len(cm.get("binaryData") or {})
    return [cm["metadata"]["name"], count, age(cm["metadata"].get("creationTimestamp"))]


def files_of(cm: Obj) -> dict[str, bytes]:
    """Every key's bytes, as a configMap volume projects them (binaryData decoded)."""
    out = {key: str(value).encode() for key, value in (cm.get("data") or {}).items()}
    out |= {key: base64.b64decode(value) for key, value in (cm.get("binaryData") or {}).items()}
    return out


def _check_types(cm: Obj) -> None:
    immutable = cm.get("immutable")
    if immutable is not None and not isinstance(immutable, bool):
        raise _undecodable(
            f"cannot unmarshal {_go_type(immutable)} into Go struct field "
            "ConfigMap.immutable of type bool"
        )
    for bag in ("data", "binaryData"):
        values = cm.get(bag)
        if values is None:
            continue
        go_map = "map[string]string" if bag == "data" else "map[string][]uint8"
        if not isinstance(values, dict):
            raise _undecodable(
                f"cannot unmarshal {_go_type(values)} into Go struct field ConfigMap.{bag} of "
                f"type {go_map}"
            )
        for value in values.values():
            if value is not None and not isinstance(value, str):
                raise _undecodable(
                    f"cannot unmarshal {_go_type(value)} into Go struct field ConfigMap.{bag} "
                    f"of type {'string' if bag == 'data' else '[]uint8'}"
                )
            if bag == "binaryData" and value:
                _check_base64(value)


def _check_base64(value: str) -> None:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        bad = next((i for i, ch in enumerate(value) if ch != "=" and not _B64.match(ch)), None)
        where = bad if bad is not None else len(value.rstrip("="))
        raise _undecodable(f"illegal base64 data at input byte {where}") from None


def _undecodable(why: str) -> status.ApiError:
    return status.bad_request(
        f'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: {why}'
        if "base64" not in why
        else f'ConfigMap in version "v1" cannot be handled as a ConfigMap: {why}'
    )


def _go_type(value: Any) -> str:
    """encoding/json's UnmarshalTypeError.Value for a JSON value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "null"
