"""A watch pod's status, read for its session and its apps. Pure.

Owns what a watch pod's `status` means (the pod's start is `podstatus`'s
`StartWatch` on the `workspace` container, as a run pod's is on `session`):

- `pod_end`: the session's end, if the pod has one: a pod that reached
  `Failed` or `Succeeded` (its TTL, `activeDeadlineSeconds`, included: the
  kubelet ends it `Failed`/`DeadlineExceeded`) is `session pod reached
  <phase>`; one deleted by someone else, or gone, is `podstatus.POD_GONE`.
  runnerd's own delete (a suspend, a reopen, the end) is the caller's to
  tell apart: it is leaving, and reads no end then.
- `workspace_end`: the session's end once its `workspace` container has
  terminated (`the workspace container exited with code N`): nothing serves
  the session's files any more, and it never runs again in this pod.
- `container_exit`: an app's (or the agent's) container has terminated,
  with its exit code: that app's open generation ends with it, and its
  container never runs again in this pod (`restartPolicy: Never`).
- `container_runs`: it runs now (an attach can be made).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runnerd.kube.podstatus import POD_GONE, is_running

Pod = Mapping[str, Any]
ENDED_PHASES = ("Failed", "Succeeded")


def pod_end(pod: Pod | None) -> str | None:
    """Why the session ends with this pod (see the module docstring), or None."""
    if pod is None:
        return POD_GONE
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    if phase in ENDED_PHASES:
        return f"session pod reached {phase}"
    if meta.get("deletionTimestamp"):
        return POD_GONE
    return None


def workspace_end(pod: Pod | None, container: str) -> str | None:
    """Why the session ends once its workspace `container` has terminated
    (a live pod only: a pod gone or ended is `pod_end`'s), or None."""
    if pod is None or pod_end(pod) is not None:
        return None
    code = container_exit(pod, container)
    return None if code is None else f"the workspace container exited with code {code}"


def _container_status(pod: Pod, container: str) -> Mapping[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if isinstance(s, Mapping) and s.get("name") == container), {})


def container_exit(pod: Pod | None, container: str) -> int | None:
    """The exit code of `container` once it has terminated, else None (a pod
    gone or ended without a code for it: 137, as a kill)."""
    if pod is None:
        return 137
    terminated = (_container_status(pod, container).get("state") or {}).get("terminated")
    if isinstance(terminated, Mapping):
        code = terminated.get("exitCode")
        return code if isinstance(code, int) else 137
    if (pod.get("status") or {}).get("phase") in ENDED_PHASES:
        return 137
    return None


def container_runs(pod: Pod | None, container: str) -> bool:
    """Whether `container` runs now in a Running pod."""
    return pod is not None and is_running(pod, container)


def pod_ip(pod: Pod | None) -> str | None:
    """The pod's IP, once it has one."""
    ip = ((pod or {}).get("status") or {}).get("podIP")
    return ip if isinstance(ip, str) and ip else None
