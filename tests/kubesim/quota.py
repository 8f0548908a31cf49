"""ResourceQuota admission for pod create: quantities, usage, the exact 403 wording. Pure.

Mirrors k/k's resourcequota admission (`admission/plugin/resourcequota`): for each quota
in the namespace, the pod's usage of every resource the quota limits is added
to what live pods already use; the first quota exceeded yields
`exceeded quota: NAME, requested: …, used: …, limited: …` (keys sorted,
`k=v` joined by `,`, only the exceeded resources); a quota on limits.* or
requests.* that a container does not declare yields `failed quota: NAME: must
specify …`. Terminal pods (Succeeded/Failed) count for nothing, as in the
real pod evaluator.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

Obj = dict[str, Any]

_SUFFIX = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QTY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)")

# resource name in a quota -> (container resource field, resource key)
_COMPUTE = {
    "limits.cpu": ("limits", "cpu"),
    "limits.memory": ("limits", "memory"),
    "requests.cpu": ("requests", "cpu"),
    "requests.memory": ("requests", "memory"),
    "cpu": ("requests", "cpu"),
    "memory": ("requests", "memory"),
}


def parse_quantity(text: str) -> Fraction:
    """A Kubernetes quantity ("500m", "1Gi", "2", "1e3") as an exact number."""
    m = _QTY.fullmatch(text.strip())
    if not m:
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    number = Fraction(Decimal(m.group(1)))
    if m.group(2):
        return number * Fraction(10) ** int(m.group(2)[1:])
    return number * _SUFFIX[m.group(3) or ""]


def format_quantity(value: Fraction, resource: str) -> str:
    """Canonical-ish Quantity.String(): cpu in cores or millicores, memory in binary units."""
    if "cpu" in resource:
        milli = value * 1000
        return str(int(value)) if value.denominator == 1 else f"{int(milli)}m"
    if value.denominator == 1 and "memory" in resource and value:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            unit = _SUFFIX[suffix]
            if value % unit == 0:
                return f"{int(value / unit)}{suffix}"
    return str(int(value)) if value.denominator == 1 else f"{int(value * 1000)}m"


def pod_usage(pod: Obj) -> tuple[dict[str, Fraction], dict[str, list[str]]]:
    """(usage per quota resource name, quota resource -> containers that lack it)."""
    spec = pod.get("spec") or {}
    usage: dict[str, Fraction] = {"pods": Fraction(1), "count/pods": Fraction(1)}
    missing: dict[str, list[str]] = {}
    for name, (kind, res) in _COMPUTE.items():
        total = Fraction(0)
        for ctr in spec.get("containers") or []:
            qty = ((ctr.get("resources") or {}).get(kind) or {}).get(res)
            if qty is None:
                missing.setdefault(name, []).append(ctr.get("name", ""))
            else:
                total += parse_quantity(str(qty))
        inits = [
            parse_quantity(str(q))
            for c in spec.get("initContainers") or []
            if (q := ((c.get("resources") or {}).get(kind) or {}).get(res)) is not None
        ]
        usage[name] = max([total, *inits])
    return usage, missing


def namespace_usage(pods: list[Obj]) -> dict[str, Fraction]:
    used: dict[str, Fraction] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for res, qty in pod_usage(pod)[0].items():
            used[res] = used.get(res, Fraction(0)) + qty
    return used


def check_quota(pod: Obj, quotas: list[Obj], existing: list[Obj]) -> str | None:
    """The inner 403 message if admitting `pod` breaks a quota, else None."""
    requested, missing = pod_usage(pod)
    used = namespace_usage(existing)
    for quota in sorted(quotas, key=lambda q: q["metadata"]["name"]):
        name = quota["metadata"]["name"]
        hard = {k: parse_quantity(str(v)) for k, v in quota["spec"].get("hard", {}).items()}
        lacking = sorted(k for k in hard if k in missing)
        if lacking:
            parts = "; ".join(f"{k} for: {','.join(missing[k])}" for k in lacking)
            return f"failed quota: {name}: must specify {parts}"
        exceeded = sorted(
            k for k in hard if k in requested and used.get(k, Fraction(0)) + requested[k] > hard[k]
        )
        if exceeded:
            return (
                f"exceeded quota: {name}, "
                f"requested: {_pretty({k: requested[k] for k in exceeded})}, "
                f"used: {_pretty({k: used.get(k, Fraction(0)) for k in exceeded})}, "
                f"limited: {_pretty({k: hard[k] for k in exceeded})}"
            )
    return None


def build_quota_status(quota: Obj, pods: list[Obj]) -> Obj:
    """status.hard/used as the quota controller would report them."""
    used = namespace_usage(pods)
    hard = quota["spec"].get("hard", {})
    return {
        "hard": dict(hard),
        "used": {k: format_quantity(used.get(k, Fraction(0)), k) for k in hard},
    }


def _pretty(values: dict[str, Fraction]) -> str:
    return ",".join(f"{k}={format_quantity(v, k)}" for k, v in sorted(values.items()))
