"""runnerd.kube.podstatus: pod cases (JSON fixtures) → progress, running,
permanent failures, pull back-off after the grace, terminal outcomes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runnerd.backend import Exited, Failed
from runnerd.kube.podstatus import (
    MAX_DETAIL_CHARS,
    POD_GONE,
    PodRunning,
    Progress,
    StartFailed,
    StartWatch,
    Verdict,
    failure_message,
    terminal_outcome,
)

CASES: dict[str, Any] = json.loads((Path(__file__).parent / "fixtures" / "pods.json").read_text())


def as_json(verdict: Verdict) -> dict[str, Any]:
    if isinstance(verdict, Progress):
        return {"kind": "progress", "message": verdict.message}
    if isinstance(verdict, PodRunning):
        return {"kind": "running", "pod_ip": verdict.pod_ip}
    if isinstance(verdict, StartFailed):
        return {"kind": "start_failed", "message": verdict.message}
    if isinstance(verdict, Exited):
        return {"kind": "exited", "code": verdict.code}
    return {"kind": "failed", "message": verdict.message}


@pytest.mark.parametrize("name", sorted(CASES))
def test_start_watch_verdict_per_pod_case(name: str) -> None:
    case = CASES[name]
    assert as_json(StartWatch(30.0).observe(case["pod"], now=0.0)) == case["verdict"]


def test_start_watch_fails_a_pull_backoff_only_after_the_grace() -> None:
    pod = CASES["pull_backoff"]["pod"]
    watch = StartWatch(pull_backoff_grace_s=10.0)
    assert isinstance(watch.observe(pod, now=100.0), Progress)
    assert isinstance(watch.observe(pod, now=109.9), Progress)
    failed = watch.observe(pod, now=110.0)
    assert failed == StartFailed(
        'container session: ImagePullBackOff: Back-off pulling image "acme/nope:1": '
        "ErrImagePull: not found"
    )


def test_start_watch_backoff_clock_restarts_once_the_pull_recovers() -> None:
    backoff, creating = CASES["pull_backoff"]["pod"], CASES["creating"]["pod"]
    watch = StartWatch(pull_backoff_grace_s=10.0)
    watch.observe(backoff, now=0.0)
    watch.observe(creating, now=8.0)  # the pull went through; a later back-off starts afresh
    assert isinstance(watch.observe(backoff, now=12.0), Progress)
    assert isinstance(watch.observe(backoff, now=22.0), StartFailed)


def test_terminal_outcome_is_none_while_the_pod_runs_and_failed_once_gone() -> None:
    assert terminal_outcome(CASES["running"]["pod"]) is None
    assert terminal_outcome(CASES["creating"]["pod"]) is None
    assert terminal_outcome(None) == Failed(POD_GONE)
    assert StartWatch(1.0).observe(None, now=0.0) == Failed(POD_GONE)


def test_failure_message_is_cut_at_500_characters() -> None:
    pod = {"status": {"phase": "Failed", "reason": "Evicted", "message": "x" * 2000}}
    message = failure_message(pod)
    assert len(message) == MAX_DETAIL_CHARS
    assert message.startswith("Evicted: xxx")


def test_failure_message_puts_init_containers_first() -> None:
    pod = json.loads(json.dumps(CASES["init_failed"]["pod"]))
    pod["status"]["reason"] = "SomethingElse"
    pod["status"]["containerStatuses"] = [
        {"name": "session", "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}
    ]
    assert failure_message(pod).startswith("init container body-fetch failed (Error, exit 1)")


def test_other_containers_do_not_decide_the_session_outcome() -> None:
    pod = {
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "sidecar",
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
                },
                {"name": "session", "state": {"running": {}}},
            ],
        }
    }
    assert terminal_outcome(pod) is None


def test_a_pod_someone_deleted_is_failed_even_when_its_kill_shows_as_an_exit() -> None:
    killed = {
        "metadata": {"name": "runnerd-x", "deletionTimestamp": "2026-01-01T00:00:30Z"},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "session", "state": {"terminated": {"exitCode": 143, "reason": "Error"}}}
            ],
        },
    }
    assert terminal_outcome(killed) == Failed(POD_GONE)
    # Being deleted but still running: not ended yet.
    killed["status"]["containerStatuses"][0]["state"] = {"running": {}}
    assert terminal_outcome(killed) is None
