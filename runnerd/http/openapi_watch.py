"""The watch-session part of the OpenAPI document (`runnerd.http.openapi`). Pure.

Owns the description of what watch sessions add (the contract's "Watch
sessions"): the routes `workspace`, `workspace/file`, `reload`, `apps` and
`resume` under `/v1/sessions/{id}`, their bodies and answers; `mode`,
`apps` and `agent` on a session's `GET` (and each listed session); and
`features` in either form. The request bodies (`ChangeSetBody`,
`ReplaceAppsRequest`) are generated from the msgspec structs that validate
them, as the rest of the document's are. The statuses and events watch
sessions add (`suspended`, `running.agent`, `run`, `endpoints`, `route`)
are `runnerd.http.openapi`'s, with the contract's types.
"""

from __future__ import annotations

from typing import Any

_REF = "#/components/schemas/{name}"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(name=name)}


def _str() -> dict[str, str]:
    return {"type": "string"}


def _obj(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


def _names() -> dict[str, Any]:
    return {"type": "array", "items": _str()}


_PORTS = {"type": "array", "items": _ref("PortMapping")}
_SESSION_APP = _obj(
    ["name", "io", "generation", "ports"],
    name=_str(),
    io={"enum": ["tty", "streams"]},
    generation={"type": "integer", "minimum": 0,
                "description": "the app's latest generation (0 before its first)"},
    ports=_PORTS,
)  # fmt: skip
# What GET /v1/sessions/{id} (and each listed session: LISTED_SESSION_FIELDS) gains.
SESSION_FIELDS: dict[str, Any] = {
    "mode": {"enum": ["run", "watch"]},
    "agent": {**_str(), "description": "the co-resident agent's catalog name, while it has one"},
    "apps": {"type": "array", "items": _SESSION_APP,
             "description": "in declaration order; a run session's one app is "
                            "`{name: app, io: tty, generation: 0, ports}`"},
}  # fmt: skip
SESSION_REQUIRED = ["mode", "apps"]
# A listed session's apps also say where each one's output ring stands.
_LISTED_APP = {
    **_SESSION_APP,
    "properties": {
        **_SESSION_APP["properties"],
        "lastOutputSeq": {
            "type": "integer",
            "description": "watch only: seq of the app's newest output chunk (its `/io?app=` ring)",
        },
    },
}
LISTED_SESSION_FIELDS: dict[str, Any] = {
    **SESSION_FIELDS,
    "apps": {**SESSION_FIELDS["apps"], "items": _LISTED_APP},
}

WATCH_SCHEMAS: dict[str, Any] = {
    "WorkspaceFile": _obj(
        ["path", "hash"],
        path=_str(),
        hash={
            "type": "string",
            "pattern": "^[0-9a-f]{64}$",
            "description": "lowercase hex SHA-256 of the bytes",
        },
    ),  # fmt: skip
    "WorkspaceListing": _obj(["files"], files={"type": "array", "items": _ref("WorkspaceFile")}),
    "WorkspaceChanged": _obj(
        ["written", "deleted"],
        written={"type": "integer", "minimum": 0},
        deleted={
            "type": "integer",
            "minimum": 0,
            "description": "paths that existed and were removed",
        },
    ),  # fmt: skip
    "WorkspaceFileContent": _obj(
        ["content", "size"],
        content={**_str(), "description": "UTF-8 (U+FFFD for invalid bytes) or base64"},
        size={"type": "integer", "minimum": 0, "description": "the file's byte length"},
    ),
    "Reloaded": _obj(["reloaded"], reloaded=_names()),
    "AppsReplaced": _obj(["apps"], apps=_names()),
    "Resumed": _obj(["sessionId"], sessionId=_str()),
}


def with_watch_schemas(schemas: dict[str, Any]) -> dict[str, Any]:
    """`schemas` (the request and response schemas) with the watch additions."""
    schemas["Session"]["properties"].update(SESSION_FIELDS)
    schemas["Session"]["required"] += SESSION_REQUIRED
    schemas["Capabilities"]["properties"]["features"] = _features()
    schemas["ChangeSetBody"]["description"] = (
        "writes applied in order (parents created, a file replaced), then deletes (a file or "
        "a directory with all it holds); `encoding` base64 is strict RFC 4648, padded"
    )
    return {**schemas, **WATCH_SCHEMAS}


def _features() -> dict[str, Any]:
    run = _obj(["io", "ports"], io={"type": "boolean"}, ports={"type": "boolean"})
    watch = _obj(
        ["io", "ports", "watch"],
        io={"type": "array", "items": {"enum": ["tty", "streams"]}},
        ports={"type": "boolean"},
        watch={"const": True},
        agents={**_names(), "description": "catalog names usable as `agent` (they declare "
                                           "a port); present only when there is one"},
    )  # fmt: skip
    return {"description": "`{io: true, ports: true}` while watch sessions are off",
            "oneOf": [run, watch]}  # fmt: skip


_SESSION_ID = {"name": "id", "in": "path", "required": True, "schema": _str()}
_SHARED = {
    "404": "not_found: no such session",
    "409": "not_a_watch_session (a run session), or not_running: the session is starting, "
    "suspended or terminal",
}


def _route(
    summary: str, ok: tuple[str, dict[str, Any]], errors: dict[str, str] | None = None
) -> dict[str, Any]:
    """An operation of the workspace, reload or apps routes: its answer
    `ok` (status, response), the shared errors (`404 not_found`, `409
    not_a_watch_session`/`not_running`) and its own `errors` (status → codes)."""
    responses = {ok[0]: ok[1]} | {status: _error(text) for status, text in _SHARED.items()}
    for status, text in (errors or {}).items():
        shared = _SHARED.get(status)
        responses[status] = _error(f"{shared}; or {text}" if shared else text)
    return {"summary": summary, "responses": responses}


def _body(model: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": _ref(model)}}}


# The workspace routes' own failure: the place's workspace could not do it
# (on kubernetes: the watch pod's workspace API refused, broke off or did not
# answer in time; a write that timed out may still have been applied).
_WORKSPACE_FAILED = (
    "workspace_failed: the session's workspace could not do it (kubernetes: the watch "
    "pod's workspace did not answer, or not in time: a change may still have been applied)"
)


def watch_paths() -> dict[str, Any]:
    """The watch routes, each with its answers in the contract's order."""
    listing = _route(
        "Every listed workspace file with its SHA-256 (node_modules, .telo, .git skipped)",
        ("200", _json(_ref("WorkspaceListing"), "sorted by path bytes")),
        {"500": _WORKSPACE_FAILED},
    )
    change = _route(
        "Apply a change set; the apps restart (debounced, trigger watch) when it touched a path",
        ("200", _json(_ref("WorkspaceChanged"), "applied and visible to GET")),
        {"400": "invalid_request (schema, strict base64), then invalid_path (the set is "
                "refused whole)",
         "409": "path_conflict (a parent that is not a directory)",
         "413": "payload_too_large",
         "429": "reload_rate_limited: watch.reload_limit writes + reloads in the last 60 s",
         "500": _WORKSPACE_FAILED},
    )  # fmt: skip
    change["requestBody"] = _body("ChangeSetBody")
    read = _route(
        "One workspace file's content",
        ("200", _json(_ref("WorkspaceFileContent"), "the file")),
        {"400": "invalid_path (path missing or invalid), then invalid_request (encoding)",
         "404": "file_not_found: not a regular file of the workspace",
         "413": "file_too_large",
         "500": _WORKSPACE_FAILED},
    )  # fmt: skip
    read["parameters"] = [
        {"name": "path", "in": "query", "required": True, "schema": _str()},
        {"name": "encoding", "in": "query", "required": False,
         "schema": {"enum": ["utf8", "base64"], "default": "utf8"}},
    ]  # fmt: skip
    reload = _route(
        "Restart every app (or ?app=) now, trigger manual",
        ("202", _json(_ref("Reloaded"), "the apps restarting, in session order")),
        {"429": "reload_rate_limited (checked after not_running)",
         "404": "unknown_app: `app` names no app of the session"},
    )  # fmt: skip
    reload["parameters"] = [{"name": "app", "in": "query", "required": False, "schema": _str()}]
    apps = _route(
        "Replace the app set; every app of the new set starts (trigger resume)",
        ("202", _json(_ref("AppsReplaced"), "the new set, shown by GET from now on")),
        {"400": "invalid_request (schema; checked before not_running), then the app checks "
                "of POST /v1/sessions: invalid_app_name, reserved_app_name, "
                "duplicate_app_name, invalid_bundle, port_conflict, io_unsupported",
         "409": "checkpoint_failed: where a place holds a fixed app set (kubernetes), the "
                "checkpoint the new set starts from failed; nothing changed"},
    )  # fmt: skip
    apps["requestBody"] = _body("ReplaceAppsRequest")
    resume = {"summary": "Resume a suspended watch session from its checkpoint",
              "responses": {
                  "202": _json(_ref("Resumed"), "resuming: starting, then running"),
                  "404": _error("not_suspended: unknown, a run session, or not suspended"),
                  "409": _error("too_many_watch_sessions: watch.max_sessions are starting "
                                "or running")}}  # fmt: skip
    base = "/v1/sessions/{id}"
    return {
        f"{base}/workspace": {"parameters": [_SESSION_ID], "get": listing, "post": change},
        f"{base}/workspace/file": {"parameters": [_SESSION_ID], "get": read},
        f"{base}/reload": {"parameters": [_SESSION_ID], "post": reload},
        f"{base}/apps": {"parameters": [_SESSION_ID], "put": apps},
        f"{base}/resume": {"parameters": [_SESSION_ID], "post": resume},
    }
