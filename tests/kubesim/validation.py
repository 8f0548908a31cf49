"""Create-time validation and defaulting, worded as k/k apimachinery validation words it. Pure.

`validate_*` return field errors as (cause reason, field path, ErrorBody), which
`status.invalid` turns into the 422 Invalid body. `default_*` fill what the
real apiserver's defaulting and admission fill, so that kubectl and the
official client deserialize our objects as they would real ones.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from tests.kubesim.quota import parse_quantity

Obj = dict[str, Any]
FieldError = tuple[str, str, str]

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*"
_DNS1035_LABEL = r"[a-z]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    f"regex used for validation is '{_DNS1123_SUBDOMAIN}')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    f"regex used for validation is '{_DNS1123_LABEL}')"
)
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
    "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    f"'abc-123', regex used for validation is '{_DNS1035_LABEL}')"
)
QUALIFIED_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    f"used for validation is '{_QUALIFIED_NAME}')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    f"'my_value',  or '12345', regex used for validation is '{_LABEL_VALUE}')"
)
RESTART_POLICIES = ("Always", "Never", "OnFailure")

_cluster_ips = itertools.count(10)


def build_ordered(obj: Obj, kind: str, api_version: str) -> Obj:
    """kind, apiVersion, metadata, spec, status first: the order Go's structs serialize in."""
    head = {"kind": kind, "apiVersion": api_version}
    for key in ("metadata", "spec", "status"):
        if key in obj:
            head[key] = obj[key]
    return head | {k: v for k, v in obj.items() if k not in head}


def _q(value: Any) -> str:
    """Go %q of a string value."""
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def invalid_value(path: str, value: Any, detail: str) -> FieldError:
    return ("FieldValueInvalid", path, f"Invalid value: {_q(value)}: {detail}")


def required(path: str, detail: str = "") -> FieldError:
    return ("FieldValueRequired", path, "Required value" + (f": {detail}" if detail else ""))


def validate_metadata(meta: Obj, *, name_kind: str = "subdomain") -> list[FieldError]:
    errors: list[FieldError] = []
    name = meta.get("name")
    if not name:
        errors.append(required("metadata.name", "name or generateName is required"))
    else:
        errors += validate_name(name, "metadata.name", name_kind)
    for key, value in (meta.get("labels") or {}).items():
        errors += _label_errors(str(key), value)
    return errors


def validate_name(name: str, path: str, kind: str) -> list[FieldError]:
    pattern, msg, limit = {
        "subdomain": (_DNS1123_SUBDOMAIN, SUBDOMAIN_MSG, 253),
        "label": (_DNS1123_LABEL, LABEL_MSG, 63),
        "dns1035": (_DNS1035_LABEL, DNS1035_MSG, 63),
    }[kind]
    errors = []
    if len(name) > limit:
        errors.append(invalid_value(path, name, f"must be no more than {limit} characters"))
    if not re.fullmatch(pattern, name):
        errors.append(invalid_value(path, name, msg))
    return errors


def _label_errors(key: str, value: Any) -> list[FieldError]:
    errors = []
    prefix, _, part = key.rpartition("/")
    if prefix and not re.fullmatch(_DNS1123_SUBDOMAIN, prefix):
        errors.append(invalid_value("metadata.labels", key, "prefix part " + SUBDOMAIN_MSG))
    if not re.fullmatch(_QUALIFIED_NAME, part) or len(part) > 63:
        errors.append(invalid_value("metadata.labels", key, QUALIFIED_MSG))
    if not isinstance(value, str) or len(value) > 63 or not re.fullmatch(_LABEL_VALUE, value):
        errors.append(invalid_value("metadata.labels", value, LABEL_VALUE_MSG))
    return errors


def validate_pod(pod: Obj) -> list[FieldError]:
    errors = validate_metadata(pod.get("metadata") or {})
    spec = pod.get("spec") or {}
    if not spec.get("containers"):
        errors.append(required("spec.containers"))
    for field in ("initContainers", "containers"):
        seen: set[str] = set()
        for i, ctr in enumerate(spec.get(field) or []):
            errors += _container_errors(ctr, f"spec.{field}[{i}]", seen)
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in RESTART_POLICIES:
        supported = ", ".join(_q(p) for p in RESTART_POLICIES)
        errors.append(
            (
                "FieldValueNotSupported",
                "spec.restartPolicy",
                f"Unsupported value: {_q(policy)}: supported values: {supported}",
            )
        )
    return errors


def _container_errors(ctr: Obj, path: str, seen: set[str]) -> list[FieldError]:
    errors: list[FieldError] = []
    name = ctr.get("name")
    if not name:
        errors.append(required(f"{path}.name"))
    elif name in seen:
        errors.append(("FieldValueDuplicate", f"{path}.name", f"Duplicate value: {_q(name)}"))
    else:
        errors += validate_name(name, f"{path}.name", "label")
        seen.add(name)
    if not ctr.get("image"):
        errors.append(required(f"{path}.image"))
    for kind in ("limits", "requests"):
        for res, qty in ((ctr.get("resources") or {}).get(kind) or {}).items():
            try:
                parse_quantity(str(qty))
            except ValueError:
                errors.append(
                    invalid_value(
                        f"{path}.resources.{kind}[{res}]",
                        qty,
                        "must match the regex ^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$",
                    )
                )
    return errors


