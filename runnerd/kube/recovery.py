"""Adopting the session pods a previous runnerd process left (`on_restart = "adopt"`).

Owns the reading of a left pod back into a session (`read_left_pod`, pure)
and `recover_pods`, the backend's `recover()`: once the shared informer has
listed the namespace, every managed pod this process did not create (and
nobody is deleting) is one of:

- live (the session container runs) → `Recovered(identity, running)`: the
  manager adopts it and `KubeBackend.run` re-attaches (creation None);
- ended (podstatus's terminal outcome) → `Recovered` with `exited <code>` or
  `failed <message>`, and the pod deleted: the session stays for replay;
- still starting → `failed`, and deleted: its bundle token died with the
  process that staged it, so it can never finish starting;
- unreadable (no session label, annotations missing or garbled, no limits)
  → deleted, logged: nothing could be rebuilt from it.

Watch pods (`watchpod.is_watch_pod`: the mode label; no session container, a name
fresh on every recreate) are none of these: `left_pods` passes over them
and `left_watch_pods` names them, for the watch adoption (`adopt_watch`)
to claim and the sweep to delete when nobody did (`KubeBackend.recover`).

The identity comes from the pod alone (podspec's labels and annotations,
the session container's limits, `activeDeadlineSeconds` as the TTL): never
env, which stays out of the pod's metadata. `created_at` is the original
one, so the TTL stays a deadline from the session's creation.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import trio

import runnerd.kube.errors as errors
from runnerd.backend import Exited, Limits, Recovered, SessionIdentity
from runnerd.contract import PortMapping, RunStatus, exited, failed, running
from runnerd.kube.client import KubeClient
from runnerd.kube.podspec import (
    SESSION_CONTAINER,
    SESSION_LABEL,
    parse_annotations,
    parse_created_at,
    pod_name,
)
from runnerd.kube.podstatus import is_running, terminal_outcome
from runnerd.kube.watchpod import is_watch_pod

log = logging.getLogger(__name__)

NEVER_STARTED = (
    "provision: runnerd restarted before the session pod was running (its"
    " bundle download went with the old process); start the session again"
)
# Each delete of a left pod is bounded: recovery must end even on a slow apiserver.
DELETE_WAIT_S = 5.0


@dataclass(frozen=True)
class LeftPod:
    """What a left pod is: `recovered` (None: unreadable, `reason` says why)
    and whether it must be deleted (ended, never started, or unreadable)."""

    name: str
    recovered: Recovered | None
    delete: bool
    reason: str = ""


def _identity(pod: Mapping[str, Any]) -> SessionIdentity | str:
    """The session's identity, or why it cannot be read."""
    meta = pod.get("metadata") or {}
    name = str(meta.get("name", ""))
    session_id = (meta.get("labels") or {}).get(SESSION_LABEL)
    if not isinstance(session_id, str) or pod_name(session_id) != name:
        return "no session id label matching its name"
    notes = parse_annotations(pod)
    created_at = parse_created_at(notes["created_at"] or "")
    if created_at is None or notes["kind"] not in ("bundle", "app"):
        return "missing or garbled created-at / kind annotations"
    if notes["kind"] == "app" and not notes["app"]:
        return "an app pod without its app annotation"
    try:
        ports = tuple(
            PortMapping(port=int(p["port"]), protocol=cast(Literal["tcp", "udp"], p["protocol"]))
            for p in notes["ports"]
        )
    except (KeyError, TypeError, ValueError):
        return "garbled ports annotation"
    if any(p.protocol not in ("tcp", "udp") or not 0 < p.port < 65536 for p in ports):
        return "garbled ports annotation"
    limits = _limits(pod)
    if limits is None:
        return "no session container limits or deadline"
    app = notes["app"] if notes["kind"] == "app" else None
    return SessionIdentity(session_id, limits, app, ports, bool(notes["inspect"]), created_at)


