"""Admission of watch sessions with watch on (the local backend's io): the
contract's checks 7 to 10 in order, each with its own answer, and the
`WatchSessionSpec` a passing body becomes (the app tier with
`watch.max_ttl_seconds`, inspect on, no client `TELO_CACHE_DIR`, the agent's
catalog env plus a fresh token under `token_env`)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

import runnerd.local
from runnerd.backend import ImageSpec, Limits
from runnerd.config import AppEntry, Config, WatchConfig
from runnerd.contract import StartSessionRequest
from runnerd.session import admission
from runnerd.session.admission import AdmissionError, new_agent_token
from runnerd.session.watchspec import WatchSessionSpec
from runnerd.watch.apps import AppSpec
from tests.session.test_admission import CONFIG, SID, app_body, bundle_body

WATCH_IO = runnerd.local.WATCH_IO
AGENTS = {
    "helper": AppEntry(
        name="helper", image="svc", env={"KEY": "op-secret"}, port=7070, token_env="HELPER_TOKEN"
    ),
    "quiet": AppEntry(name="quiet", image="svc", port=7071),
    "portless": AppEntry(name="portless", image="svc"),
}
ON = dataclasses.replace(
    CONFIG,
    watch=WatchConfig(enabled=True, max_sessions=2, max_ttl_seconds=900),
    apps={**CONFIG.apps, **AGENTS},
)


def admit_watch(
    body: StartSessionRequest, config: Config = ON, *, watch_live: int = 0, io: Any = WATCH_IO
) -> WatchSessionSpec:
    spec = admission.admit(
        body,
        config,
        accepted_terms=None,
        session_id=SID,
        offered=runnerd.local.offered_images(config),
        watch_io=io,
        watch_live=watch_live,
    )
    assert isinstance(spec, WatchSessionSpec)
    return spec


def refused(body: StartSessionRequest, config: Config = ON, **kw: Any) -> AdmissionError:
    with pytest.raises(AdmissionError) as info:
        admit_watch(body, config, **kw)
    return info.value


def watch_body(**over: Any) -> StartSessionRequest:
    return bundle_body(mode="watch", **over)


def test_admission_watch_spec_is_the_app_tier_with_the_watch_ttl_and_inspect_on() -> None:
    spec = admit_watch(watch_body(inspect=False, env={"A": "1", "TELO_CACHE_DIR": "/tmp/x"}))
    identity = spec.watch.identity
    assert identity.session_id == SID and spec.session_id == SID
    assert identity.limits == Limits(cpu="1", memory="1Gi", ephemeral_storage="1Gi", ttl_s=900)
    assert identity.inspect is True
    assert spec.watch.checkpoint is None
    creation = spec.watch.creation
    assert creation.image == ImageSpec("sh", "missing")
    assert dict(creation.env) == {"A": "1"}  # TELO_CACHE_DIR dropped
    assert creation.bundle is not None and creation.bundle.entry == "main.sh"
    assert spec.agent is None and spec.agent_token is None


def test_admission_watch_apps_omitted_is_one_app_on_the_entry_with_the_top_level_ports() -> None:
    spec = admit_watch(watch_body(ports=[{"port": 3000, "protocol": "tcp"}]))
    assert [(a.name, a.entry, a.io) for a in spec.apps] == [("app", "main.sh", "tty")]
    assert [(p.port, p.protocol) for p in spec.apps[0].ports] == [(3000, "tcp")]


def test_admission_watch_apps_given_in_order_top_level_ports_ignored() -> None:
    apps = [
        {"name": "web", "entryRelativePath": "./web.sh", "io": "streams",
         "ports": [{"port": 8080, "protocol": "tcp"}]},
        {"name": "worker", "entryRelativePath": "w.sh"},
    ]  # fmt: skip
    spec = admit_watch(watch_body(apps=apps, ports=[{"port": 3000, "protocol": "tcp"}]))
    assert [(a.name, a.entry, a.io) for a in spec.apps] == [
        ("web", "web.sh", "streams"),
        ("worker", "w.sh", "tty"),
    ]
    assert spec.apps[1] == AppSpec(name="worker", entry="w.sh")


def test_admission_watch_agent_gets_its_catalog_env_and_a_fresh_token() -> None:
    first = admit_watch(watch_body(agent="helper"))
    second = admit_watch(watch_body(agent="helper"))
    assert first.agent is not None and first.agent_token is not None
    assert first.agent.name == "helper" and first.agent.port == 7070
    assert first.agent.image == ImageSpec("svc", "missing")
    assert dict(first.agent.env) == {"KEY": "op-secret", "HELPER_TOKEN": first.agent_token}
    assert re.fullmatch(r"[a-z2-7]{32}", first.agent_token)
    assert first.agent_token != second.agent_token
    # Secrets stay out of repr (a logged spec must not carry them).
    assert "op-secret" not in repr(first) and first.agent_token not in repr(first)


def test_admission_watch_agent_without_token_env_has_no_token() -> None:
    spec = admit_watch(watch_body(agent="quiet"))
    assert spec.agent is not None and dict(spec.agent.env) == {}
    assert spec.agent_token is None


def test_admission_agent_tokens_are_32_base32_chars() -> None:
    tokens = {new_agent_token() for _ in range(200)}
    assert len(tokens) == 200
    assert all(re.fullmatch(r"[a-z2-7]{32}", token) for token in tokens)


@pytest.mark.parametrize(
    ("over", "status", "code"),
    [
        ({"agent": "nope"}, 400, "unknown_agent"),
        ({"agent": "portless"}, 400, "agent_port_undeclared"),
        ({"apps": [{"name": "Web", "entryRelativePath": "a"}]}, 400, "invalid_app_name"),
        ({"apps": [{"name": "agent", "entryRelativePath": "a"}]}, 400, "reserved_app_name"),
        (
            {"apps": [{"name": "a", "entryRelativePath": "x"}, {"name": "a",
              "entryRelativePath": "y"}]},
            400,
            "duplicate_app_name",
        ),
        ({"apps": [{"name": "a", "entryRelativePath": "../x"}]}, 400, "invalid_bundle"),
        (
            {"apps": [{"name": "a", "entryRelativePath": "x", "ports": [
                {"port": 1, "protocol": "tcp"}, {"port": 1, "protocol": "tcp"}]}]},
            400,
            "port_conflict",
        ),
    ],
)  # fmt: skip
def test_admission_watch_checks_8_and_10_answer_each_with_its_code(
    over: dict[str, Any], status: int, code: str
) -> None:
    err = refused(watch_body(**over))
    assert (err.status, err.code) == (status, code)


def test_admission_unknown_agent_lists_the_catalog() -> None:
    assert "helper" in refused(watch_body(agent="nope")).message


def test_admission_io_not_offered_is_io_unsupported() -> None:
    apps = [{"name": "a", "entryRelativePath": "x", "io": "streams"}]
    err = refused(watch_body(apps=apps), io=("tty",))
    assert (err.status, err.code) == (400, "io_unsupported")


def test_admission_watch_sessions_at_the_limit_are_409_too_many_watch_sessions() -> None:
    admit_watch(watch_body(), watch_live=1)
    err = refused(watch_body(), watch_live=2)
    assert (err.status, err.code) == (409, "too_many_watch_sessions")
    assert "watch.max_sessions = 2" in err.message


def test_admission_order_7_watch_io_before_the_agent() -> None:
    assert refused(watch_body(agent="nope"), io=()).code == "watch_disabled"


def test_admission_order_8_agent_before_9_count() -> None:
    assert refused(watch_body(agent="nope"), watch_live=2).code == "unknown_agent"


def test_admission_order_9_count_before_10_apps() -> None:
    apps = [{"name": "BAD", "entryRelativePath": "x"}]
    assert refused(watch_body(apps=apps), watch_live=2).code == "too_many_watch_sessions"


def test_admission_watch_with_watch_off_in_the_config_is_watch_disabled() -> None:
    off = dataclasses.replace(ON, watch=WatchConfig(enabled=False))
    assert refused(watch_body(), off).code == "watch_disabled"


def test_admission_watch_with_app_is_still_invalid_request() -> None:
    err = refused(app_body(app="status", mode="watch"))
    assert (err.status, err.code) == (400, "invalid_request")


def test_admission_run_session_ignores_apps_and_is_not_counted() -> None:
    spec = admission.admit(
        bundle_body(apps=[{"name": "BAD", "entryRelativePath": "x"}]),
        ON,
        accepted_terms=None,
        session_id=SID,
        offered=runnerd.local.offered_images(ON),
        watch_io=WATCH_IO,
        watch_live=99,
    )
    assert not isinstance(spec, WatchSessionSpec)
