"""The daemon's real answers validated against its own `/v1/openapi.json`
(JSON Schema 2020-12, jsonschema): every status is documented for its route,
every JSON body matches the documented schema, and every SSE frame's data
matches `x-runnerd-sse-data`. Health, capabilities, probe, starts, session
GETs in each status, the listing, stops, the event streams (progress on
Kubernetes, reachability with a port, a gap with a tiny ring) and the error
answers (400, 403, 404, 405, 415, 426)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from tests.e2e.contract_client import (
    SH_CONFIG,
    bundle_body,
    read_events,
    start_session,
    wait_status,
    wait_terminal,
)
from tests.harness import Daemon, SseFrame, start_daemon
from tests.shared_daemon import OnBackend

Document = dict[str, Any]


class Conformance:
    """Checks answers against one OpenAPI document."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.checked: set[tuple[str, str, int]] = set()

    def _validate(self, instance: Any, schema: dict[str, Any], where: str) -> None:
        # The document's components at the root, so its `#/components/...` refs resolve.
        root = {"components": self.doc["components"], "allOf": [schema]}
        errors = list(jsonschema.Draft202012Validator(root).iter_errors(instance))
        assert not errors, f"{where}: {[e.message for e in errors][:3]} in {instance!r}"

    def response(self, template: str, answer: httpx.Response) -> None:
        """`answer` (to a request on route `template`) as the document says."""
        method = answer.request.method.lower()
        operations = self.doc["paths"][template]
        where = f"{answer.request.method} {template} -> {answer.status_code}"
        if method not in operations:  # a method no route takes
            assert answer.status_code == 405, where
            assert set(answer.headers["allow"].replace(" ", "").split(",")) >= {
                m.upper() for m in operations if m != "parameters"
            }, where
            self._validate(answer.json(), {"$ref": "#/components/schemas/Error"}, where)
            return
        documented = operations[method]["responses"]
        assert str(answer.status_code) in documented, f"{where}: undocumented status"
        self.checked.add((template, method, answer.status_code))
        content = documented[str(answer.status_code)].get("content")
        if content is None:
            assert not answer.content, where
            return
        media = answer.headers["content-type"].split(";")[0]
        assert media in content, f"{where}: {media} not in {list(content)}"
        if media == "application/json":
            self._validate(answer.json(), content[media]["schema"], where)

    def sse_frames(self, frames: list[SseFrame]) -> None:
        content = self.doc["paths"]["/v1/sessions/{id}/events"]["get"]["responses"]["200"]
        schema = content["content"]["text/event-stream"]["x-runnerd-sse-data"]
        for frame in frames:
            self._validate(frame.data, schema, f"SSE frame {frame.raw}")
            assert frame.event == (frame.data.get("type") or "gap"), frame.raw


async def conformance(client: httpx.AsyncClient) -> Conformance:
    answer = await client.get("/v1/openapi.json")
    assert answer.status_code == 200
    return Conformance(answer.json())