def default_pod(pod: Obj) -> Obj:
    """The defaults the real apiserver (defaulting + admission) sets on a new pod."""
    pod.setdefault("apiVersion", "v1")
    pod["kind"] = "Pod"
    spec = pod.setdefault("spec", {})
    for ctr in (spec.get("initContainers") or []) + spec["containers"]:
        image = ctr["image"]
        tagless = ":" not in image.rsplit("/", 1)[-1] and "@" not in image
        ctr.setdefault(
            "imagePullPolicy",
            "Always" if tagless or image.endswith(":latest") else "IfNotPresent",
        )
        ctr.setdefault("terminationMessagePath", "/dev/termination-log")
        ctr.setdefault("terminationMessagePolicy", "File")
        resources = ctr.setdefault("resources", {})
        if resources.get("limits"):
            requests = resources.setdefault("requests", {})
            for res, qty in resources["limits"].items():
                requests.setdefault(res, qty)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault(
        "tolerations",
        [
            {
                "key": f"node.kubernetes.io/{taint}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
            for taint in ("not-ready", "unreachable")
        ],
    )
    pod["status"] = {"phase": "Pending", "qosClass": build_qos_class(spec)}
    return build_ordered(pod, "Pod", "v1")


def build_qos_class(spec: Obj) -> str:
    ctrs = (spec.get("initContainers") or []) + spec.get("containers", [])
    limits = [(c.get("resources") or {}).get("limits") or {} for c in ctrs]
    requests = [(c.get("resources") or {}).get("requests") or {} for c in ctrs]
    if not any(limits) and not any(requests):
        return "BestEffort"
    guaranteed = all(
        all(res in lim for res in ("cpu", "memory")) and req == lim
        for lim, req in zip(limits, requests, strict=True)
    )
    return "Guaranteed" if guaranteed else "Burstable"


def validate_service(svc: Obj) -> list[FieldError]:
    errors = validate_metadata(svc.get("metadata") or {}, name_kind="dns1035")
    spec = svc.get("spec") or {}
    if spec.get("type", "ClusterIP") != "ExternalName" and not spec.get("ports"):
        errors.append(required("spec.ports"))
    for i, port in enumerate(spec.get("ports") or []):
        if not port.get("port"):
            errors.append(required(f"spec.ports[{i}].port"))
    return errors


def default_service(svc: Obj) -> Obj:
    svc.setdefault("apiVersion", "v1")
    svc["kind"] = "Service"
    spec = svc.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    n = next(_cluster_ips)
    spec.setdefault("clusterIP", f"10.96.{n // 250}.{n % 250 + 1}")
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    svc.setdefault("status", {"loadBalancer": {}})
    return build_ordered(svc, "Service", "v1")


def validate_ingress(ing: Obj) -> list[FieldError]:
    errors = validate_metadata(ing.get("metadata") or {})
    spec = ing.get("spec") or {}
    if not spec.get("rules") and not spec.get("defaultBackend"):
        errors.append(
            invalid_value("spec", spec, "either `defaultBackend` or `rules` must be specified")
        )
    return errors


def default_ingress(ing: Obj) -> Obj:
    ing.setdefault("apiVersion", "networking.k8s.io/v1")
    ing["kind"] = "Ingress"
    ing.setdefault("status", {"loadBalancer": {}})
    return build_ordered(ing, "Ingress", "networking.k8s.io/v1")


def validate_quota(quota: Obj) -> list[FieldError]:
    errors = validate_metadata(quota.get("metadata") or {})
    for res, qty in ((quota.get("spec") or {}).get("hard") or {}).items():
        try:
            parse_quantity(str(qty))
        except ValueError:
            errors.append(invalid_value(f"spec.hard[{res}]", qty, "must be a valid quantity"))
    return errors


def default_quota(quota: Obj) -> Obj:
    quota.setdefault("apiVersion", "v1")
    quota["kind"] = "ResourceQuota"
    quota.setdefault("spec", {}).setdefault("hard", {})
    return build_ordered(quota, "ResourceQuota", "v1")


def default_namespace(ns: Obj) -> Obj:
    ns.setdefault("apiVersion", "v1")
    ns["kind"] = "Namespace"
    ns.setdefault("spec", {"finalizers": ["kubernetes"]})
    ns.setdefault("status", {"phase": "Active"})
    name = ns["metadata"]["name"]
    ns["metadata"].setdefault("labels", {"kubernetes.io/metadata.name": name})
    return build_ordered(ns, "Namespace", "v1")
