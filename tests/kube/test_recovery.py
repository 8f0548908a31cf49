"""runnerd.kube.recovery: a pod a previous runnerd left, read back into a
session (pure: pods as the podspec builders make them, with a status)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from runnerd.backend import BundleSpec, ImageSpec, Limits, RunSpec, SessionIdentity
from runnerd.contract import PortMapping, exited, failed, running
from runnerd.kube.podspec import (
    build_pod,
    format_created_at,
    parse_created_at,
)
from runnerd.kube.recovery import NEVER_STARTED, left_pods, left_watch_pods, read_left_pod
from runnerd.kube.settings import KubeSettings

SETTINGS = KubeSettings(self_url="http://10.0.0.5:8063")
CREATED = 1_800_000_000.123
IDENTITY = SessionIdentity(
    "abcdefgh2345",
    Limits("500m", "512Mi", "1Gi", 600.0),
    None,
    (PortMapping(port=3000, protocol="tcp"),),
    True,
    CREATED,
)
SPEC = RunSpec(
    IDENTITY,
    RunSpec.create(
        session_id="abcdefgh2345",
        image=ImageSpec("telorun/node:1", "missing"),
        env={"TOKEN": "secret"},
        limits=IDENTITY.limits,
        bundle=BundleSpec("main.telo", (("main.telo", "x"),)),
    ).creation,
)


def left(
    container_state: dict[str, Any] | None, phase: str = "Running", **status: Any
) -> dict[str, Any]:
    pod = build_pod(
        SETTINGS, SPEC, bundle_url="http://x/b?token=t", created_at=format_created_at(CREATED)
    )
    pod["status"] = {"phase": phase, "podIP": "10.1.0.7", **status}
    if container_state is not None:
        pod["status"]["containerStatuses"] = [{"name": "session", "state": container_state}]
    return pod


def test_recovery_a_live_pod_is_the_same_session_running() -> None:
    found = read_left_pod(left({"running": {"startedAt": "x"}}))
    assert not found.delete and found.recovered is not None
    assert found.recovered.identity == IDENTITY  # created_at to the millisecond
    assert found.recovered.status == running()
    assert found.recovered.image == "telorun/node:1"  # listed as before the restart


@pytest.mark.parametrize(
    ("state", "phase", "status"),
    [
        ({"terminated": {"exitCode": 3, "reason": "Error"}}, "Failed", exited(3)),
        ({"terminated": {"exitCode": 0, "reason": "Completed"}}, "Succeeded", exited(0)),
        ({"waiting": {"reason": "ContainerCreating"}}, "Pending", failed(NEVER_STARTED)),
        (None, "Pending", failed(NEVER_STARTED)),
    ],
)
def test_recovery_an_ended_or_never_started_pod_is_reported_and_deleted(
    state: dict[str, Any] | None, phase: str, status: dict[str, Any]
) -> None:
    found = read_left_pod(left(state, phase))
    assert found.delete and found.recovered is not None
    assert found.recovered.status == status


def test_recovery_a_pod_ended_by_its_deadline_fails_with_the_pods_reason() -> None:
    pod = left(
        {"terminated": {"exitCode": 137, "reason": "Error"}},
        "Failed",
        reason="DeadlineExceeded",
        message="Pod was active on the node longer",
    )
    found = read_left_pod(pod)
    assert found.recovered is not None and found.delete
    assert found.recovered.status == failed("DeadlineExceeded: Pod was active on the node longer")


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("metadata/labels/runnerd.telo.run~session-id", None),
        ("metadata/labels/runnerd.telo.run~session-id", "someoneelse1"),
        ("metadata/annotations/runnerd.telo.run~created-at", "soon"),
        ("metadata/annotations/runnerd.telo.run~kind", None),
        ("metadata/annotations/runnerd.telo.run~ports", '[{"port":"x"}]'),
        ("metadata/annotations/runnerd.telo.run~ports", '[{"port":70000,"protocol":"tcp"}]'),
        ("spec/activeDeadlineSeconds", None),
        ("spec/containers/0/resources", None),
    ],
)
def test_recovery_an_unreadable_pod_is_deleted_with_a_reason(path: str, value: Any) -> None:
    pod = left({"running": {}})
    parts = [p.replace("~", "/") for p in path.split("/")]
    garbled = _garble_parts(pod, parts, value)
    found = read_left_pod(garbled)
    assert found.recovered is None and found.delete and found.reason


def _garble_parts(pod: dict[str, Any], parts: list[str], value: Any) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    target: Any = pod
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if value is None:
        del target[parts[-1]]
    else:
        target[parts[-1]] = value
    return pod


def test_recovery_skips_this_processes_pods_and_pods_being_deleted() -> None:
    mine, going, theirs = (left({"running": {}}) for _ in range(3))
    mine["metadata"]["name"] = "runnerd-mine"
    going["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    assert [p.name for p in left_pods([mine, going, theirs], {"runnerd-mine"})] == [
        "runnerd-abcdefgh2345"
    ]


def test_recovery_created_at_round_trips_and_reads_the_older_second_form() -> None:
    assert parse_created_at(format_created_at(CREATED)) == pytest.approx(CREATED, abs=1e-3)
    assert parse_created_at("2026-12-01T00:00:00Z") == 1_796_083_200.0
    assert parse_created_at("yesterday") is None


def watch_pod(name: str = "runnerd-abcdefgh2345-a1b2c3") -> dict[str, Any]:
    """A watch session's pod as a previous process left it (no session container)."""
    return {
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/managed-by": "runnerd",
                "runnerd.telo.run/session-id": "abcdefgh2345",
                "runnerd.telo.run/mode": "watch",
            },
        },
        "spec": {"containers": [{"name": "workspace"}, {"name": "app-web"}]},
        "status": {"phase": "Running"},
    }


def test_recovery_a_watch_pod_is_not_read_as_a_run_session() -> None:
    run_pod = left({"running": {"startedAt": "x"}})
    found = left_pods([watch_pod(), run_pod], ours=())
    assert [p.name for p in found] == ["runnerd-abcdefgh2345"]  # never deleted as unreadable
    ours, gone = watch_pod("runnerd-x-000000"), watch_pod("runnerd-y-000000")
    gone["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    pods = [watch_pod(), ours, gone, run_pod]
    assert left_watch_pods(pods, ours={"runnerd-x-000000"}) == ["runnerd-abcdefgh2345-a1b2c3"]
