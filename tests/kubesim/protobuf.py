"""Decoding `application/vnd.kubernetes.protobuf` request bodies into the JSON shape.

Why at all: client-go's generated clients for built-in kinds always send
protobuf (`kubectl create quota|service|ingress`), and client-go falls back to
JSON after a 415 only for CBOR, never for protobuf: a server that cannot read
protobuf fails those commands outright. So the kinds the sim serves are decoded.

Pure. The envelope is the 4 magic bytes `k8s\\0` then a `runtime.Unknown`
(1: typeMeta{1 apiVersion, 2 kind}, 2: raw, 3: contentEncoding, 4: contentType);
`raw` is the object in gogo-protobuf's encoding of k8s.io/api's
`generated.proto`. gogo writes every non-pointer field, empty or not, so a zero
scalar or an empty string reads as absent (JSON's `omitempty`), except for
pointer fields (`*` below), which are written only when set. Status is never
read (the server owns it); a set field the schema does not know is a 400 naming
it, rather than a silently dropped value.
"""

from __future__ import annotations

import base64
from typing import Any

MAGIC = b"k8s\x00"
Obj = dict[str, Any]

# message → {field number: (json name, type)}. Types: "str", "int", "bool" (a trailing
# "*" keeps zero values: a pointer field), "[T]" repeated, "{str}" / "{Quantity}" maps,
# "{bytes}" (base64 in JSON), "IntOrString", "-" read and ignored, or another message.
# A json name "" is inline.
SCHEMA: dict[str, dict[int, tuple[str, str]]] = {
    "ObjectMeta": {
        1: ("name", "str"),
        2: ("generateName", "str"),
        3: ("namespace", "str"),
        4: ("selfLink", "-"),
        5: ("uid", "-"),
        6: ("resourceVersion", "str"),
        7: ("generation", "-"),
        8: ("creationTimestamp", "-"),
        9: ("deletionTimestamp", "-"),
        10: ("deletionGracePeriodSeconds", "-"),
        11: ("labels", "{str}"),
        12: ("annotations", "{str}"),
        13: ("ownerReferences", "[OwnerReference]"),
        14: ("finalizers", "[str]"),
        17: ("managedFields", "-"),
    },
    "OwnerReference": {
        1: ("kind", "str"),
        3: ("name", "str"),
        4: ("uid", "str"),
        5: ("apiVersion", "str"),
        6: ("controller", "bool*"),
        7: ("blockOwnerDeletion", "bool*"),
    },
    "ConfigMap": {
        1: ("metadata", "ObjectMeta"),
        2: ("data", "{str}"),
        3: ("binaryData", "{bytes}"),
        4: ("immutable", "bool*"),
    },
    "ResourceQuota": {
        1: ("metadata", "ObjectMeta"),
        2: ("spec", "ResourceQuotaSpec"),
        3: ("", "-"),
    },
    "ResourceQuotaSpec": {1: ("hard", "{Quantity}"), 2: ("scopes", "[str]")},
    "Service": {1: ("metadata", "ObjectMeta"), 2: ("spec", "ServiceSpec"), 3: ("", "-")},
    "ServiceSpec": {
        1: ("ports", "[ServicePort]"),
        2: ("selector", "{str}"),
        3: ("clusterIP", "str"),
        4: ("type", "str"),
        5: ("externalIPs", "[str]"),
        7: ("sessionAffinity", "str"),
        8: ("loadBalancerIP", "str"),
        9: ("loadBalancerSourceRanges", "[str]"),
        10: ("externalName", "str"),
        11: ("externalTrafficPolicy", "str"),
        12: ("healthCheckNodePort", "int"),
        13: ("publishNotReadyAddresses", "bool"),
        17: ("ipFamilyPolicy", "str"),
        18: ("clusterIPs", "[str]"),
        19: ("ipFamilies", "[str]"),
        20: ("allocateLoadBalancerNodePorts", "bool*"),
        21: ("loadBalancerClass", "str"),
        22: ("internalTrafficPolicy", "str"),
        23: ("trafficDistribution", "str"),
    },
    "ServicePort": {
        1: ("name", "str"),
        2: ("protocol", "str"),
        3: ("port", "int"),
        4: ("targetPort", "IntOrString"),
        5: ("nodePort", "int"),
        6: ("appProtocol", "str"),
    },
    "Ingress": {1: ("metadata", "ObjectMeta"), 2: ("spec", "IngressSpec"), 3: ("", "-")},
    "IngressSpec": {
        1: ("defaultBackend", "IngressBackend"),
        2: ("tls", "[IngressTLS]"),
        3: ("rules", "[IngressRule]"),
        4: ("ingressClassName", "str"),
    },
    "IngressBackend": {3: ("resource", "TypedLocalObjectReference"), 4: ("service", "ISB")},
    "ISB": {1: ("name", "str"), 2: ("port", "ServiceBackendPort")},  # IngressServiceBackend
    "ServiceBackendPort": {1: ("name", "str"), 2: ("number", "int")},
    "TypedLocalObjectReference": {1: ("apiGroup", "str"), 2: ("kind", "str"), 3: ("name", "str")},
    "IngressTLS": {1: ("hosts", "[str]"), 2: ("secretName", "str")},
    "IngressRule": {1: ("host", "str"), 2: ("", "IngressRuleValue")},
    "IngressRuleValue": {1: ("http", "HTTPIngressRuleValue")},
    "HTTPIngressRuleValue": {1: ("paths", "[HTTPIngressPath]")},
    "HTTPIngressPath": {
        1: ("path", "str"),
        2: ("backend", "IngressBackend"),
        3: ("pathType", "str"),
    },
}
KINDS = ("ConfigMap", "ResourceQuota", "Service", "Ingress")


