"""The watch app checks of `POST /v1/sessions` (4, 8, 10 and the defaults)
and `PUT /apps`, each in the contract's order with its own answer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runnerd.config import AppEntry
from runnerd.contract import ReplaceAppsRequest, RequestError, StartSessionRequest, parse_body
from runnerd.session.paths import normalise_bundle_path
from runnerd.watch.apps import (
    AppSpec,
    build_app_set,
    build_apps,
    check_agent,
    check_shape,
)
from runnerd.watch.errors import WatchError

IO = ("tty", "streams")
TCP = {"port": 8080, "protocol": "tcp"}


def body(**over: Any) -> StartSessionRequest:
    data: dict[str, Any] = {
        "env": {},
        "mode": "watch",
        "bundle": {"entryRelativePath": "/main.sh", "files": []},
        "config": {"image": "sh", "pullPolicy": "missing"},
        **over,
    }
    return parse_body(StartSessionRequest, json.dumps(data).encode())


def apps(*specs: dict[str, Any], io: tuple[str, ...] = IO, **over: Any) -> tuple[AppSpec, ...]:
    request = body(apps=list(specs), **over) if specs else body(**over)
    return build_apps(request, io_offered=io, normalise_entry=normalise_bundle_path)


def refused(*specs: dict[str, Any], io: tuple[str, ...] = IO) -> WatchError:
    with pytest.raises(WatchError) as info:
        apps(*specs, io=io)
    assert info.value.status_hint == 400
    return info.value


def app(name: str, entry: str = "main.sh", **over: Any) -> dict[str, Any]:
    return {"name": name, "entryRelativePath": entry, **over}


def test_apps_omitted_is_one_app_named_app_on_the_entry_with_the_top_level_ports() -> None:
    (only,) = apps(ports=[TCP])
    assert only.name == "app" and only.entry == "main.sh" and only.io == "tty"
    assert [(p.port, p.protocol) for p in only.ports] == [(8080, "tcp")]


def test_apps_given_take_their_own_ports_and_io_in_order() -> None:
    got = apps(app("web", "./web//index.js", ports=[TCP]), app("worker", "w.py", io="streams"),
               ports=[{"port": 9, "protocol": "udp"}])  # fmt: skip
    assert [(a.name, a.entry, a.io) for a in got] == [
        ("web", "web/index.js", "tty"), ("worker", "w.py", "streams"),
    ]  # fmt: skip
    assert [p.port for p in got[0].ports] == [8080] and got[1].ports == ()


@pytest.mark.parametrize("name", ["Web", "web_1", "-web", "web-", "wéb", "a.b", " web"])
def test_apps_name_must_be_a_dns_label(name: str) -> None:
    err = refused(app(name))
    assert err.code == "invalid_app_name" and "body.apps[0].name" in err.message


@pytest.mark.parametrize("name", ["workspace", "agent"])
def test_apps_reserved_names_are_refused(name: str) -> None:
    assert refused(app("web"), app(name)).code == "reserved_app_name"


def test_apps_a_name_given_twice_is_refused() -> None:
    err = refused(app("web"), app("api"), app("web"))
    assert err.code == "duplicate_app_name" and "body.apps[2]" in err.message


@pytest.mark.parametrize("entry", ["../x", "a/../../x", "/", "a\0b"])
def test_apps_an_entry_escaping_the_bundle_is_invalid_bundle(entry: str) -> None:
    err = refused(app("web", entry))
    assert err.code == "invalid_bundle" and "body.apps[0].entryRelativePath" in err.message


def test_apps_a_port_declared_twice_is_a_conflict_this_app_included() -> None:
    across = refused(app("web", ports=[TCP]), app("api", ports=[TCP]))
    assert across.code == "port_conflict" and "app 'web'" in across.message
    within = refused(app("web", ports=[TCP, TCP]))
    assert within.code == "port_conflict" and "this app" in within.message
    # The pair is (protocol, port): the same number over udp is no conflict.
    got = apps(app("web", ports=[TCP]), app("dns", ports=[{"port": 8080, "protocol": "udp"}]))
    assert len(got) == 2


def test_apps_an_io_not_offered_is_io_unsupported() -> None:
    err = refused(app("web", io="streams"), io=("tty",))
    assert err.code == "io_unsupported" and "'streams'" in err.message


@pytest.mark.parametrize(
    ("specs", "code"),
    [
        ([app("Bad-", "../x")], "invalid_app_name"),  # name before entry
        ([app("agent", "../x")], "reserved_app_name"),
        ([app("web"), app("web", "../x")], "duplicate_app_name"),
        ([app("web", "../x", ports=[TCP, TCP])], "invalid_bundle"),  # entry before ports
        ([app("web", ports=[TCP, TCP], io="streams")], "port_conflict"),  # ports before io
        # Each app in order: the first app's problem wins over a later one's.
        ([app("web", io="streams"), app("Bad")], "io_unsupported"),
    ],
)
def test_apps_check_10_keeps_the_contracts_order(specs: list[dict[str, Any]], code: str) -> None:
    assert refused(*specs, io=("tty",)).code == code


def test_apps_put_apps_runs_the_same_checks() -> None:
    request = parse_body(
        ReplaceAppsRequest, json.dumps({"apps": [app("web"), app("web")]}).encode()
    )
    with pytest.raises(WatchError) as info:
        build_app_set(request.apps, io_offered=IO, normalise_entry=normalise_bundle_path)
    assert info.value.code == "duplicate_app_name"
    good = parse_body(ReplaceAppsRequest, json.dumps({"apps": [app("api", "a.js")]}).encode())
    got = build_app_set(good.apps, io_offered=IO, normalise_entry=normalise_bundle_path)
    assert got == (AppSpec(name="api", entry="a.js"),)


def test_apps_put_apps_needs_at_least_one_app() -> None:
    with pytest.raises(RequestError):
        parse_body(ReplaceAppsRequest, b'{"apps": []}')


# --- checks 4 and 8


def test_apps_shape_watch_with_app_is_invalid_request() -> None:
    with pytest.raises(WatchError) as info:
        check_shape(body(app="status"))
    assert (info.value.code, info.value.status_hint) == ("invalid_request", 400)


def test_apps_shape_agent_needs_watch() -> None:
    check_shape(body(agent="helper"))  # watch: fine
    with pytest.raises(WatchError) as info:
        check_shape(body(agent="helper", mode="run"))
    assert info.value.code == "agent_requires_watch"


CATALOG = {
    "helper": AppEntry(name="helper", image="agent-img", port=7000, token_env="TOKEN"),
    "plain": AppEntry(name="plain", image="svc"),
}


def test_apps_agent_must_be_a_catalog_entry_with_a_port() -> None:
    assert check_agent("helper", CATALOG).port == 7000
    with pytest.raises(WatchError) as unknown:
        check_agent("nope", CATALOG)
    assert unknown.value.code == "unknown_agent" and "helper, plain" in unknown.value.message
    with pytest.raises(WatchError) as portless:
        check_agent("plain", CATALOG)
    assert portless.value.code == "agent_port_undeclared"
    with pytest.raises(WatchError) as empty:
        check_agent("x", {})
    assert "none" in empty.value.message