async def test_answers_of_every_route_match_the_document(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    async with start_daemon(tmp_path, on_backend.overrides()) as daemon, daemon.client() as client:
        check = await conformance(client)
        await _check_meta_routes(check, client)
        await _check_session_lifecycle(check, daemon, client)
        await _check_errors(check, client)
    assert ("/v1/sessions/{id}", "get", 200) in check.checked


async def _check_meta_routes(check: Conformance, client: httpx.AsyncClient) -> None:
    check.response("/v1/health", await client.get("/v1/health"))
    check.response("/v1/capabilities", await client.get("/v1/capabilities"))
    for config in (SH_CONFIG, {"image": "nosuch", "pullPolicy": "never"}):
        check.response("/v1/probe", await client.post("/v1/probe", json={"config": config}))
    check.response("/v1/openapi.json", await client.get("/v1/openapi.json"))


async def _check_session_lifecycle(
    check: Conformance, daemon: Daemon, client: httpx.AsyncClient
) -> None:
    created = await client.post("/v1/sessions", json=bundle_body("exit 3"))
    check.response("/v1/sessions", created)
    done = created.json()["sessionId"]
    live = await start_session(client, "echo up; exec sleep 30")
    await wait_status(client, live, "running", timeout_s=30)
    check.response("/v1/sessions/{id}", await client.get(f"/v1/sessions/{live}"))
    await wait_terminal(client, done, timeout_s=30)
    check.response("/v1/sessions/{id}", await client.get(f"/v1/sessions/{done}"))
    check.response("/v1/sessions", await client.get("/v1/sessions"))
    check.response("/v1/sessions/{id}", await client.delete(f"/v1/sessions/{live}"))
    check.response("/v1/sessions/{id}", await client.get(f"/v1/sessions/{live}"))
    for session_id in (done, live):
        events = f"/v1/sessions/{session_id}/events"
        async with client.stream("GET", events) as streamed:
            check.response("/v1/sessions/{id}/events", streamed)
        check.sse_frames(await read_events(client, session_id))


async def _check_errors(check: Conformance, client: httpx.AsyncClient) -> None:
    bad_env = bundle_body("exit 0", env={"": "x"})
    for body in ({}, bad_env, {"env": {}}, {"env": {}, "app": "nosuch"}):
        check.response("/v1/sessions", await client.post("/v1/sessions", json=body))
    text = {"content-type": "text/plain"}
    check.response("/v1/sessions", await client.post("/v1/sessions", content=b"{}", headers=text))
    evil = {"origin": "http://evil.example"}
    check.response("/v1/capabilities", await client.get("/v1/capabilities", headers=evil))
    check.response("/v1/sessions/{id}", await client.get("/v1/sessions/aaaaaaaaaaaa"))
    check.response("/v1/sessions/{id}/events", await client.get("/v1/sessions/aaaaaaaaaaaa/events"))
    check.response("/v1/sessions/{id}/io", await client.get("/v1/sessions/aaaaaaaaaaaa/io"))
    for route in ("/v1/health", "/v1/capabilities", "/v1/openapi.json"):
        check.response(route, await client.post(route))  # no content-type: still 405
    check.response("/v1/probe", await client.get("/v1/probe"))


async def test_sse_payloads_with_reachability_and_a_gap_match_the_document(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    overrides = on_backend.overrides({"runner": {"replay_buffer_bytes": 120}})
    async with start_daemon(tmp_path, overrides) as daemon, daemon.client() as client:
        check = await conformance(client)
        ports = [{"port": 8080, "protocol": "tcp"}]
        session_id = await start_session(client, "echo hi; exit 0", ports=ports)
        await wait_terminal(client, session_id, timeout_s=30)
        frames = await read_events(client, session_id)
        check.sse_frames(frames)
    assert frames[0].event == "gap"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"env": {"": "x"}}, "env"),
        ({"env": {"A": "x\u0000y"}}, "env"),
        ({"env": {}}, "bundle"),
        ({"env": {}, "app": None, "bundle": None, "config": None}, "bundle"),
    ],
    ids=["empty-env-key", "nul-in-env-value", "no-bundle-no-app", "nulls"],
)
async def test_the_start_schema_refuses_what_the_daemon_refuses(
    runnerd: Daemon, body: dict[str, Any], field: str
) -> None:
    async with runnerd.client() as client:
        doc = (await client.get("/v1/openapi.json")).json()
        answer = await client.post("/v1/sessions", json=body)
    assert answer.status_code == 400, answer.text
    root = {"components": doc["components"], "$ref": "#/components/schemas/StartSessionRequest"}
    errors = list(jsonschema.Draft202012Validator(root).iter_errors(body))
    assert errors, f"the document accepts {json.dumps(body)}, the daemon refused it"
    assert field in answer.json()["message"]
