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
