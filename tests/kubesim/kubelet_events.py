"""The node's event recorder: the Events a scheduler and a kubelet write while running pods.

What it emits, with the real reasons and messages (k/k `pkg/kubelet/events`,
`kuberuntime_container.go`, `images/image_manager.go`, the scheduler's binder):
Scheduled (the scheduler: new-style, `eventTime` + `action: Binding`), Pulling,
Pulled, Failed / BackOff / ErrImageNeverPull / InspectFailed for image errors,
Created, Started, Failed (start errors), Killing, DeadlineExceeded.

Aggregation as client-go's legacy recorder does it: an event identical to an
earlier one (same object, fieldPath, type, reason, message) bumps `count` and
`lastTimestamp` of the stored event instead of creating another. Events outlive
their pod (no 1 h TTL here: they stay until the store goes).

Recording never raises into the kubelet: a vanished event is simply re-created.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from dataclasses import dataclass
from typing import Any

from .events import build_core_event, build_event_name, build_micro_time
from .store import AlreadyExists, NotFound, Store, build_timestamp

Obj = dict[str, Any]
NORMAL, WARNING = "Normal", "Warning"


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str


def container_path(name: str, *, init: bool) -> str:
    return f"spec.{'initContainers' if init else 'containers'}{{{name}}}"


def pulled_message(image: str, seconds: float) -> str:
    took = go_duration(seconds)
    size = int(hashlib.sha256(image.encode()).hexdigest()[:6], 16) + 1_000_000
    return (
        f'Successfully pulled image "{image}" in {took} ({took} including waiting). '
        f"Image size: {size} bytes."
    )


def go_duration(seconds: float) -> str:
    """time.Duration.String() for durations under a minute."""
    ns = max(1, round(seconds * 1e9))
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.9f}".rstrip("0").rstrip(".") + unit
    return f"{ns}ns"


class EventRecorder:
    """Writes core/v1 Events into the store for one node."""

    def __init__(self, store: Store, node_name: str) -> None:
        self._store = store
        self._node = node_name
        self._seen: dict[tuple[str, ...], str] = {}  # aggregation key → event name
        self._last_ns = 0

    async def pod_event(
        self,
        ref: PodRef,
        type_: str,
        reason: str,
        message: str,
        *,
        field_path: str = "",
    ) -> None:
        """A kubelet event about the pod (or one of its containers, by `field_path`)."""
        key = (ref.namespace, ref.uid, field_path, type_, reason, message)
        name = self._seen.get(key)
        now = build_timestamp()
        if name is not None:

            def bump(ev: Obj) -> None:
                ev["count"] = int(ev.get("count") or 1) + 1
                ev["lastTimestamp"] = now

            try:
                await self._store.update("events", ref.namespace, name, bump)
                return
            except NotFound:
                pass
        event = build_core_event(
            name="",
            namespace=ref.namespace,
            involved=self._involved(ref, field_path),
            reason=reason,
            message=message,
            type_=type_,
            component="kubelet",
            host=self._node,
            first=now,
        )
        self._seen[key] = await self._create(ref, event)

    async def scheduled(self, ref: PodRef) -> None:
        """The scheduler's Scheduled event (events.k8s.io recorder: no source, no count)."""
        event = build_core_event(
            name="",
            namespace=ref.namespace,
            involved=self._involved(ref, ""),
            reason="Scheduled",
            message=f"Successfully assigned {ref.namespace}/{ref.name} to {self._node}",
            type_=NORMAL,
            component="default-scheduler",
            host="",
            first=None,
            event_time=build_micro_time(dt.datetime.now(dt.UTC)),
            action="Binding",
            instance=f"default-scheduler-{self._node}",
        )
        await self._create(ref, event)

    def _involved(self, ref: PodRef, field_path: str) -> Obj:
        pod = self._store.get("pods", ref.namespace, ref.name) or {"metadata": {}}
        involved = {
            "kind": "Pod",
            "namespace": ref.namespace,
            "name": ref.name,
            "uid": ref.uid,
            "apiVersion": "v1",
            "resourceVersion": pod["metadata"].get("resourceVersion", ""),
        }
        if field_path:
            involved["fieldPath"] = field_path
        return involved

    async def _create(self, ref: PodRef, event: Obj) -> str:
        while True:
            stamp = self._last_ns = max(time.time_ns(), self._last_ns + 1)
            name = build_event_name(ref.name, stamp)
            event["metadata"]["name"] = name
            try:
                await self._store.create("events", ref.namespace, event)
                return name
            except AlreadyExists:
                continue
