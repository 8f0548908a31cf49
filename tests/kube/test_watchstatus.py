"""runnerd.kube.watchstatus: a watch pod's end and its app containers' exits,
read from pod statuses as the kubelet fills them (pure)."""

from __future__ import annotations

from typing import Any

from runnerd.kube.podstatus import POD_GONE
from runnerd.kube.watchstatus import container_exit, container_runs, pod_end, pod_ip


def pod(phase: str = "Running", **containers: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "runnerd-abc-000000"},
        "status": {
            "phase": phase,
            "podIP": "10.1.0.7",
            "containerStatuses": [{"name": n, "state": s} for n, s in containers.items()],
        },
    }


RUNNING = {"running": {"startedAt": "x"}}


def test_watchstatus_a_running_pod_has_no_end_and_its_apps_run() -> None:
    live = pod(workspace=RUNNING, **{"app-web": RUNNING})
    assert pod_end(live) is None
    assert container_runs(live, "app-web") and container_exit(live, "app-web") is None
    assert pod_ip(live) == "10.1.0.7"


def test_watchstatus_an_app_container_that_terminated_gives_its_exit_code() -> None:
    one_done = pod(
        workspace=RUNNING, **{"app-web": {"terminated": {"exitCode": 3, "reason": "Error"}}}
    )
    assert pod_end(one_done) is None  # the session stays running
    assert container_exit(one_done, "app-web") == 3
    assert not container_runs(one_done, "app-web")


def test_watchstatus_a_pod_that_reached_its_ttl_ends_the_session_with_its_phase() -> None:
    deadline = pod("Failed", workspace={"terminated": {"exitCode": 137, "reason": "Error"}})
    deadline["status"]["reason"] = "DeadlineExceeded"
    assert pod_end(deadline) == "session pod reached Failed"
    assert pod_end(pod("Succeeded")) == "session pod reached Succeeded"
    assert container_exit(deadline, "app-web") == 137  # no status of its own: killed


def test_watchstatus_a_pod_gone_or_deleted_by_someone_else_is_pod_gone() -> None:
    deleted = pod(workspace=RUNNING)
    deleted["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    assert pod_end(None) == POD_GONE
    assert pod_end(deleted) == POD_GONE
    assert container_exit(None, "app-web") == 137 and not container_runs(None, "app-web")
