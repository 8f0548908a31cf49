"""The response schemas of the OpenAPI document (`runnerd.http.openapi`). Pure.

Owns the component schemas written out from the contract's types: the
statuses, every run event (watch sessions' `run`, `endpoints` and `route`
included, with `app` where a watch session adds it), the `/io` text frames,
the stream's data, and the answers of the plain routes; and the small
builders both OpenAPI modules use.
"""

from __future__ import annotations

from typing import Any

REF = "#/components/schemas/{name}"


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(name=name)}


def string() -> dict[str, str]:
    return {"type": "string"}


def obj(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties}


def _status_kind(kind: str, required: list[str] | None = None, **props: Any) -> dict[str, Any]:
    return obj(["kind", *(required or [])], kind={"const": kind}, **props)


_APP = {**string(), "description": "watch only: the app the event is about"}
_ENDPOINTS = {"type": "array", "items": {"$ref": REF.format(name="RunnerEndpoint")}}
_RUN_EVENTS: list[dict[str, Any]] = [
    obj(["type", "chunk"], type={"enum": ["stdout", "stderr"]}, chunk=string()),
    obj(["type", "status"], type={"const": "status"}, status=ref("RunStatus")),
    obj(
        ["type", "phase", "message"],
        type={"const": "progress"},
        phase={"enum": ["build", "provision", "boot"]},
        message=string(),
        done={"type": "boolean"},
        app={**string(), "description": "watch only; absent for a session-wide step"},
    ),
    obj(["type", "frame"], type={"const": "debug"}, frame={"type": "object"}, app=_APP),
    obj(
        ["type", "port", "state"],
        type={"const": "reachability"},
        port={"type": "integer"},
        state={"enum": ["checking", "reachable", "unreachable"]},
        app=_APP,
    ),
    obj(
        ["type", "app", "generation", "phase", "trigger"],
        type={"const": "run"},
        app=string(),
        generation={"type": "integer", "minimum": 1},
        phase={"const": "started"},
        trigger={"enum": ["initial", "watch", "manual", "resume"]},
        telo={**string(), "description": "the Telo kernel's version, when it reported one"},
    ),
    obj(
        ["type", "app", "generation", "phase", "code", "durationMs"],
        type={"const": "run"},
        app=string(),
        generation={"type": "integer", "minimum": 1},
        phase={"const": "completed"},
        code={"type": "integer"},
        durationMs={"type": "integer", "minimum": 0},
    ),
    obj(
        ["type", "app", "generation", "phase", "reason"],
        type={"const": "run"},
        app=string(),
        generation={"type": "integer", "minimum": 1},
        phase={"const": "failed"},
        reason=string(),
    ),
    obj(
        ["type", "app"],
        type={"const": "endpoints"},
        app=string(),
        added=_ENDPOINTS,
        removed=_ENDPOINTS,
        rejected={
            "type": "array",
            "items": obj(["port", "reason"], port={"type": "integer"}, reason=string()),
        },
    ),
    obj(
        ["type", "host", "port", "state"],
        type={"const": "route"},
        app=string(),
        host=string(),
        port={"type": "integer"},
        state={"enum": ["pending", "programmed", "unprogrammed"]},
        reason=string(),
    ),
]

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
        token={
            **string(),
            "description": "a watch session's co-resident agent only: the "
            "token runnerd minted for it (`token_env`)",
        },
    ),
    "RunStatus": {
        "oneOf": [
            _status_kind("starting"),
            _status_kind(
                "running",
                endpoints={"type": "array", "items": ref("RunnerEndpoint")},
                inspectUrl=string(),
                agent={
                    **ref("RunnerEndpoint"),
                    "description": "watch only: where the co-resident agent listens",
                },
            ),
            _status_kind("exited", ["code"], code={"type": "integer"}),
            _status_kind("failed", ["message"], message=string()),
            _status_kind("stopped"),
            {
                **_status_kind("suspended"),
                "description": "a watch session idle-suspended: "
                "not terminal (streams stay open; `POST .../resume` wakes it)",
            },
        ]
    },
    "RunEvent": {"oneOf": _RUN_EVENTS},
    "ReplayGap": {
        **obj(["reason"], reason={"const": "buffer_evicted"}),
        "description": "the data of an `event: gap` frame (no id): events were evicted",
    },
    "IoTextFrame": {
        "description": "a server → client text frame on `/io`: `seq` first (the `lastSeq` "
        "replayed from; on a watch session with the app's `app` and `io`); `gap` where output "
        "is missing (no seq of its own): `buffer_evicted`, the replay buffer dropped output "
        "after `lastSeq` (sent before what it holds), or `output_lost`, the backend could "
        "not deliver output written at that place (after the chunk before it, before the "
        "next); `error` `resize_unsupported`, the answer to a `resize` on a `streams` app",
        "oneOf": [
            obj(
                ["type", "seq"],
                type={"const": "seq"},
                seq={"type": "integer", "minimum": 0},
                app={**string(), "description": "watch only"},
                io={"enum": ["tty", "streams"], "description": "watch only"},
            ),
            obj(
                ["type", "reason"],
                type={"const": "gap"},
                reason={"enum": ["buffer_evicted", "output_lost"]},
            ),
            obj(
                ["type", "error", "io"],
                type={"const": "error"},
                error={"const": "resize_unsupported"},
                io={"const": "streams"},
            ),
        ],
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
