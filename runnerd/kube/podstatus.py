"""A session pod's status, read for the session. Pure.

Owns the interpretation of `status.phase`, `conditions`, `initContainerStatuses`
and `containerStatuses` (core/v1 `PodStatus`, as the kubelet fills it) as one `Verdict`:

- `Progress`: still starting; a client-facing line with the kubelet's reason
  (scheduled, pulling, delivering the application, creating the container);
- `PodRunning`: the pod is Running and the session container runs;
- `StartFailed`: the start cannot succeed (a permanent cause, or an image pull
  still backing off after the grace);
- `Exited` / `Failed` (the seam's `Outcome`): the pod has ended.

Terminal rules (the same on both backends): a pod someone deleted (it
carries a `deletionTimestamp`) → `failed`, even once its killed container
shows `Error`; a pod-level reason (the deadline,
an eviction) → `failed` with the pod's own reason and message, since the
container did not end on its own (even when the kill later shows as its
`Error` exit); else the
session container terminated `Completed`/`Error` → `exited` with its code,
whatever the phase; else a terminated session container or a Failed/Succeeded
phase → `failed` by `failure_message`; a pod that is gone → `failed`.

No IO, no clock: `StartWatch.observe` takes `now` (seconds, any monotonic origin).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runnerd.backend import Exited, Failed
from runnerd.contract import RunPhase
from runnerd.kube.podspec import SESSION_CONTAINER

Pod = Mapping[str, Any]

MAX_DETAIL_CHARS = 500
POD_GONE = "the session pod was deleted outside runnerd"

# Waiting reasons that never heal on their own: the start fails at once.
PERMANENT_REASONS = frozenset(
    {"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"}
)
# Waiting reasons that may heal (a registry hiccup): fail after the grace.
PULL_BACKOFF_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff"})
# Waiting reasons worth naming in a failure message (the pod ended while these held).
BLOCKING_REASONS = (
    PERMANENT_REASONS
    | PULL_BACKOFF_REASONS
    | frozenset(
        {
            "CreateContainerError",
            "CrashLoopBackOff",
            "RunContainerError",
            "ImageInspectError",
            "PreStartHookError",
            "PostStartHookError",
            "CreatePodSandboxError",
        }
    )
)
# Reasons a runtime gives a container that ended on its own (exit code stands).
ENDED_ON_ITS_OWN = frozenset({"Completed", "Error"})


@dataclass(frozen=True)
class Progress:
    """Still starting. Every pod-side step (a node, the pulls, the bundle
    fetch, the container's creation) is `provision` in the contract's terms."""

    message: str
    phase: RunPhase = "provision"


@dataclass(frozen=True)
class PodRunning:
    pod_ip: str | None


@dataclass(frozen=True)
class StartFailed:
    message: str


Verdict = Progress | PodRunning | StartFailed | Exited | Failed


def _cut(text: str) -> str:
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 1] + "…"


def _status(pod: Pod) -> Mapping[str, Any]:
    status = pod.get("status")
    return status if isinstance(status, Mapping) else {}


def _statuses(pod: Pod, key: str) -> Sequence[Mapping[str, Any]]:
    value = _status(pod).get(key)
    return [s for s in value if isinstance(s, Mapping)] if isinstance(value, list) else []


def _state(container_status: Mapping[str, Any], which: str) -> Mapping[str, Any] | None:
    state = container_status.get("state")
    if not isinstance(state, Mapping):
        return None
    inner = state.get(which)
    return inner if isinstance(inner, Mapping) else None


def _container(pod: Pod, name: str) -> Mapping[str, Any] | None:
    return next((s for s in _statuses(pod, "containerStatuses") if s.get("name") == name), None)


def is_running(pod: Pod, container: str = SESSION_CONTAINER) -> bool:
    """The pod is Running and its `container` runs (not waiting, not ended)."""
    cs = _container(pod, container)
    return (
        _status(pod).get("phase") == "Running"
        and cs is not None
        and _state(cs, "running") is not None
    )


def _condition(pod: Pod, kind: str) -> Mapping[str, Any] | None:
    return next((c for c in _statuses(pod, "conditions") if c.get("type") == kind), None)


def _waiting(pod: Pod) -> list[tuple[str, str, str]]:
    """(container, reason, message) for every waiting container, init containers first."""
    out = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in _statuses(pod, key):
            waiting = _state(cs, "waiting")
            if waiting and isinstance(waiting.get("reason"), str):
                message = str(waiting.get("message", ""))
                out.append((str(cs.get("name")), waiting["reason"], message))
    return out


def _with_message(head: str, message: str) -> str:
    return _cut(f"{head}: {message}" if message else head)


def failure_message(pod: Pod) -> str:
    """Why a pod ended (or cannot start), in the seed's order, cut at 500 chars:
    a failed init container, a terminated container, a blocking waiting reason,
    the pod's message, the pod's reason, else "pod failed"."""
    for cs in _statuses(pod, "initContainerStatuses"):
        term = _state(cs, "terminated")
        if term and term.get("exitCode", 0) != 0:
            head = (
                f"init container {cs.get('name')} failed ({term.get('reason', 'Error')}, "
                f"exit {term.get('exitCode')})"
            )
            return _with_message(head, str(term.get("message", "")))
    for cs in _statuses(pod, "containerStatuses"):
        term = _state(cs, "terminated")
        if term:
            head = (
                f"container {cs.get('name')} terminated ({term.get('reason', 'Unknown')}, "
                f"exit {term.get('exitCode')})"
            )
            return _with_message(head, str(term.get("message", "")))
    for name, reason, message in _waiting(pod):
        if reason in BLOCKING_REASONS:
            return _with_message(f"container {name}: {reason}", message)
    if (pod_message := _pod_message(pod)) is not None:
        return pod_message
    pod_reason = _status(pod).get("reason")
    if isinstance(pod_reason, str) and pod_reason:
        return _cut(pod_reason)
    return "pod failed"


def _pod_message(pod: Pod) -> str | None:
    """`reason: message` (or the message alone) from the pod's status, if it has one."""
    status = _status(pod)
    message, reason = status.get("message"), status.get("reason")
    if not (isinstance(message, str) and message):
        return None
    return _with_message(reason, message) if isinstance(reason, str) and reason else _cut(message)


def terminal_outcome(pod: Pod | None, container: str = SESSION_CONTAINER) -> Exited | Failed | None:
    """The session's terminal outcome if the pod has ended, else None. `pod`
    None means the pod is gone (deleted by someone else, or never seen again)."""
    if pod is None:
        return Failed(POD_GONE)
    outcome = _ended(pod, container)
    meta = pod.get("metadata")
    if outcome is not None and isinstance(meta, Mapping) and meta.get("deletionTimestamp"):
        # Someone deleted the pod (runnerd's own deletes come after the
        # outcome is read): its container was killed, it did not end.
        return Failed(POD_GONE)
    return outcome


def _ended(pod: Pod, container: str) -> Exited | Failed | None:
    status = _status(pod)
    phase = status.get("phase")
    ended = phase in ("Failed", "Succeeded")
    reason = status.get("reason")
    if ended and isinstance(reason, str) and reason:
        # The pod itself was ended (deadline, eviction): that is the cause, even
        # once the kill shows as the container's own `Error` exit.
        return Failed(_pod_message(pod) or _cut(reason))
    cs = _container(pod, container)
    term = _state(cs, "terminated") if cs else None
    if term and term.get("reason") in ENDED_ON_ITS_OWN and isinstance(term.get("exitCode"), int):
        return Exited(term["exitCode"])
    if term or ended:
        return Failed(failure_message(pod))
    return None


def _unschedulable(pod: Pod) -> str | None:
    cond = _condition(pod, "PodScheduled")
    if cond and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
        return _with_message("the pod cannot be scheduled", str(cond.get("message", "")))
    return None


def progress_of(pod: Pod, container: str = SESSION_CONTAINER) -> str:
    """The client-facing line for a pod that is still starting."""
    status = _status(pod)
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    if not (isinstance(spec, Mapping) and spec.get("nodeName")):
        return "waiting for a node"
    for init in _statuses(pod, "initContainerStatuses"):
        if _state(init, "running"):
            return "delivering the application"
        waiting = _state(init, "waiting")
        if waiting:
            return f"pulling the init image ({waiting.get('reason', 'Waiting')})"
    cs = _container(pod, container)
    session_waiting = _state(cs, "waiting") if cs else None
    if session_waiting:
        reason = str(session_waiting.get("reason", "Waiting"))
        if reason in PULL_BACKOFF_REASONS:
            return f"pulling the image ({reason})"
        return f"creating the container ({reason})"
    if status.get("phase") == "Pending" and not cs:
        return f"scheduled on {spec.get('nodeName')}"
    return "starting the container"


class StartWatch:
    """Follows one pod through its start. Holds the one piece of state a
    single pod object cannot carry: since when an image pull has been backing
    off (so a back-off fails the start only after `pull_backoff_grace_s`)."""

    def __init__(self, pull_backoff_grace_s: float, container: str = SESSION_CONTAINER) -> None:
        self._grace_s = pull_backoff_grace_s
        self._container = container
        self._backoff_since: float | None = None

    def observe(self, pod: Pod | None, now: float) -> Verdict:
        """The verdict for the pod's latest state, seen at `now`."""
        outcome = terminal_outcome(pod, self._container)
        if outcome is not None or pod is None:
            return outcome if outcome is not None else Failed(POD_GONE)
        if is_running(pod, self._container):
            ip = _status(pod).get("podIP")
            return PodRunning(ip if isinstance(ip, str) and ip else None)
        if (unschedulable := _unschedulable(pod)) is not None:
            return StartFailed(unschedulable)
        waiting = _waiting(pod)
        for name, reason, message in waiting:
            if reason in PERMANENT_REASONS:
                return StartFailed(_with_message(f"container {name}: {reason}", message))
        backoff = next((w for w in waiting if w[1] in PULL_BACKOFF_REASONS), None)
        if backoff is None:
            self._backoff_since = None
        else:
            if self._backoff_since is None:
                self._backoff_since = now
            if now - self._backoff_since >= self._grace_s:
                name, reason, message = backoff
                return StartFailed(_with_message(f"container {name}: {reason}", message))
        return Progress(progress_of(pod, self._container))
