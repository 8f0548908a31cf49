"""The Table printer's STATUS and AGE columns, as kubectl users read them (pure)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.kubesim.table import build_pod_status, build_table, human_age, wants_table


def pod(status: dict[str, Any], *, inits: int = 0, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    spec = {"containers": [{"name": "app"}], "initContainers": [{"name": "i"}] * inits}
    return {"metadata": meta, "spec": spec, "status": status}


@pytest.mark.parametrize(
    ("status", "inits", "expected"),
    [
        ({"phase": "Pending"}, 0, "Pending"),
        ({"phase": "Failed", "reason": "DeadlineExceeded"}, 0, "DeadlineExceeded"),
        (
            {
                "phase": "Pending",
                "containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff"}}}],
            },
            0,
            "ImagePullBackOff",
        ),
        (
            {
                "phase": "Pending",
                "initContainerStatuses": [{"state": {"running": {}}}],
            },
            1,
            "Init:0/1",
        ),
        (
            {
                "phase": "Pending",
                "initContainerStatuses": [
                    {"state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
                ],
            },
            1,
            "Init:Error",
        ),
        (
            {
                "phase": "Succeeded",
                "containerStatuses": [
                    {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
                ],
            },
            0,
            "Completed",
        ),
    ],
)
def test_pod_status_column(status: dict[str, Any], inits: int, expected: str) -> None:
    assert build_pod_status(pod(status, inits=inits)) == expected


def test_terminating_wins() -> None:
    assert build_pod_status(pod({"phase": "Running"}, deleting=True)) == "Terminating"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (5, "5s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (50 * 3600, "2d"),
    ],
)
def test_age_column(seconds: int, shown: str) -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)
    assert human_age("2026-01-01T00:00:00Z", now) == shown


def test_table_shape() -> None:
    listing = {"metadata": {"resourceVersion": "7"}, "items": [pod({"phase": "Pending"})]}
    doc = build_table("Pod", listing, dt.datetime(2026, 1, 1, 0, 0, 3, tzinfo=dt.UTC))
    assert doc["kind"] == "Table" and doc["metadata"] == {"resourceVersion": "7"}
    assert [c["name"] for c in doc["columnDefinitions"] if c["priority"] == 0] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    assert doc["rows"][0]["cells"][:5] == ["p", "0/1", "Pending", "0", "3s"]
    assert doc["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert wants_table("application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
    assert not wants_table("application/json")
