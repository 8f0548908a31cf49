"""The OpenAPI document's response schemas, and the request schemas'
admission rules. Pure.

Owns the response shapes (written out here from `runnerd.contract`'s
types: statuses, events, the SSE frame data, reports, sessions) and
`with_admission_rules`, which adds to the request schemas generated from the
msgspec structs what admission checks beyond them. `runnerd.http.openapi`
builds the document from these.
"""

from __future__ import annotations

from typing import Any

from runnerd.config.envnames import ENV_NAME_PATTERN

REF = "#/components/schemas/{name}"


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(name=name)}


def string() -> dict[str, str]:
    return {"type": "string"}


def obj(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties}


def status_kind(kind: str, required: list[str] | None = None, **props: Any) -> dict[str, Any]:
    return obj(["kind", *(required or [])], kind={"const": kind}, **props)


RESPONSE_SCHEMAS: dict[str, Any] = {
    "Error": {
        **obj(["error", "message"], error=string(), message=string()),
        "additionalProperties": True,
    },
    "RunnerEndpoint": obj(
        ["host", "port", "protocol"],
        host=string(),
        port={"type": "integer"},
        protocol={"enum": ["tcp", "udp"]},
        url=string(),
    ),
    "RunStatus": {
        "oneOf": [
            status_kind("starting"),
            status_kind(
                "running",
                endpoints={"type": "array", "items": ref("RunnerEndpoint")},
                inspectUrl=string(),
            ),
            status_kind("exited", ["code"], code={"type": "integer"}),
            status_kind("failed", ["message"], message=string()),
            status_kind("stopped"),
        ]
    },
    "RunEvent": {
        "oneOf": [
            obj(["type", "chunk"], type={"enum": ["stdout", "stderr"]}, chunk=string()),
            obj(["type", "status"], type={"const": "status"}, status=ref("RunStatus")),
            obj(
                ["type", "phase", "message"],
                type={"const": "progress"},
                phase={"enum": ["build", "provision", "boot"]},
                message=string(),
                done={"type": "boolean"},
            ),
            obj(["type", "frame"], type={"const": "debug"}, frame={"type": "object"}),
            obj(
                ["type", "port", "state"],
                type={"const": "reachability"},
                port={"type": "integer"},
                state={"enum": ["checking", "reachable", "unreachable"]},
            ),
        ]
    },
    "ReplayGap": {
        **obj(["reason"], reason={"const": "buffer_evicted"}),
        "description": "the data of an `event: gap` frame (no id): events were evicted",
    },
    "SseData": {
        "description": "the `data:` of an SSE frame: a RunEvent (`event:` is its `type`) "
        "or a ReplayGap (`event: gap`)",
        "oneOf": [ref("RunEvent"), ref("ReplayGap")],
    },
    "AvailabilityReport": {
        "oneOf": [
            obj(["status"], status={"const": "ready"}),
            obj(
                ["status", "issues"],
                status={"const": "needs-setup"},
                issues={
                    "type": "array",
                    "items": obj(["path", "message"], path=string(), message=string()),
                },
            ),
            obj(
                ["status", "message"],
                status={"const": "unavailable"},
                message=string(),
                remediation=string(),
            ),
        ]
    },
    "Health": obj(["ok", "version"], ok={"const": True}, version=string()),
    "Capabilities": obj(
        ["displayName", "description", "features", "config"],
        displayName=string(),
        description=string(),
        features=obj(["io", "ports"], io={"type": "boolean"}, ports={"type": "boolean"}),
        config=obj(["schema"], schema={"type": "object"}),
        terms=obj(["version", "title", "body"], version=string(), title=string(), body=string()),
        apps={
            "type": "array",
            "items": obj(["name"], name=string(), title=string(), description=string()),
        },
    ),
    "SessionCreated": obj(
        ["sessionId", "streamUrl", "createdAt"],
        sessionId=string(),
        streamUrl=string(),
        createdAt={"type": "string", "format": "date-time"},
    ),
    "Session": obj(
        ["sessionId", "status", "createdAt"],
        sessionId=string(),
        status=ref("RunStatus"),
        createdAt={"type": "string", "format": "date-time"},
        exitedAt={"type": "string", "format": "date-time"},
    ),
}


def env_schema() -> dict[str, Any]:
    """A session's env as admission takes it: portable names, no NUL in values."""
    return {
        "type": "object",
        "propertyNames": {"pattern": ENV_NAME_PATTERN},
        "additionalProperties": {"type": "string", "pattern": "^[^\\u0000]*$"},
    }


def with_admission_rules(schemas: dict[str, Any]) -> dict[str, Any]:
    """The request schemas (generated from the structs) with what admission
    checks beyond them: env names, and a bundle session's `bundle` and
    `config` (schema-optional only because an app session needs neither)."""
    start = schemas["StartSessionRequest"]
    start["properties"]["env"] = env_schema()
    start["if"] = {"required": ["app"], "properties": {"app": {"type": "string"}}}
    start["else"] = {
        "required": ["bundle", "config"],
        "properties": {"bundle": ref("RunBundle"), "config": ref("SessionConfig")},
    }
    start["description"] = (
        "`bundle` and `config` are required unless `app` names a predefined app "
        "(then they are ignored)."
    )
    schemas["StartAppSessionRequest"]["properties"]["env"] = {
        "anyOf": [env_schema(), {"type": "null"}],
        "default": None,
    }
    return schemas
