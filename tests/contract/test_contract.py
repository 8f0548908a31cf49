"""Unit tests for runnerd.contract: request bodies are refused with one line
naming the offending field, and nothing is coerced."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runnerd.contract import (
    MAX_JSON_DEPTH,
    Body,
    ProbeRequest,
    RequestError,
    StartAppSessionRequest,
    StartSessionRequest,
    exited,
    failed,
    is_event_frame,
    is_terminal,
    parse_body,
    running,
    starting,
    stopped,
)

GOOD: dict[str, Any] = {
    "env": {"A": "1"},
    "bundle": {
        "entryRelativePath": "telo.yaml",
        "files": [{"relativePath": "telo.yaml", "contents": "kind: x"}],
    },
    "config": {"image": "sh", "pullPolicy": "missing"},
}


def with_(**over: Any) -> dict[str, Any]:
    return {**GOOD, **over}


def port(**over: Any) -> dict[str, Any]:
    return with_(ports=[{"port": 80, "protocol": "tcp", **over}])


BAD: list[tuple[str, type[Body], bytes | dict[str, Any], str]] = [
    ("empty body", StartSessionRequest, b"", "body must be a JSON object"),
    ("array", StartSessionRequest, b"[1]", "body must be a JSON object"),
    ("string", StartSessionRequest, b'"x"', "body must be a JSON object"),
    ("env missing", StartSessionRequest, {}, "body.env is required"),
    ("env not object", StartSessionRequest, with_(env=[]), "body.env must be an object"),
    (
        "env value number",
        StartSessionRequest,
        with_(env={"FOO": 1}),
        "body.env.FOO must be a string",
    ),
    ("env value null", StartSessionRequest, with_(env={"A": None}), "body.env.A must be a string"),
    (
        "entry empty",
        StartSessionRequest,
        with_(bundle={"entryRelativePath": "", "files": []}),
        "body.bundle.entryRelativePath must not be empty",
    ),
    (
        "file path empty",
        StartSessionRequest,
        with_(bundle={"entryRelativePath": "m", "files": [{"relativePath": "", "contents": ""}]}),
        "body.bundle.files[0].relativePath must not be empty",
    ),
    (
        "file contents missing",
        StartSessionRequest,
        with_(bundle={"entryRelativePath": "m", "files": [{"relativePath": "m"}]}),
        "body.bundle.files[0].contents is required",
    ),
    (
        "files not array",
        StartSessionRequest,
        with_(bundle={"entryRelativePath": "m", "files": {}}),
        "body.bundle.files must be an array",
    ),
    (
        "image empty",
        StartSessionRequest,
        with_(config={"image": "", "pullPolicy": "missing"}),
        "body.config.image must not be empty",
    ),
    (
        "pull policy missing",
        StartSessionRequest,
        with_(config={"image": "sh"}),
        "body.config.pullPolicy is required",
    ),
    (
        "pull policy unknown",
        StartSessionRequest,
        with_(config={"image": "sh", "pullPolicy": "sometimes"}),
        "body.config.pullPolicy must be one of 'missing', 'always' or 'never'",
    ),
    (
        "registry url number",
        StartSessionRequest,
        with_(config={"image": "sh", "pullPolicy": "missing", "registryUrl": 5}),
        "body.config.registryUrl must be a string",
    ),
    ("port zero", StartSessionRequest, port(port=0), "body.ports[0].port must be at least 1"),
    (
        "port too big",
        StartSessionRequest,
        port(port=65536),
        "body.ports[0].port must be at most 65535",
    ),
    (
        "port as string",
        StartSessionRequest,
        port(port="80"),
        "body.ports[0].port must be an integer",
    ),
    (
        "port as float",
        StartSessionRequest,
        port(port=80.0),
        "body.ports[0].port must be an integer",
    ),
    ("port as bool", StartSessionRequest, port(port=True), "body.ports[0].port must be an integer"),
    (
        "protocol unknown",
        StartSessionRequest,
        port(protocol="sctp"),
        "body.ports[0].protocol must be one of 'tcp' or 'udp'",
    ),
    (
        "ports not array",
        StartSessionRequest,
        with_(ports={"port": 80}),
        "body.ports must be an array",
    ),
    ("inspect string", StartSessionRequest, with_(inspect="yes"), "body.inspect must be a boolean"),
    ("app empty", StartSessionRequest, with_(app=""), "body.app must not be empty"),
    ("app number", StartSessionRequest, with_(app=5), "body.app must be a string"),
    (
        "app route env value",
        StartAppSessionRequest,
        {"env": {"A": 1}},
        "body.env.A must be a string",
    ),
    ("probe without config", ProbeRequest, {}, "body.config is required"),
    ("probe config not object", ProbeRequest, {"config": "sh"}, "body.config must be an object"),
]


@pytest.mark.parametrize(("model", "raw", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_contract_parse_body_names_the_offending_field(
    model: type[Body], raw: bytes | dict[str, Any], message: str
) -> None:
    data = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
    with pytest.raises(RequestError) as info:
        parse_body(model, data)
    assert info.value.message == message


IGNORED = [
    ("top level", StartSessionRequest, {"env": {}, "extra": 1}),
    ("nested", StartSessionRequest, {"env": {}, "ports": [{"port": 1, "protocol": "tcp", "x": 2}]}),
    ("app route with app field", StartAppSessionRequest, {"app": "x"}),
    ("probe with registryUrl", ProbeRequest,
     {"config": {"image": "sh", "pullPolicy": "missing", "registryUrl": "x", "more": {}}}),
    ("probe with env", ProbeRequest,
     {"config": {"image": "sh", "pullPolicy": "missing"}, "env": {}}),
]  # fmt: skip


@pytest.mark.parametrize(("model", "raw"), [i[1:] for i in IGNORED], ids=[i[0] for i in IGNORED])
def test_contract_parse_body_ignores_unknown_fields_at_every_level(model: Any, raw: Any) -> None:
    parse_body(model, json.dumps(raw).encode())


def test_contract_parse_body_limits_nesting_naming_the_limit() -> None:
    levels = MAX_JSON_DEPTH - 2  # the body object and its "extra" member are two levels
    within = {"env": {}, "extra": json.loads("[" * levels + "]" * levels)}
    parse_body(StartSessionRequest, json.dumps(within).encode())
    for depth in (MAX_JSON_DEPTH, 5000):
        raw = b'{"env": {}, "x": ' + b"[" * depth + b"]" * depth + b"}"
        with pytest.raises(RequestError, match=f"deeper than the limit of {MAX_JSON_DEPTH} levels"):
            parse_body(StartSessionRequest, raw)


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (rb'{"env": {"K": "a\ud800b"}}', "body.env.K"),
        (rb'{"env": {"\udfff": "v"}}', "body.env key"),
        (rb'{"env": {}, "bundle": {"entryRelativePath": "\ud83d", "files": []}}',
         "body.bundle.entryRelativePath"),
    ],
)  # fmt: skip
def test_contract_parse_body_refuses_lone_surrogates_naming_the_key(raw: bytes, where: str) -> None:
    with pytest.raises(RequestError, match="lone surrogate") as caught:
        parse_body(StartSessionRequest, raw)
    assert caught.value.message.startswith(where)
    # A proper pair is text, and passes.
    parse_body(StartSessionRequest, rb'{"env": {"K": "\ud83d\ude00"}}')


@pytest.mark.parametrize("raw", [b"{nope", b'{"env": }', b"\xff\xfe\x00"])
def test_contract_parse_body_not_json(raw: bytes) -> None:
    with pytest.raises(RequestError, match="^body is not valid JSON: "):
        parse_body(StartSessionRequest, raw)


def test_contract_parse_body_accepts_the_contract_shapes() -> None:
    body = parse_body(StartSessionRequest, json.dumps(GOOD).encode())
    assert body.env == {"A": "1"} and body.bundle is not None and body.config is not None
    assert body.config.pullPolicy == "missing" and body.app is None
    app = parse_body(StartSessionRequest, b'{"env": {}, "app": "hello"}')
    assert app.app == "hello" and app.bundle is None
    route = parse_body(StartAppSessionRequest, b"{}")
    assert route.env is None
    probe = parse_body(ProbeRequest, b'{"config": {"image": "sh", "pullPolicy": "never"}}')
    assert probe.config.image == "sh"


def test_contract_terminal_statuses() -> None:
    assert [is_terminal(s) for s in (starting(), running())] == [False, False]
    assert [is_terminal(s) for s in (exited(0), failed("x"), stopped())] == [True, True, True]
    assert running() == {"kind": "running"}


@pytest.mark.parametrize(
    ("frame", "relayed"),
    [({"kind": "event", "x": 1}, True), ({"x": 1}, True), ({"kind": "log"}, False), ([], False)],
)
def test_contract_only_event_debug_frames_are_relayed(frame: object, relayed: bool) -> None:
    assert is_event_frame(frame) is relayed
