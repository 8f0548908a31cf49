"""Admission of the watch fields while watch sessions are not built: `mode`
and `io` outside their enums are schema errors (check 1), `mode: "watch"`
with `app` is check 4, `watch_disabled` is check 7 (after the image, before
capacity), and `agent` on a run session is check 8."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from runnerd.config import WatchConfig
from runnerd.contract import RequestError, StartSessionRequest, parse_body
from tests.session.test_admission import CONFIG, SID, admit, app_body, bundle_body, refused

APPS = [{"name": "web", "entryRelativePath": "main.sh"}]


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"mode": "live"}, "body.mode must be one of 'run' or 'watch'"),
        ({"mode": 1}, "body.mode must be a string"),
        ({"mode": "watch", "apps": []}, "body.apps must not be empty"),
        (
            {"apps": [{"name": "w" * 64, "entryRelativePath": "a"}]},
            "body.apps[0].name must be at most 63 characters",
        ),
        (
            {"apps": [{"name": "web", "entryRelativePath": "a", "io": "pty"}]},
            "body.apps[0].io must be one of 'tty' or 'streams'",
        ),
        ({"apps": [{"name": "web"}]}, "body.apps[0].entryRelativePath is required"),
        ({"agent": 5}, "body.agent must be a string"),
    ],
)
def test_admission_watch_fields_outside_their_schema_are_invalid_request(
    over: dict[str, Any], message: str
) -> None:
    with pytest.raises(RequestError) as info:
        bundle_body(**over)
    assert (info.value.code, info.value.message) == ("invalid_request", message)


def test_admission_watch_mode_is_refused_while_watch_is_off() -> None:
    err = refused(bundle_body(mode="watch", apps=APPS))
    assert (err.status, err.code) == (400, "watch_disabled")
    assert "mode 'run'" in err.message


def test_admission_watch_mode_is_refused_even_when_a_config_in_code_enables_it() -> None:
    # The file cannot enable it (config refuses); a Config built in code that
    # does must still not have a watch request run as a run session.
    enabled = dataclasses.replace(CONFIG, watch=WatchConfig(enabled=True))
    assert refused(bundle_body(mode="watch"), enabled).code == "watch_disabled"


def test_admission_run_mode_given_explicitly_is_a_run_session() -> None:
    spec = admit(bundle_body(mode="run", apps=APPS), CONFIG, accepted_terms=None, session_id=SID)
    assert spec.bundle is not None and spec.bundle.entry == "main.sh"


def test_admission_watch_with_app_is_invalid_request() -> None:
    err = refused(app_body(app="status", mode="watch"))
    assert (err.status, err.code) == (400, "invalid_request")
    assert "body.app" in err.message


def test_admission_agent_without_watch_is_refused() -> None:
    for body in (bundle_body(agent="helper"), app_body(app="status", agent="helper")):
        err = refused(body)
        assert (err.status, err.code) == (400, "agent_requires_watch")
        assert "mode 'watch'" in err.message


@pytest.mark.parametrize(
    ("over", "code"),
    [
        # 3 unknown app before 4 (watch with app).
        ({"app": "nope", "mode": "watch"}, "unknown_app"),
        # 4 bundle/config missing before 7.
        ({"mode": "watch", "config": None}, "invalid_request"),
        # 5 paths before 7.
        ({"mode": "watch", "bundle": {"entryRelativePath": "../x", "files": []}}, "invalid_bundle"),
        # 6 image before 7.
        ({"mode": "watch", "config": {"image": "evil", "pullPolicy": "missing"}}, "invalid_config"),
        # 7 before 8.
        ({"mode": "watch", "agent": "nope"}, "watch_disabled"),
        # 6 before 8 on a run session.
        ({"agent": "x", "config": {"image": "evil", "pullPolicy": "missing"}}, "invalid_config"),
    ],
)
def test_admission_watch_checks_keep_the_contracts_order(over: dict[str, Any], code: str) -> None:
    assert refused(bundle_body(**over)).code == code


def test_admission_request_fields_default_to_a_run_session() -> None:
    body = parse_body(StartSessionRequest, b'{"env": {}}')
    assert (body.mode, body.apps, body.agent) == ("run", None, None)
