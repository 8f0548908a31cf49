"""Health, capabilities, probe, OpenAPI, error bodies, body limit and CORS,
end to end against a real runnerd over its UNIX socket, on each backend."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.e2e.contract_client import SH_CONFIG
from tests.harness import start_daemon
from tests.shared_daemon import OnBackend, shared_runnerd_on_each_backend

__all__ = ["shared_runnerd_on_each_backend"]  # the module's `runnerd`: on both backends

APPS = {
    "demo": {
        "image": "envdump",
        "title": "Demo",
        "description": "Prints its environment.",
        "env": {"DEMO_TOKEN": "s3cr3t-cap-4711"},
    }
}
RUNTIMES = {"envdump": {"command": ["/bin/sh", "-c", "echo TOKEN=$DEMO_TOKEN"]}}


async def test_health_answers_ok_and_version(runnerd) -> None:
    async with runnerd.client() as client:
        response = await client.get("/v1/health")
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    assert isinstance(body["version"], str) and body["version"]


async def test_capabilities_describe_config_schema_and_apps_without_secrets(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    overrides = {
        "runner": {"display_name": "Test Runner", "allowed_images": ["sh", "python"]},
        "local": {"runtimes": RUNTIMES},
        "apps": APPS,
    }
    async with (
        start_daemon(tmp_path, on_backend.overrides(overrides)) as daemon,
        daemon.client() as client,
    ):
        response = await client.get("/v1/capabilities")
    assert response.status_code == 200
    caps = response.json()
    assert caps["displayName"] == "Test Runner"
    assert isinstance(caps["description"], str)
    assert caps["features"] == {"io": True, "ports": True}
    schema = caps["config"]["schema"]
    assert schema["type"] == "object"
    assert set(schema["required"]) == {"image", "pullPolicy"}
    assert schema["properties"]["image"]["default"] == "sh"
    assert schema["properties"]["image"]["enum"] == ["sh", "python"]
    assert schema["properties"]["pullPolicy"]["enum"] == ["missing", "always", "never"]
    assert schema["properties"]["pullPolicy"]["default"] == "missing"
    assert schema["properties"]["registryUrl"]["type"] == "string"
    assert "terms" not in caps
    assert caps["apps"] == [
        {"name": "demo", "title": "Demo", "description": "Prints its environment."}
    ]
    # The catalog's image and env never reach a client.
    assert "s3cr3t-cap-4711" not in response.text
    assert "envdump" not in response.text


async def test_capabilities_image_is_a_choice_of_exactly_the_allowed_images(
    runnerd, tmp_path: Path, on_backend: OnBackend
) -> None:
    # No allowlist, local backend: every bundle runtime, the default first.
    async with runnerd.client() as client:
        runtimes = (await client.get("/v1/capabilities")).json()
    # An allowlist of just the default: that one image to choose from.
    overrides = {"runner": {"allowed_images": ["sh"]}}
    other = tmp_path / "allowlist"  # the fixture's daemon holds tmp_path's socket
    other.mkdir()
    async with (
        start_daemon(other, on_backend.overrides(overrides)) as daemon,
        daemon.client() as client,
    ):
        listed = (await client.get("/v1/capabilities")).json()
    image = {"type": "string", "title": "Image", "default": "sh"}
    assert runtimes["config"]["schema"]["properties"]["image"] == {
        **image,
        "enum": ["sh", "python"],
    }
    assert listed["config"]["schema"]["properties"]["image"] == {**image, "enum": ["sh"]}


async def test_probe_reports_ready_for_a_runtime_and_unavailable_otherwise(runnerd) -> None:
    async with runnerd.client() as client:
        ready = await client.post(
            "/v1/probe", json={"config": {"image": "sh", "pullPolicy": "missing"}}
        )
        missing = await client.post(
            "/v1/probe", json={"config": {"image": "no-such-runtime", "pullPolicy": "missing"}}
        )
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready"}
    assert missing.status_code == 200
    assert missing.json()["status"] == "unavailable"
    assert missing.json()["message"]


async def test_probe_takes_the_editors_whole_runner_config(runnerd) -> None:
    # The Telo editor's HTTP-runner adapter sends every field of its runner
    # settings; unknown ones are ignored at every level.
    editor_body = {
        "config": {"image": "sh", "pullPolicy": "missing", "registryUrl": "http://reg.example",
                   "displayName": "my runner", "advanced": {"retries": 3}},
        "runnerUrl": "http://127.0.0.1:8062",
    }  # fmt: skip
    async with runnerd.client() as client:
        response = await client.post("/v1/probe", json=editor_body)
        not_json = await client.post(
            "/v1/probe", content=b"{not json", headers={"content-type": "application/json"}
        )
        bad_type = await client.post("/v1/probe", json={"config": {"image": 1}})
    assert response.status_code == 200 and response.json() == {"status": "ready"}
    assert not_json.status_code == 400
    assert not_json.json()["error"] == "invalid_request"
    assert bad_type.status_code == 400 and "body.config.image" in bad_type.json()["message"]


async def test_openapi_document_lists_every_route_with_body_schemas(runnerd) -> None:
    async with runnerd.client() as client:
        response = await client.get("/v1/openapi.json")
    assert response.status_code == 200
    doc = response.json()
    assert doc["openapi"].startswith("3.1")
    expected = {
        "/v1/health": {"get"},
        "/v1/capabilities": {"get"},
        "/v1/probe": {"post"},
        "/v1/sessions": {"post"},
        "/v1/apps/{name}/sessions": {"post"},
        "/v1/sessions/{id}": {"get", "delete"},
        "/v1/sessions/{id}/events": {"get"},
        "/v1/sessions/{id}/io": {"get"},
        "/v1/openapi.json": {"get"},
    }
    for path, methods in expected.items():
        assert path in doc["paths"], path
        assert methods <= set(doc["paths"][path]), path
    schemas = doc["components"]["schemas"]
    # Every $ref in the document resolves to a component.
    refs = _refs(doc)
    assert refs and all(ref.removeprefix("#/components/schemas/") in schemas for ref in refs)
    start = schemas["StartSessionRequest"]
    assert start["required"] == ["env"]
    assert {"env", "bundle", "config", "app", "ports", "inspect"} <= set(start["properties"])
    # Unknown fields are ignored, so the schema does not forbid them.
    assert start.get("additionalProperties", True) is not False
    assert set(schemas["Error"]["required"]) == {"error", "message"}


def _refs(node: object) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node))
    return set()


async def test_unknown_route_and_wrong_method_answer_json_errors(runnerd) -> None:
    async with runnerd.client() as client:
        unknown = await client.get("/v1/nope")
        wrong = await client.put("/v1/health")
        # (GET /v1/sessions is runnerd's list extension; PUT is no route's.)
        put_sessions = await client.put("/v1/sessions", json={})
    assert unknown.status_code == 404
    assert unknown.json()["error"] == "not_found"
    assert "/v1/nope" in unknown.json()["message"]
    assert wrong.status_code == 405
    assert set(wrong.json()) == {"error", "message"}
    assert "GET" in wrong.headers["allow"]
    assert put_sessions.status_code == 405
    assert put_sessions.json()["error"]


async def test_a_post_to_a_get_only_route_is_405_whatever_its_body(runnerd) -> None:
    async with runnerd.client() as client:
        bare = await client.post("/v1/health")
        text = await client.post(
            "/v1/capabilities", content=b"x", headers={"content-type": "text/plain"}
        )
        json_body = await client.post("/v1/openapi.json", json={})
        unknown = await client.post(
            "/v1/nope", content=b"x", headers={"content-type": "text/plain"}
        )
    for answer in (bare, text, json_body):
        assert answer.status_code == 405, answer.text
        assert answer.headers["allow"] == "GET, HEAD, OPTIONS"
        assert answer.json()["error"] == "method_not_allowed"
    assert unknown.status_code == 404 and unknown.json()["error"] == "not_found"


async def test_oversized_body_is_413_payload_too_large(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    overrides = {"server": {"max_body_bytes": 1024}}
    big = {"env": {"PAD": "x" * 2048}, "config": SH_CONFIG}
    async with start_daemon(tmp_path, on_backend.overrides(overrides)) as daemon:
        # Several rounds on one client: an error answered without reading the
        # body must not wedge the connection for the request after it.
        async with daemon.client(timeout=httpx.Timeout(3.0)) as client:
            for _ in range(8):
                too_large = await client.post("/v1/sessions", json=big)
                unknown = await client.post("/v1/nope", json=big)
                small = await client.post("/v1/probe", json={"config": SH_CONFIG})
                assert too_large.status_code == 413
                assert too_large.json()["error"] == "payload_too_large"
                assert "1024" in too_large.json()["message"]
                assert unknown.status_code == 404
                assert small.status_code == 200, small.text


async def test_cors_wildcard_on_every_answer_including_errors(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    origin = {"origin": "https://anywhere.example"}
    overrides = {"server": {"cors_origins": "*"}}
    async with (
        start_daemon(tmp_path, on_backend.overrides(overrides)) as daemon,
        daemon.client() as client,
    ):
        ok = await client.get("/v1/health", headers=origin)
        error = await client.get("/v1/sessions/doesnotexist", headers=origin)
        preflight = await client.options(
            "/v1/sessions",
            headers={
                **origin,
                "access-control-request-method": "POST",
                "access-control-request-headers": "content-type, x-telo-accepted-terms",
            },
        )
    assert ok.headers["access-control-allow-origin"] == "*"
    assert error.status_code == 404
    assert error.headers["access-control-allow-origin"] == "*"
    assert preflight.status_code in (200, 204)
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "POST" in preflight.headers["access-control-allow-methods"]
    allowed_headers = preflight.headers["access-control-allow-headers"].lower()
    assert "x-telo-accepted-terms" in allowed_headers and "content-type" in allowed_headers


async def test_cors_allowlist_echoes_only_listed_origins(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    editor = "https://editor.example.com"
    overrides = {"server": {"cors_origins": [editor]}}
    async with (
        start_daemon(tmp_path, on_backend.overrides(overrides)) as daemon,
        daemon.client() as client,
    ):
        listed = await client.get("/v1/health", headers={"origin": editor})
        other = await client.get("/v1/health", headers={"origin": "https://evil.example"})
        none = await client.get("/v1/health")
        error = await client.get("/v1/nope", headers={"origin": editor})
        preflight = await client.options(
            "/v1/sessions", headers={"origin": editor, "access-control-request-method": "POST"}
        )
    assert listed.headers["access-control-allow-origin"] == editor
    assert "origin" in listed.headers["vary"].lower()
    assert "access-control-allow-origin" not in other.headers
    assert "access-control-allow-origin" not in none.headers
    assert error.headers["access-control-allow-origin"] == editor
    assert preflight.headers["access-control-allow-origin"] == editor
