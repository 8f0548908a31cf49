"""The OpenAPI 3.1 document served at `GET /v1/openapi.json`. Pure.

Owns the machine-readable description of every `/v1` route. Request body
schemas are generated from the msgspec structs in `runnerd.contract` (the
same models that validate the bodies, so the two cannot drift), with what
admission checks beyond them added (`_with_admission_rules`); response
shapes are written out here from the contract's types. The event stream's
body is text: each frame's data is described by `x-runnerd-sse-data`; the
`/io` server's text frames (`seq`, `gap` and its reasons, the `streams`
app's `resize_unsupported` error) by `x-runnerd-ws-text` on its `101`.
What watch sessions add beyond their statuses and events (their routes and
bodies, a session's `mode`/`apps`/`agent`, `features`) is
`runnerd.http.openapi_watch`'s; the response schemas are
`runnerd.http.openapi_schemas`'.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from runnerd.config.envnames import ENV_NAME_PATTERN
from runnerd.contract import (
    ProbeRequest,
    ReplaceAppsRequest,
    StartAppSessionRequest,
    StartSessionRequest,
)
from runnerd.http import openapi_schemas as schemas
from runnerd.http.openapi_watch import (
    LISTED_SESSION_FIELDS,
    SESSION_REQUIRED,
    watch_paths,
    with_watch_schemas,
)
from runnerd.watch.changes import ChangeSetBody

REF, RESPONSE_SCHEMAS = schemas.REF, schemas.RESPONSE_SCHEMAS
_ref, _str, _obj = schemas.ref, schemas.string, schemas.obj


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


def _body(model: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": _ref(model)}}}


def _env_schema() -> dict[str, Any]:
    """A session's env as admission takes it: portable names, no NUL in values."""
    return {
        "type": "object",
        "propertyNames": {"pattern": ENV_NAME_PATTERN},
        "additionalProperties": {"type": "string", "pattern": "^[^\\u0000]*$"},
    }


def _with_admission_rules(schemas: dict[str, Any]) -> dict[str, Any]:
    """The generated request schemas with what admission checks beyond them:
    env names and values, and a bundle session's `bundle` and `config`
    (schema-optional only because an app session needs neither)."""
    start = schemas["StartSessionRequest"]
    start["properties"]["env"] = _env_schema()
    start["if"] = {"required": ["app"], "properties": {"app": {"type": "string"}}}
    start["else"] = {
        "required": ["bundle", "config"],
        "properties": {"bundle": _ref("RunBundle"), "config": _ref("SessionConfig")},
    }
    start["description"] = (
        "`bundle` and `config` are required unless `app` names a predefined app "
        '(then they are ignored). `mode: "watch"` (with `apps`, `agent`) asks for a '
        "watch session (no `app`): refused with `watch_disabled` while the runner has "
        "watch sessions off (`features.watch` absent from /v1/capabilities); `agent` "
        "without it is `agent_requires_watch`. `apps` omitted is one app `app` on the "
        "bundle's entry with the top-level `ports` (ignored when `apps` is given); an app "
        "without `io` is `tty`."
    )
    env = schemas["StartAppSessionRequest"]["properties"]["env"]
    env["anyOf"] = [_env_schema(), {"type": "null"}]
    return schemas


def _with_edge_errors(paths: dict[str, Any]) -> dict[str, Any]:
    """Every operation can meet the browser guard, which runs before any route."""
    for operations in paths.values():
        for method, operation in operations.items():
            if method != "parameters":
                operation["responses"].setdefault("403", _START_ERRORS["403"])
    return paths


# Where a created session's id leads (OpenAPI links: a client, or a tool such
# as schemathesis, can follow them from the 201).
_SESSION_LINKS = {
    name: {"operationId": operation, "parameters": {"id": "$response.body#/sessionId"}}
    for name, operation in (("GetSession", "getSession"), ("GetEvents", "getSessionEvents"),
                            ("StopSession", "stopSession"))
}  # fmt: skip


