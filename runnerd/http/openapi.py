"""The OpenAPI 3.1 document served at `GET /v1/openapi.json`. Pure.

Owns the machine-readable description of every `/v1` route. Request body
schemas are generated from the msgspec structs in `runnerd.contract` (the
same models that validate the bodies, so the two cannot drift), with
admission's further rules added; response shapes are written out from the
contract's types (both in `runnerd.http.openapi_schemas`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from runnerd.contract import ProbeRequest, StartAppSessionRequest, StartSessionRequest
from runnerd.http.openapi_schemas import (
    REF,
    RESPONSE_SCHEMAS,
    obj,
    ref,
    string,
    with_admission_rules,
)


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(ref("Error"), description)


def _body(model: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": ref(model)}}}


_SESSION_ID = {"name": "id", "in": "path", "required": True, "schema": string()}
_TERMS_HEADER = {
    "name": "x-telo-accepted-terms",
    "in": "header",
    "required": False,
    "description": "The accepted terms version, when the runner has terms.",
    "schema": string(),
}
_START_ERRORS = {
    "400": _error("invalid_request, unknown_app, invalid_bundle or invalid_config"),
    "403": _error("forbidden_origin or forbidden_host (see the README's Security section)"),
    "409": _error("too_many_sessions: the registry is full of live sessions"),
    "413": _error("payload_too_large"),
    "415": _error("unsupported_media_type: the body must be application/json"),
    "428": _error("terms_required; the body also carries `terms`"),
}


def _runner_paths() -> dict[str, Any]:
    return {
        "/v1/health": {
            "get": {
                "summary": "Liveness; never touches the backend",
                "responses": {"200": _json(ref("Health"), "alive")},
            }
        },
        "/v1/capabilities": {
            "get": {
                "summary": "The runner's self-description, re-resolved per request",
                "responses": {"200": _json(ref("Capabilities"), "capabilities")},
            }
        },
        "/v1/probe": {
            "post": {
                "summary": "Could a session with this config start now?",
                "requestBody": _body("ProbeRequest"),
                "responses": {
                    "200": _json(ref("AvailabilityReport"), "availability"),
                    "400": _error("invalid_request"),
                    "413": _START_ERRORS["413"],
                    "415": _START_ERRORS["415"],
                },
            }
        },
        "/v1/openapi.json": {
            "get": {
                "summary": "This document",
                "responses": {
                    "200": {
                        "description": "OpenAPI 3.1",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        },
    }


# Where a created session's id leads (OpenAPI links: a client, or a tool such
# as schemathesis, can follow them from the 201).
_SESSION_LINKS = {
    name: {"operationId": operation, "parameters": {"id": "$response.body#/sessionId"}}
    for name, operation in (
        ("GetSession", "getSession"),
        ("GetEvents", "getSessionEvents"),
        ("StopSession", "stopSession"),
    )
}


def _start_paths() -> dict[str, Any]:
    created = {
        **_json(ref("SessionCreated"), "registered; the workload starts after this"),
        "links": _SESSION_LINKS,
    }
    return {
        "/v1/sessions": {
            "post": {
                "summary": "Start a session",
                "parameters": [_TERMS_HEADER],
                "requestBody": _body("StartSessionRequest"),
                "responses": {"201": created, **_START_ERRORS},
            }
        },
        "/v1/apps/{name}/sessions": {
            "post": {
                "summary": "Start a session of an operator-predefined app",
                "parameters": [
                    {"name": "name", "in": "path", "required": True, "schema": string()},
                    _TERMS_HEADER,
                ],
                "requestBody": _body("StartAppSessionRequest"),
                "responses": {"201": created, "404": _error("unknown_app"), **_START_ERRORS},
            }
        },
    }


def _session_paths() -> dict[str, Any]:
    cursor = {"type": "integer", "minimum": 0}
    return {
        "/v1/sessions/{id}": {
            "parameters": [_SESSION_ID],
            "get": {
                "summary": "A session's status",
                "operationId": "getSession",
                "responses": {
                    "200": _json(ref("Session"), "the session"),
                    "404": _error("not_found"),
                },
            },
            "delete": {
                "summary": "Stop a session (idempotent)",
                "operationId": "stopSession",
                "responses": {
                    "204": {"description": "stopped, or no such session"},
                    "500": _error("stop_failed"),
                },
            },
        },
        "/v1/sessions/{id}/events": {
            "get": {
                "summary": "The session's events as Server-Sent Events (replay, then live)",
                "operationId": "getSessionEvents",
                "parameters": [
                    _SESSION_ID,
                    {"name": "Last-Event-ID", "in": "header", "required": False, "schema": cursor},
                    {"name": "lastEventId", "in": "query", "required": False, "schema": cursor},
                ],
                "responses": {
                    "200": {
                        "description": "frames `id: n`, `event: <type>`, `data: <RunEvent JSON>`; "
                        "`event: gap` (no id) when the buffer lost events; "
                        "`: heartbeat`. The body is text; each frame's data is "
                        "described by `x-runnerd-sse-data`.",
                        "content": {
                            "text/event-stream": {
                                "schema": {"type": "string"},
                                "x-runnerd-sse-data": ref("SseData"),
                            }
                        },
                    },
                    "404": _error("not_found"),
                },
            }
        },
        "/v1/sessions/{id}/io": {
            "get": {
                "summary": "WebSocket PTY channel (upgrade). Server → client binary frames are a "
                "4-byte big-endian seq then output bytes; client binary frames are "
                "stdin; text `{type: resize, cols, rows}` resizes. Close codes: 4403 "
                "forbidden_origin, 4404 unknown session, 4410 nothing to replay, "
                "1000 session terminal.",
                "parameters": [
                    _SESSION_ID,
                    {"name": "lastSeq", "in": "query", "required": False, "schema": cursor},
                ],
                "responses": {
                    "101": {"description": "switching protocols"},
                    "426": _error("upgrade_required: a plain GET, without `Upgrade: websocket`"),
                },
            }
        },
    }


def _with_extensions(paths: dict[str, Any]) -> dict[str, Any]:
    """Add runnerd's own routes (not in the upstream contract), each marked
    `x-runnerd-extension: true` so a client of the plain contract can skip them."""
    session_list = obj(
        ["sessions"],
        sessions={
            "type": "array",
            "items": obj(
                ["sessionId", "status", "createdAt", "ports", "lastEventId", "lastOutputSeq"],
                sessionId=string(),
                status=ref("RunStatus"),
                createdAt={"type": "string", "format": "date-time"},
                exitedAt={"type": "string", "format": "date-time"},
                image={**string(), "description": "bundle sessions only"},
                app={**string(), "description": "catalog app sessions only (never their image)"},
                ports={
                    "type": "array",
                    "items": obj(
                        ["port", "protocol"],
                        port={"type": "integer"},
                        protocol={"enum": ["tcp", "udp"]},
                    ),
                },
                lastEventId={"type": "integer", "description": "id of the newest event"},
                lastOutputSeq={"type": "integer", "description": "seq of the newest PTY chunk"},
            ),
        },
    )
    listed = _json(session_list, "every registered session, live and retained, oldest first")
    listed["headers"] = {
        "x-runnerd-max-body-bytes": {
            "description": "the daemon's request body limit (a larger bundle gets 413)",
            "schema": {"type": "integer"},
        }
    }
    paths["/v1/sessions"]["get"] = {
        "summary": "List sessions (runnerd extension to the /v1 contract; never env)",
        "x-runnerd-extension": True,
        "responses": {"200": listed},
    }
    return paths


def _with_edge_errors(paths: dict[str, Any]) -> dict[str, Any]:
    """Every operation can meet the browser guard, which runs before any route."""
    for operations in paths.values():
        for method, operation in operations.items():
            if method != "parameters":
                operation["responses"].setdefault("403", _START_ERRORS["403"])
    return paths


def build_openapi(version: str) -> dict[str, Any]:
    """The whole OpenAPI 3.1 document for runnerd `version`."""
    _, generated = msgspec.json.schema_components(
        (StartSessionRequest, StartAppSessionRequest, ProbeRequest), ref_template=REF
    )
    request_schemas = with_admission_rules(generated)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "runnerd /v1",
            "version": version,
            "description": "The Telo runner /v1 contract served by runnerd.",
        },
        "paths": _with_edge_errors(
            _with_extensions({**_runner_paths(), **_start_paths(), **_session_paths()})
        ),
        "components": {"schemas": {**request_schemas, **RESPONSE_SCHEMAS}},
    }