def _limits(pod: Mapping[str, Any]) -> Limits | None:
    spec = pod.get("spec") or {}
    deadline = spec.get("activeDeadlineSeconds")
    limits = (_session_container(pod).get("resources") or {}).get("limits") or {}
    values = [limits.get(k) for k in ("cpu", "memory", "ephemeral-storage")]
    if not (
        isinstance(deadline, int) and deadline > 0 and all(isinstance(v, str) and v for v in values)
    ):
        return None
    return Limits(str(values[0]), str(values[1]), str(values[2]), float(deadline))


def _status(pod: Mapping[str, Any]) -> tuple[RunStatus, bool]:
    """The session's status now, and whether the pod is to be deleted."""
    outcome = terminal_outcome(pod)
    if isinstance(outcome, Exited):
        return exited(outcome.code), True
    if outcome is not None:
        return failed(outcome.message), True
    if is_running(pod):
        return running(), False
    return failed(NEVER_STARTED), True


def read_left_pod(pod: Mapping[str, Any]) -> LeftPod:
    """What a pod a previous process left is, and what to do with it."""
    name = str((pod.get("metadata") or {}).get("name", ""))
    identity = _identity(pod)
    if isinstance(identity, str):
        return LeftPod(name, None, delete=True, reason=identity)
    status, delete = _status(pod)
    image = None if identity.app is not None else _session_image(pod)
    return LeftPod(name, Recovered(identity, status, image), delete)


def _session_image(pod: Mapping[str, Any]) -> str | None:
    """The session container's image: what the client asked for."""
    image = _session_container(pod).get("image")
    return image if isinstance(image, str) and image else None


def _session_container(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The session container's spec (empty when the pod has none)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return next(
        (c for c in containers if isinstance(c, Mapping) and c.get("name") == SESSION_CONTAINER), {}
    )


STOPPED = "its session was stopped by the previous run, which could not delete it"


def left_watch_pods(pods: Iterable[Mapping[str, Any]], ours: Collection[str]) -> list[str]:
    """The watch pods not in `ours` and not being deleted: a previous
    process's, for the watch adoption (or the sweep)."""
    return [
        name
        for pod in pods
        if is_watch_pod(pod)
        and (name := str((pod.get("metadata") or {}).get("name", ""))) not in ours
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
    ]


def left_pods(
    pods: Iterable[Mapping[str, Any]], ours: Collection[str], stopped: Collection[str] = ()
) -> list[LeftPod]:
    """Every run pod not in `ours` (this process's own) and not being
    deleted; those in `stopped` (the previous run stopped their sessions) to
    delete. Watch pods are not run sessions: never among them."""
    left: list[LeftPod] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = str(meta.get("name", ""))
        if name in ours or meta.get("deletionTimestamp") or is_watch_pod(pod):
            continue
        left.append(
            LeftPod(name, None, delete=True, reason=STOPPED)
            if name in stopped
            else read_left_pod(pod)
        )
    return left


async def recover_pods(client: KubeClient, pods: list[LeftPod]) -> list[Recovered]:
    """Delete the pods that are done with (concurrently, each bounded), log
    the unreadable ones, and return the sessions to adopt (live and ended)."""
    for pod in pods:
        if pod.recovered is None:
            log.warning("deleting pod %s left by a previous run: %s", pod.name, pod.reason)
    async with trio.open_nursery() as nursery:
        for pod in pods:
            if pod.delete:
                nursery.start_soon(_delete, client, pod.name)
    found = [p.recovered for p in pods if p.recovered is not None]
    live = sum(1 for r in found if r.status["kind"] == "running")
    log.info("recovered %d session pods (%d live) left by a previous run", len(found), live)
    return found


async def _delete(client: KubeClient, name: str) -> None:
    with trio.move_on_after(DELETE_WAIT_S):
        await delete_stale(client, name, "a pod left by a previous run")


async def delete_stale(client: KubeClient, name: str, whose: str) -> bool:
    """Delete a pod no session owns, at once (no grace); False, logged with
    the apiserver's error, when that failed."""
    try:
        await client.delete_pod(name, operation=f"could not delete {whose}", grace_period_s=0)
    except errors.KubeError as exc:
        log.warning("could not delete pod %s (%s): %r", name, whose, exc.__cause__ or exc)
        return False
    return True