_SESSION_ID = {"name": "id", "in": "path", "required": True, "schema": _str()}
_TERMS_HEADER = {
    "name": "x-telo-accepted-terms",
    "in": "header",
    "required": False,
    "description": "The accepted terms version, when the runner has terms.",
    "schema": _str(),
}
_TERMINAL_SIZE_HEADER = {
    "name": "x-runnerd-terminal-size",
    "in": "header",
    "required": False,
    "description": "COLSxROWS (e.g. 132x43): the size the workload's terminal starts with, "
                   "as if resized before its first byte. A runnerd extension.",
    "schema": {"type": "string", "pattern": "^[0-9]+x[0-9]+$"},
    "x-runnerd-extension": True,
}  # fmt: skip
_START_ERRORS = {
    "400": _error(
        "invalid_request, unknown_app, invalid_bundle, invalid_config, "
        "watch_disabled, agent_requires_watch, unknown_agent, agent_port_undeclared; "
        "for each app: invalid_app_name, reserved_app_name, duplicate_app_name, "
        "invalid_bundle, port_conflict, io_unsupported"
    ),
    "403": _error("forbidden_origin or forbidden_host (see the README's Security section)"),
    "409": _error(
        "too_many_watch_sessions: watch.max_sessions watch sessions are starting or "
        "running; too_many_sessions: the registry is full of live sessions"
    ),
    "413": _error("payload_too_large"),
    "415": _error("unsupported_media_type: the body must be application/json"),
    "428": _error("terms_required; the body also carries `terms`"),
}


def _runner_paths() -> dict[str, Any]:
    return {
        "/v1/health": {"get": {
            "summary": "Liveness; never touches the backend",
            "responses": {"200": _json(_ref("Health"), "alive")}}},
        "/v1/capabilities": {"get": {
            "summary": "The runner's self-description, re-resolved per request",
            "responses": {"200": _json(_ref("Capabilities"), "capabilities")}}},
        "/v1/probe": {"post": {
            "summary": "Could a session with this config start now?",
            "requestBody": _body("ProbeRequest"),
            "responses": {"200": _json(_ref("AvailabilityReport"), "availability"),
                          "400": _error("invalid_request"), "413": _START_ERRORS["413"],
                          "415": _START_ERRORS["415"]}}},
        "/v1/openapi.json": {"get": {
            "summary": "This document",
            "responses": {"200": {
                "description": "OpenAPI 3.1",
                "content": {"application/json": {"schema": {"type": "object"}}}}}}},
    }  # fmt: skip


def _start_paths() -> dict[str, Any]:
    created = _json(_ref("SessionCreated"), "registered; the workload starts after this")
    created["links"] = _SESSION_LINKS
    return {
        "/v1/sessions": {"post": {
            "summary": "Start a session",
            "parameters": [_TERMS_HEADER, _TERMINAL_SIZE_HEADER],
            "requestBody": _body("StartSessionRequest"),
            "responses": {"201": created, **_START_ERRORS}}},
        "/v1/apps/{name}/sessions": {"post": {
            "summary": "Start a session of an operator-predefined app",
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": _str()},
                           _TERMS_HEADER, _TERMINAL_SIZE_HEADER],
            "requestBody": _body("StartAppSessionRequest"),
            "responses": {"201": created, "404": _error("unknown_app"), **_START_ERRORS}}},
    }  # fmt: skip


