"""The OpenAPI document (pure: `build_openapi`): the watch fields of
`POST /v1/sessions` and their error codes. That the daemon serves it is
tests/e2e/test_meta.py's."""

from __future__ import annotations

from runnerd.http.openapi import build_openapi


def test_openapi_describes_the_watch_fields_and_codes() -> None:
    doc = build_openapi("0")
    schemas = doc["components"]["schemas"]
    start = schemas["StartSessionRequest"]["properties"]
    assert start["mode"]["enum"] == ["run", "watch"]
    assert start["mode"]["default"] == "run"
    assert {"apps", "agent"} <= set(start)
    assert start["apps"]["anyOf"][0]["minItems"] == 1
    app = schemas["SessionAppSpec"]
    assert set(app["required"]) == {"name", "entryRelativePath"}
    assert app["properties"]["name"]["maxLength"] == 63
    assert {"enum": ["streams", "tty"]} in app["properties"]["io"]["anyOf"]
    errors = doc["paths"]["/v1/sessions"]["post"]["responses"]["400"]["description"]
    assert "watch_disabled" in errors and "agent_requires_watch" in errors
    assert "watch_disabled" in schemas["StartSessionRequest"]["description"]


def test_openapi_describes_every_watch_route_with_its_answers() -> None:
    paths = build_openapi("0")["paths"]
    expected = {
        ("/v1/sessions/{id}/workspace", "get"): {"200", "404", "409", "500"},
        ("/v1/sessions/{id}/workspace", "post"): {"200", "400", "404", "409", "413", "429", "500"},
        ("/v1/sessions/{id}/workspace/file", "get"): {"200", "400", "404", "409", "413", "500"},
        ("/v1/sessions/{id}/reload", "post"): {"202", "404", "409", "429"},
        ("/v1/sessions/{id}/apps", "put"): {"202", "400", "404", "409"},
        ("/v1/sessions/{id}/resume", "post"): {"202", "404", "409"},
    }
    for (path, method), statuses in expected.items():
        # Every operation also documents the browser guard's 403.
        assert set(paths[path][method]["responses"]) == statuses | {"403"}, (path, method)
    shared = paths["/v1/sessions/{id}/reload"]["post"]["responses"]["409"]["description"]
    assert "not_a_watch_session" in shared and "not_running" in shared
    file_query = paths["/v1/sessions/{id}/workspace/file"]["get"]["parameters"]
    assert [(p["name"], p["required"]) for p in file_query] == [("path", True), ("encoding", False)]
    late = paths["/v1/sessions/{id}/workspace"]["post"]["responses"]["500"]["description"]
    assert "workspace_failed" in late and "may still have been applied" in late
    resume = paths["/v1/sessions/{id}/resume"]["post"]["responses"]
    assert "not_suspended" in resume["404"]["description"]
    assert "too_many_watch_sessions" in resume["409"]["description"]


def test_openapi_describes_the_watch_bodies_and_session_fields() -> None:
    doc = build_openapi("0")
    schemas = doc["components"]["schemas"]
    paths = doc["paths"]
    change = paths["/v1/sessions/{id}/workspace"]["post"]["requestBody"]["content"]
    assert change["application/json"]["schema"] == {"$ref": "#/components/schemas/ChangeSetBody"}
    write = schemas["WriteBody"]
    assert set(write["required"]) == {"path", "content"}
    assert write["properties"]["encoding"]["enum"] == ["base64", "utf8"]
    assert schemas["ReplaceAppsRequest"]["required"] == ["apps"]
    session = schemas["Session"]
    assert {"mode", "apps"} <= set(session["required"]) and "agent" in session["properties"]
    app = session["properties"]["apps"]["items"]
    assert set(app["required"]) == {"name", "io", "generation", "ports"}
    listed = paths["/v1/sessions"]["get"]["responses"]["200"]["content"]["application/json"]
    assert "mode" in listed["schema"]["properties"]["sessions"]["items"]["properties"]
    features = schemas["Capabilities"]["properties"]["features"]["oneOf"]
    assert [sorted(f["required"]) for f in features] == [["io", "ports"], ["io", "ports", "watch"]]
    starts = paths["/v1/sessions"]["post"]["responses"]
    assert "too_many_watch_sessions" in starts["409"]["description"]
    for code in ("unknown_agent", "agent_port_undeclared", "port_conflict", "io_unsupported"):
        assert code in starts["400"]["description"]
