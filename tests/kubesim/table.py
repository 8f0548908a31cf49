"""Server-side printing: `meta.k8s.io/v1` Table answers, for kubectl's human output. Pure.

kubectl asks for `application/json;as=Table;v=v1;g=meta.k8s.io` when it prints
columns. Pods get the real pod printer's columns and STATUS logic (k/k
`pkg/printers/internalversion/printers.go` `printPod`, simplified), events the
event printer's, configmaps `printConfigMap`'s (NAME DATA AGE); other kinds get the
default convertor's Name / Created At.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from tests.kubesim import configmaps
from tests.kubesim.events import event_cells

Obj = dict[str, Any]

_POD_COLUMNS = [
    ("Name", "name", 0),
    ("Ready", "", 0),
    ("Status", "", 0),
    ("Restarts", "", 0),
    ("Age", "", 0),
    ("IP", "", 1),
    ("Node", "", 1),
]
_DEFAULT_COLUMNS = [("Name", "name", 0), ("Created At", "date", 0)]
_EVENT_COLUMNS = [
    ("Last Seen", "", 0),
    ("Type", "", 0),
    ("Reason", "", 0),
    ("Object", "", 0),
    ("Subobject", "", 1),
    ("Source", "", 1),
    ("Message", "", 0),
    ("First Seen", "", 1),
    ("Count", "", 1),
    ("Name", "name", 1),
]


def wants_table(accept: str) -> bool:
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in accept.split(","))


def build_table(kind: str, list_obj: Obj, now: dt.datetime) -> Obj:
    columns = {
        "Pod": _POD_COLUMNS,
        "Event": _EVENT_COLUMNS,
        "ConfigMap": configmaps.COLUMNS,
    }.get(kind, _DEFAULT_COLUMNS)
    rows = [
        {
            "cells": _cells(kind, item, now),
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": item["metadata"],
            },
        }
        for item in list_obj["items"]
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {k: v for k, v in list_obj["metadata"].items() if k != "remainingItemCount"},
        "columnDefinitions": [
            {"name": n, "type": "string", "format": f, "description": "", "priority": p}
            for n, f, p in columns
        ],
        "rows": rows,
    }


def _cells(kind: str, obj: Obj, now: dt.datetime) -> list[Any]:
    if kind == "Pod":
        return _pod_cells(obj, now)
    if kind == "Event":
        return event_cells(obj, lambda ts: human_age(ts, now))
    if kind == "ConfigMap":
        return configmaps.build_cells(obj, lambda ts: human_age(ts, now))
    return _default_cells(obj)


def _default_cells(obj: Obj) -> list[Any]:
    return [obj["metadata"]["name"], obj["metadata"].get("creationTimestamp", "")]


def _pod_cells(pod: Obj, now: dt.datetime) -> list[Any]:
    spec, st = pod.get("spec", {}), pod.get("status", {})
    statuses = st.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(spec.get('containers', []))}",
        build_pod_status(pod),
        str(restarts),
        human_age(pod["metadata"].get("creationTimestamp"), now),
        st.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
    ]


def build_pod_status(pod: Obj) -> str:
    """The STATUS column: reason or phase, refined by init and container states."""
    st = pod.get("status", {})
    reason = st.get("reason") or st.get("phase") or "Unknown"
    inits = st.get("initContainerStatuses") or []
    n_inits = len(pod.get("spec", {}).get("initContainers") or [])
    initializing = False
    for i, c in enumerate(inits):
        state = c.get("state", {})
        term, wait = state.get("terminated"), state.get("waiting")
        if term and term.get("exitCode") == 0:
            continue
        initializing = True
        if term:
            reason = "Init:" + (term.get("reason") or f"ExitCode:{term.get('exitCode')}")
        elif wait and wait.get("reason") and wait["reason"] != "PodInitializing":
            reason = "Init:" + wait["reason"]
        else:
            reason = f"Init:{i}/{n_inits}"
        break
    if not initializing:
        reason = _containers_reason(st, reason)
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return str(reason)


def _containers_reason(st: Obj, reason: str) -> str:
    """printPod's loop over the containers (last first); a pod with one Completed and one
    still running reads Running when Ready, else NotReady."""
    running = False
    for c in reversed(st.get("containerStatuses") or []):
        state = c.get("state", {})
        if (wait := state.get("waiting")) and wait.get("reason"):
            reason = wait["reason"]
        elif (term := state.get("terminated")) is not None:
            reason = term.get("reason") or f"ExitCode:{term.get('exitCode')}"
        elif c.get("ready") and "running" in state:
            running = True
    if reason == "Completed" and running:
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in st.get("conditions") or []
        )
        reason = "Running" if ready else "NotReady"
    return str(reason)


def human_age(timestamp: str | None, now: dt.datetime) -> str:
    """apimachinery duration.HumanDuration, to the precision kubectl shows."""
    if not timestamp:
        return "<unknown>"
    then = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))  # Time or MicroTime
    s = max(0, int((now - then).total_seconds()))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    return f"{h // 24}d"


def build_row_table(kind: str) -> Callable[[Obj], Obj]:
    """For watch events: each object becomes a one-row Table; columns only in the first."""
    first = True

    def convert(obj: Obj) -> Obj:
        nonlocal first
        meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
        doc = build_table(kind, {"metadata": meta, "items": [obj]}, dt.datetime.now(dt.UTC))
        if not first:
            doc["columnDefinitions"] = None
        first = False
        return doc

    return convert
