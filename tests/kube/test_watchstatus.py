"""runnerd.kube.watchstatus: a watch pod's end and its app containers' exits,
read from pod statuses as the kubelet fills them (pure)."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import trio

from runnerd.backend import StartError
from runnerd.kube.podcache import PodSubscription
from runnerd.kube.podstatus import POD_GONE
from runnerd.kube.watchrun import _boot
from runnerd.kube.watchstatus import container_exit, container_runs, pod_end, pod_ip
from runnerd.kube.workspaceapi import ApiLimits, WorkspaceApi


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


class _Said:
    """The boot's progress lines (ProgressReport's `progress`, all `_boot` uses)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def progress(self, phase: str, message: str, done: bool | None = None) -> None:
        self.lines.append(f"{phase}: {message}")


async def test_a_workspace_container_that_exits_at_boot_fails_it_at_once() -> None:
    """Issue 20: the boot waited its whole 60 s for a `/healthz` that a
    terminated container will never answer; now it ends naming the exit."""

    with socket.socket() as spare:  # a port nothing listens on: never healthy
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]
    sub = PodSubscription("p", 0, pod(workspace={"terminated": {"exitCode": 3}}))
    said = _Said()
    async with WorkspaceApi("127.0.0.1", port, "t", limits=ApiLimits(call_timeout_s=2.0)) as api:
        with trio.fail_after(30), pytest.raises(StartError) as caught:  # well under the 60 s
            await _boot(api, sub, said)  # type: ignore[arg-type]
    assert str(caught.value).endswith("the workspace container exited with code 3")
    assert said.lines == ["boot: waiting for the workspace to come up"]
