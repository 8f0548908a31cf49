"""Watch sessions off (the default): a real daemon refuses `mode: "watch"`
with `400 watch_disabled` (it used to run it as a run session), `agent`
without it with `400 agent_requires_watch`, either refusal changes no
state, and the watch routes answer with their route errors only (`404
not_found`, `409 not_a_watch_session`, `404 not_suspended`;
`/v1/openapi.json` describing them: tests/http/test_openapi.py)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.e2e.contract_client import bundle_body, start_session, wait_terminal
from tests.e2e.test_watch_refusals import ROUTES, UNKNOWN
from tests.e2e.watch_client import error_of, route

APPS = [{"name": "web", "entryRelativePath": "main.sh", "io": "streams"}]


async def _listed(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    response = await client.get("/v1/sessions")
    assert response.status_code == 200
    sessions: list[dict[str, Any]] = response.json()["sessions"]
    return sessions


async def test_watch_mode_is_400_watch_disabled_and_changes_nothing(runnerd) -> None:
    async with runnerd.client() as client:
        before = await _listed(client)
        dirs = runnerd.session_dirs()
        plain = await client.post("/v1/sessions", json={**bundle_body("echo ran"), "mode": "watch"})
        with_apps = await client.post(
            "/v1/sessions", json={**bundle_body("echo ran"), "mode": "watch", "apps": APPS}
        )
        after = await _listed(client)
    for response in (plain, with_apps):
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "watch_disabled"
        assert response.json()["message"]
    assert after == before
    assert runnerd.session_dirs() == dirs


async def test_agent_without_watch_is_400_and_changes_nothing(runnerd) -> None:
    async with runnerd.client() as client:
        before = await _listed(client)
        response = await client.post("/v1/sessions", json={**bundle_body("true"), "agent": "x"})
        after = await _listed(client)
    assert response.status_code == 400
    assert response.json()["error"] == "agent_requires_watch"
    assert after == before


async def test_watch_fields_outside_their_schema_are_invalid_request(runnerd) -> None:
    async with runnerd.client() as client:
        mode = await client.post("/v1/sessions", json={**bundle_body("true"), "mode": "live"})
        empty = await client.post(
            "/v1/sessions", json={**bundle_body("true"), "mode": "watch", "apps": []}
        )
    assert mode.status_code == 400 and mode.json()["error"] == "invalid_request"
    assert "body.mode" in mode.json()["message"]
    assert empty.status_code == 400 and empty.json()["error"] == "invalid_request"
    assert "body.apps" in empty.json()["message"]


async def test_mode_run_is_a_run_session_and_capabilities_say_no_watch(runnerd) -> None:
    async with runnerd.client() as client:
        created = await client.post(
            "/v1/sessions", json={**bundle_body("exit 3"), "mode": "run", "apps": APPS}
        )
        assert created.status_code == 201, created.text
        status = await wait_terminal(client, created.json()["sessionId"])
        features = (await client.get("/v1/capabilities")).json()["features"]
    assert status == {"kind": "exited", "code": 3}
    assert features == {"io": True, "ports": True}


async def test_watch_routes_with_watch_off_answer_their_route_errors_only(runnerd) -> None:
    async with runnerd.client() as client:
        session_id = await start_session(client, "exec sleep 600")
        unknown = [await route(client, m, UNKNOWN, tail, **kw) for m, tail, kw in ROUTES]
        run = [await route(client, m, session_id, tail, **kw) for m, tail, kw in ROUTES]
        resumes = [await route(client, "POST", sid, "resume") for sid in (UNKNOWN, session_id)]
        await client.delete(f"/v1/sessions/{session_id}")
    assert {error_of(r) for r in unknown} == {(404, "not_found")}
    assert {error_of(r) for r in run} == {(409, "not_a_watch_session")}
    assert {error_of(r) for r in resumes} == {(404, "not_suspended")}
