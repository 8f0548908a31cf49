"""A real daemon's answers to the watch routes validated against its own
`/v1/openapi.json` (as tests/e2e/test_openapi_conformance.py does for the
rest): every status documented for its route, every JSON body matching the
documented schema, on a running, a suspended and a run session."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.e2e.contract_client import SSE_TIMEOUT, start_session
from tests.e2e.test_openapi_conformance import Conformance, conformance
from tests.e2e.test_watch_limits import wait_suspended
from tests.e2e.watch_client import route, start_watch, wait_running, watch_body
from tests.harness import start_daemon

WS = "/v1/sessions/{id}/workspace"
RELOAD = "/v1/sessions/{id}/reload"
APPS = "/v1/sessions/{id}/apps"
RESUME = "/v1/sessions/{id}/resume"
OVERRIDES = {
    "watch": {"enabled": True, "idle_seconds": 1, "reload_limit": 6},
    "apps": {"helper": {"image": "idle", "port": 7070, "token_env": "T"}},
    "local": {"runtimes": {"idle": {"command": ["/bin/sh", "-c", "exec sleep 600"]}}},
}


async def test_watch_answers_match_the_document(tmp_path: Path) -> None:
    async with start_daemon(tmp_path, OVERRIDES) as daemon, daemon.client() as client:
        check = await conformance(client)
        check.response("/v1/capabilities", await client.get("/v1/capabilities"))
        bad = watch_body(apps=[{"name": "Bad", "entryRelativePath": "a"}])
        check.response("/v1/sessions", await client.post("/v1/sessions", json=bad))
        session_id = await start_watch(client, agent="helper")
        await wait_running(client, session_id)
        # An open event stream keeps the session from its 1 s idle suspend
        # until the running part is done.
        events = client.stream("GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT)
        async with events as subscribed:
            assert subscribed.status_code == 200
            await _running_answers(check, client, session_id)
        await wait_suspended(client, session_id)
        check.response(WS, await route(client, "GET", session_id, "workspace"))
        check.response("/v1/sessions/{id}", await client.get(f"/v1/sessions/{session_id}"))
        check.response(RESUME, await route(client, "POST", session_id, "resume"))
        run_id = await start_session(client, "exec sleep 600")
        check.response(WS, await route(client, "GET", run_id, "workspace"))
        check.response("/v1/sessions/{id}", await client.get(f"/v1/sessions/{run_id}"))
        await client.delete(f"/v1/sessions/{run_id}")
    assert {
        (WS, "get", 200), (WS, "get", 409), (WS, "post", 200), (WS, "post", 400),
        (f"{WS}/file", "get", 200), (f"{WS}/file", "get", 404),
        (RELOAD, "post", 202), (RELOAD, "post", 404), (RELOAD, "post", 429),
        (APPS, "put", 202), (APPS, "put", 400), (RESUME, "post", 202), (RESUME, "post", 404),
    } <= check.checked  # fmt: skip


async def _running_answers(check: Conformance, client: httpx.AsyncClient, session_id: str) -> None:
    """Every watch route's answers on a running session, the budget spent last
    (6: the write and a reload, then four more; the refused path and the
    unknown app are not counted)."""
    change = {"write": [{"path": "a.txt", "content": "a"}]}
    b64 = {"path": "a.txt", "encoding": "base64"}
    new_set = {"apps": [{"name": "app", "entryRelativePath": "serve.sh"}]}
    answers = [
        ("/v1/sessions/{id}", await client.get(f"/v1/sessions/{session_id}")),
        ("/v1/sessions", await client.get("/v1/sessions")),
        (WS, await route(client, "GET", session_id, "workspace")),
        (WS, await route(client, "POST", session_id, "workspace", json=change)),
        (WS, await route(client, "POST", session_id, "workspace", json={"delete": [".."]})),
        (f"{WS}/file", await route(client, "GET", session_id, "workspace/file", params=b64)),
        (f"{WS}/file", await route(client, "GET", session_id, "workspace/file",
                                   params={"path": "none"})),
        (RELOAD, await route(client, "POST", session_id, "reload")),
        (RELOAD, await route(client, "POST", session_id, "reload", params={"app": "x"})),
        (APPS, await route(client, "PUT", session_id, "apps", json=new_set)),
        (APPS, await route(client, "PUT", session_id, "apps", json={"apps": []})),
        (RESUME, await route(client, "POST", session_id, "resume")),
    ]  # fmt: skip
    for template, answer in answers:
        check.response(template, answer)
    spent = [await route(client, "POST", session_id, "reload") for _ in range(5)]
    assert [r.status_code for r in spent] == [202, 202, 202, 202, 429]
    check.response(RELOAD, spent[-1])