def _session_paths() -> dict[str, Any]:
    cursor = {"type": "integer", "minimum": 0}
    return {
        "/v1/sessions/{id}": {
            "parameters": [_SESSION_ID],
            "get": {"summary": "A session's status", "operationId": "getSession", "responses": {
                "200": _json(_ref("Session"), "the session"), "404": _error("not_found")}},
            "delete": {"summary": "Stop a session (idempotent)", "operationId": "stopSession",
                       "responses": {
                "204": {"description": "stopped, or no such session"},
                "500": _error("stop_failed")}}},
        "/v1/sessions/{id}/events": {"get": {
            "summary": "The session's events as Server-Sent Events (replay, then live)",
            "operationId": "getSessionEvents",
            "parameters": [
                _SESSION_ID,
                {"name": "Last-Event-ID", "in": "header", "required": False, "schema": cursor},
                {"name": "lastEventId", "in": "query", "required": False, "schema": cursor}],
            "responses": {"200": {
                "description": "frames `id: n`, `event: <type>`, `data: <RunEvent JSON>`; "
                               "`event: gap` (no id) when the buffer lost events; "
                               "`: heartbeat`. The body is text; `x-runnerd-sse-data` is "
                               "each frame's data.",
                "content": {"text/event-stream": {"schema": {"type": "string"},
                                                  "x-runnerd-sse-data": _ref("SseData")}}},
                "404": _error("not_found"),
                "429": _error("too_many_subscribers: the session has "
                              "runner.max_subscribers_per_session live SSE + WebSocket "
                              "subscribers; the body's `limit` says how many"),
                "503": _error("too_many_streams: streams hold their share of this listener "
                              "(all but an eighth of server.max_connections, kept for other "
                              "requests); retry after `Retry-After` seconds")}}},
        "/v1/sessions/{id}/io": {"get": {
            "summary": "WebSocket PTY channel (upgrade). Server → client binary frames are a "
                       "4-byte big-endian seq then output bytes; client binary frames are "
                       "stdin; text `{type: resize, cols, rows}` resizes. Close codes: 4403 "
                       "forbidden_origin, 4404 unknown session, 4410 nothing to replay, "
                       "4429 too_many_subscribers on the session, 4503 too_many_streams on "
                       "the listener (both after the upgrade, as the events route's 429 "
                       "and 503), 1000 session terminal (sent once the client has taken "
                       "every byte), 1001 runnerd shutting down, 1009 a frame over 16 MiB, "
                       "4408 the client stopped reading (the replay is incomplete). On a "
                       "watch session the socket is one app's (`app`): 4404 also when `app` "
                       "names no app, or is absent with more than one app; each server "
                       "binary frame is the seq, ONE stream byte (0 tty, 1 stdout, 2 "
                       "stderr) then the payload; stdin goes to that app's current process; "
                       "an app's exit does not close the socket.",
            "parameters": [
                _SESSION_ID,
                {"name": "lastSeq", "in": "query", "required": False, "schema": cursor},
                {"name": "app", "in": "query", "required": False, "schema": _str(),
                 "description": "the app of a watch session (optional with one app); a "
                                "run session takes none or `app`"}],
            "responses": {"101": {"description": "switching protocols; the server's "
                                                 "text frames are `x-runnerd-ws-text`",
                                  "x-runnerd-ws-text": _ref("IoTextFrame")},
                          "426": _error("upgrade_required: a plain GET, without "
                                        "`Upgrade: websocket`")}}},
    }  # fmt: skip


def _with_extensions(paths: dict[str, Any]) -> dict[str, Any]:
    """Add runnerd's own routes (not in the upstream contract), each marked
    `x-runnerd-extension: true` so a client of the plain contract can skip them."""
    session_list = _obj(
        ["sessions"],
        sessions={"type": "array", "items": _obj(
            ["sessionId", "status", "createdAt", "ports", "lastEventId", "lastOutputSeq",
             *SESSION_REQUIRED],
            sessionId=_str(),
            status=_ref("RunStatus"),
            createdAt={"type": "string", "format": "date-time"},
            exitedAt={"type": "string", "format": "date-time"},
            image={**_str(), "description": "bundle sessions only"},
            app={**_str(), "description": "catalog app sessions only (never their image)"},
            ports={"type": "array", "items": _obj(
                ["port", "protocol"], port={"type": "integer"},
                protocol={"enum": ["tcp", "udp"]})},
            lastEventId={"type": "integer", "description": "id of the newest event"},
            lastOutputSeq={"type": "integer", "description": "seq of the newest PTY chunk"},
            **LISTED_SESSION_FIELDS,
        )},
    )  # fmt: skip
    listed = _json(session_list, "every registered session, live and retained, oldest first")
    listed["headers"] = {"x-runnerd-max-body-bytes": {
        "description": "the daemon's request body limit (a larger bundle gets 413)",
        "schema": {"type": "integer"}}}  # fmt: skip
    paths["/v1/sessions"]["get"] = {
        "summary": "List sessions (runnerd extension to the /v1 contract; never env)",
        "x-runnerd-extension": True,
        "responses": {"200": listed}}  # fmt: skip
    return paths


def build_openapi(version: str) -> dict[str, Any]:
    """The whole OpenAPI 3.1 document for runnerd `version`."""
    models = (StartSessionRequest, StartAppSessionRequest, ProbeRequest)
    _, generated = msgspec.json.schema_components(
        (*models, ChangeSetBody, ReplaceAppsRequest), ref_template=REF
    )
    request_schemas = _with_admission_rules(generated)
    paths = _with_extensions(
        {**_runner_paths(), **_start_paths(), **_session_paths(), **watch_paths()}
    )
    return {
        "openapi": "3.1.0",
        "info": {"title": "runnerd /v1", "version": version,
                 "description": "The Telo runner /v1 contract served by runnerd."},
        "paths": _with_edge_errors(paths),
        "components": {"schemas": with_watch_schemas(
            {**request_schemas, **copy.deepcopy(RESPONSE_SCHEMAS)})},
    }  # fmt: skip