class ProtobufError(ValueError):
    """The body is not a well-formed envelope or object of the expected schema."""


def decode_object(body: bytes) -> tuple[str, str, Obj]:
    """(apiVersion, kind, object) from a protobuf body; raises ProtobufError."""
    if not body.startswith(MAGIC):
        raise ProtobufError("provided data does not appear to be a protobuf message")
    envelope = _fields(body[len(MAGIC) :])
    type_meta = _fields(_last(envelope, 1, b""))
    api_version = _last(type_meta, 1, b"").decode()
    kind = _last(type_meta, 2, b"").decode()
    if kind not in KINDS:
        raise ProtobufError(f"kubesim does not decode protobuf for kind {kind!r}")
    obj = _message(kind, _last(envelope, 2, b""))
    return api_version, kind, {"apiVersion": api_version, "kind": kind, **obj}


def _message(name: str, data: bytes) -> Obj:
    schema = SCHEMA[name]
    out: Obj = {}
    for number, values in _fields(data).items():
        if number not in schema:
            if any(v not in (0, b"") for v in values):
                raise ProtobufError(f"kubesim does not decode field {number} of {name}")
            continue
        key, kind = schema[number]
        if kind == "-":
            continue
        value = _value(kind, values)
        if value is None:
            continue
        if key:
            out[key] = value
        else:
            out.update(value)  # inline (IngressRule's IngressRuleValue)
    return out


def _value(kind: str, values: list[int | bytes]) -> Any:
    """One field's JSON value, or None when absent (empty, zero, not a pointer)."""
    if kind.startswith("["):
        items = [_scalar(kind[1:-1], v, keep_zero=True) for v in values]
        return items or None
    if kind.startswith("{"):
        entries = [_fields(_bytes(v)) for v in values]
        return {
            _last(e, 1, b"").decode(): _scalar(kind[1:-1], _last(e, 2, b""), keep_zero=True)
            for e in entries
        } or None
    return _scalar(kind.rstrip("*"), values[-1], keep_zero=kind.endswith("*"))


def _scalar(kind: str, raw: int | bytes, *, keep_zero: bool) -> Any:
    if kind == "str":
        text = _bytes(raw).decode()
        return text if text or keep_zero else None
    if kind in ("int", "bool"):
        if not isinstance(raw, int):
            raise ProtobufError(f"expected a varint, got {len(raw)} bytes")
        number = raw - (1 << 64) if raw >= 1 << 63 else raw
        value: Any = bool(number) if kind == "bool" else number
        return value if number or keep_zero else None
    if kind == "bytes":  # JSON carries []byte as base64
        return base64.b64encode(_bytes(raw)).decode()
    if kind == "Quantity":
        return _last(_fields(_bytes(raw)), 1, b"").decode()
    if kind == "IntOrString":
        fields = _fields(_bytes(raw))
        if _last(fields, 1, 0) == 1:
            return _last(fields, 3, b"").decode()
        return _last(fields, 2, 0)
    return _message(kind, _bytes(raw)) or None


def _fields(data: bytes) -> dict[int, list[int | bytes]]:
    """Protobuf wire format → {field number: values in order} (varint and length-delimited)."""
    out: dict[int, list[int | bytes]] = {}
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            out.setdefault(number, []).append(value)
        elif wire == 2:
            size, i = _varint(data, i)
            if i + size > len(data):
                raise ProtobufError("truncated protobuf field")
            out.setdefault(number, []).append(data[i : i + size])
            i += size
        else:
            raise ProtobufError(f"unsupported protobuf wire type {wire}")
    return out


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data):
            raise ProtobufError("truncated protobuf varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _last(fields: dict[int, list[int | bytes]], number: int, default: Any) -> Any:
    values = fields.get(number)
    return values[-1] if values else default


def _bytes(raw: int | bytes) -> bytes:
    if isinstance(raw, int):
        raise ProtobufError("expected a length-delimited field, got a varint")
    return raw
