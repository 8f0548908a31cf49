"""The watch-session additions to the wire types (`runnerd.contract`), each
built by its constructor and validated against the OpenAPI document's own
schema for it (jsonschema, 2020-12), and the rules a client relies on:
`suspended` is not terminal, a run session's events keep their form."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from runnerd.contract import (
    RunEvent,
    RunStartedEvent,
    RunStatus,
    debug_event,
    endpoints_event,
    is_terminal,
    progress_event,
    reachability_event,
    route_event,
    running,
    status_event,
    stopped,
    suspended,
)
from runnerd.http.openapi import build_openapi
from runnerd.watch.runs import AppRuns

DOC = build_openapi("0")


def _errors(instance: Any, name: str) -> list[str]:
    root = {**DOC, "$ref": f"#/components/schemas/{name}"}
    return [e.message for e in jsonschema.Draft202012Validator(root).iter_errors(instance)]


def _run_events() -> list[RunEvent]:
    runs = AppRuns("web")
    started = runs.start("initial", 0.0)
    started_with_version: RunStartedEvent = {**started, "telo": "0.80.0"}
    completed = runs.complete(3, 1.5)
    assert completed is not None
    failed_pair = runs.start_failed("watch", "ERR_MANIFEST_VALIDATION_FAILED", 2.0)
    return [started, started_with_version, completed, *failed_pair]


WATCH_EVENTS: list[RunEvent] = [
    *_run_events(),
    endpoints_event("web"),
    endpoints_event(
        "web",
        added=[{"host": "", "port": 8080, "protocol": "tcp"}],
        removed=[{"host": "", "port": 3000, "protocol": "tcp", "url": "http://x"}],
        rejected=[{"port": 9000, "reason": "another app in this session declares tcp 9000"}],
    ),
    route_event("3000-abc.example", 3000, "programmed", app="web"),
    route_event("3000-abc.example", 3000, "unprogrammed", reason="no gateway"),
    progress_event("boot", "starting web", app="web"),
    progress_event("provision", "seeding the workspace"),
    debug_event({"kind": "event", "event": "Kernel.Started"}, app="web"),
    reachability_event(3000, "reachable", app="web"),
    status_event(suspended()),
    status_event(running(agent={"host": "", "port": 7000, "protocol": "tcp", "token": "t" * 32})),
]


@pytest.mark.parametrize("event", WATCH_EVENTS, ids=lambda e: f"{e['type']}")
def test_watch_events_match_their_openapi_schema(event: RunEvent) -> None:
    assert _errors(event, "RunEvent") == []
    assert _errors(event, "SseData") == []


def test_watch_events_wrong_shapes_are_refused_by_the_schema() -> None:
    assert _errors({"type": "run", "app": "web", "generation": 1, "phase": "started"}, "RunEvent")
    assert _errors({"type": "route", "host": "h", "port": 1, "state": "up"}, "RunEvent")
    assert _errors({"kind": "sleeping"}, "RunStatus")


def test_watch_suspended_is_not_terminal_and_the_terminal_kinds_are() -> None:
    assert not is_terminal(suspended())
    terminal: list[RunStatus] = [stopped(), {"kind": "exited", "code": 0}]
    assert all(is_terminal(s) for s in terminal)


def test_watch_run_session_events_keep_their_form_without_app() -> None:
    assert progress_event("boot", "x") == {"type": "progress", "phase": "boot", "message": "x"}
    assert reachability_event(80, "checking") == {
        "type": "reachability",
        "port": 80,
        "state": "checking",
    }
    assert debug_event({"a": 1}) == {"type": "debug", "frame": {"a": 1}}
    assert running() == {"kind": "running"}


def test_watch_endpoints_event_omits_empty_lists() -> None:
    assert endpoints_event("web", added=[], removed=[], rejected=[]) == {
        "type": "endpoints",
        "app": "web",
    }


def test_watch_io_text_frames_match_their_schema() -> None:
    frames: list[dict[str, Any]] = [
        {"type": "seq", "seq": 0},
        {"type": "seq", "seq": 4, "app": "web", "io": "streams"},
        {"type": "gap", "reason": "output_lost"},
        {"type": "error", "error": "resize_unsupported", "io": "streams"},
    ]
    for frame in frames:
        assert _errors(frame, "IoTextFrame") == [], frame
