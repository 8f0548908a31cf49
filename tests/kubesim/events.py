"""Events: the core/v1 shape the store keeps, and the events.k8s.io/v1 view of it. Pure.

One storage, two APIs, as in kube-apiserver: objects are stored as core/v1
`Event` (what `kubectl get events` and `kubectl describe` read) and converted on
the way out for `/apis/events.k8s.io/v1` (`Convert_core_Event_To_v1_Event`:
involvedObject → regarding, message → note, source → deprecatedSource, …).
Keys are in the Go structs' field order; zero timestamps render as `null` and
empty strings without omitempty as `""`, as the Go encoder writes them.

Field selectors (k/k `pkg/apis/core/v1/conversion.go` for Event, and
`pkg/apis/events/v1` for the renamed labels) live in `FIELDS` / `FIELDS_V1`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]
GROUP = "events.k8s.io"


def build_event_name(object_name: str, unix_ns: int) -> str:
    """`<object>.<hex unix nanoseconds>`, as client-go's recorder names events."""
    return f"{object_name}.{unix_ns:x}"


def build_micro_time(now: dt.datetime) -> str:
    """metav1.MicroTime: RFC 3339 with 6 fractional digits."""
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def build_core_event(
    *,
    name: str,
    namespace: str,
    involved: Obj,
    reason: str,
    message: str,
    type_: str,
    component: str,
    host: str,
    first: str | None,
    event_time: str | None = None,
    action: str = "",
    instance: str = "",
) -> Obj:
    """A core/v1 Event in Go field order.

    A kubelet (legacy recorder) sets `source`, first/last timestamps and `count`; a
    new-style reporter (the scheduler) sets `eventTime`, `action` and the reporting
    fields instead and leaves `source` empty.
    """
    legacy = event_time is None
    return {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "source": {"component": component, "host": host} if legacy else {},
        "firstTimestamp": first if legacy else None,
        "lastTimestamp": first if legacy else None,
        **({"count": 1} if legacy else {}),
        "type": type_,
        "eventTime": event_time,
        **({"action": action} if action else {}),
        "reportingComponent": component,
        "reportingInstance": instance or host,
    }


def to_events_v1(core: Obj) -> Obj:
    """The events.k8s.io/v1 rendering of a stored core/v1 Event (kind/apiVersion kept if set)."""
    out: Obj = {}
    if "kind" in core:
        out |= {"kind": "Event", "apiVersion": f"{GROUP}/v1"}
    out["metadata"] = core["metadata"]
    out["eventTime"] = core.get("eventTime")
    for src, dst in (
        ("series", "series"),
        ("reportingComponent", "reportingController"),
        ("reportingInstance", "reportingInstance"),
        ("action", "action"),
        ("reason", "reason"),
        ("involvedObject", "regarding"),
        ("related", "related"),
        ("message", "note"),
        ("type", "type"),
    ):
        if core.get(src):
            out[dst] = core[src]
    out["deprecatedSource"] = core.get("source") or {}
    out["deprecatedFirstTimestamp"] = core.get("firstTimestamp")
    out["deprecatedLastTimestamp"] = core.get("lastTimestamp")
    if core.get("count"):
        out["deprecatedCount"] = core["count"]
    return out


def _get(*path: str) -> Callable[[Obj], str]:
    def read(obj: Obj) -> str:
        value: Any = obj
        for key in path:
            value = (value or {}).get(key) if isinstance(value, dict) else None
        return "" if value is None else str(value)

    return read


_INVOLVED = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
FIELDS: dict[str, Callable[[Obj], str]] = {
    "metadata.name": _get("metadata", "name"),
    "metadata.namespace": _get("metadata", "namespace"),
    **{f"involvedObject.{k}": _get("involvedObject", k) for k in _INVOLVED},
    "reason": _get("reason"),
    "reportingComponent": _get("reportingComponent"),
    "source": _get("source", "component"),
    "type": _get("type"),
}
FIELDS_V1: dict[str, Callable[[Obj], str]] = {
    "metadata.name": FIELDS["metadata.name"],
    "metadata.namespace": FIELDS["metadata.namespace"],
    **{f"regarding.{k}": _get("involvedObject", k) for k in _INVOLVED},
    "reason": FIELDS["reason"],
    "reportingController": FIELDS["reportingComponent"],
    "deprecatedSource": FIELDS["source"],
    "type": FIELDS["type"],
}


def event_cells(ev: Obj, age: Callable[[str | None], str]) -> list[Any]:
    """The event printer's row: Last Seen, Type, Reason, Object, Subobject, Source, Message,
    First Seen, Count, Name (k/k printers.go `printEvent`)."""
    involved = ev.get("involvedObject") or {}
    last = ev.get("lastTimestamp") or ev.get("eventTime")
    first = ev.get("firstTimestamp") or ev.get("eventTime")
    source = ev.get("source") or {}
    origin = source.get("component") or ev.get("reportingComponent") or ""
    if source.get("host"):
        origin += f", {source['host']}"
    return [
        age(last),
        ev.get("type", ""),
        ev.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        origin,
        str(ev.get("message", "")).strip(),
        age(first),
        int(ev.get("count") or 1),
        ev["metadata"]["name"],
    ]
