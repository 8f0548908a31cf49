"""Watch sessions refused, through a real daemon with watch on: each start
check of the contract's section (1 to 11) with its own answer, the session
routes' shared errors (`404 not_found`, then `409 not_a_watch_session`,
before any body is read) and `POST /resume`'s `404 not_suspended`, and
`/v1/capabilities` with watch on. A refused request changes no state: the
listing and the session directories are the same after it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.contract_client import bundle_body, start_session
from tests.e2e.watch_client import error_of, route, watch_body
from tests.harness import start_daemon
from tests.shared_daemon import SharedDaemon, shared_daemon

CATALOG = {
    "helper": {"image": "idle", "port": 7070, "token_env": "HELPER_TOKEN"},
    "portless": {"image": "idle"},
}
WATCH_ON = {
    "watch": {"enabled": True},
    "apps": CATALOG,
    "local": {"runtimes": {"idle": {"command": ["/bin/sh", "-c", "exec sleep 600"]}}},
}
UNKNOWN = "aaaaaaaaaaaa"
# Every workspace, reload and apps route, with a body that is wrong for it
# (the shared errors come before the body is read).
ROUTES: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "workspace", {}),
    (
        "POST",
        "workspace",
        {"content": b"not json", "headers": {"content-type": "application/json"}},
    ),
    ("GET", "workspace/file", {"params": {"path": "../x"}}),
    ("POST", "reload", {"params": {"app": "nope"}}),
    ("PUT", "apps", {"json": {"apps": []}}),
]


@pytest.fixture(scope="module", name="runnerd")
def watch_runnerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    with shared_daemon(tmp_path_factory.mktemp("runnerd"), WATCH_ON) as daemon:
        yield daemon


async def _state(runnerd: SharedDaemon, client: httpx.AsyncClient) -> tuple[Any, list[str]]:
    listed = await client.get("/v1/sessions")
    assert listed.status_code == 200
    return listed.json()["sessions"], runnerd.session_dirs()


def _app(name: str, entry: str = "serve.sh", **extra: Any) -> dict[str, Any]:
    return {"name": name, "entryRelativePath": entry, **extra}


TCP_1 = {"port": 4000, "protocol": "tcp"}
START_REFUSALS: list[tuple[dict[str, Any], int, str, str]] = [
    ({"apps": []}, 400, "invalid_request", "body.apps"),
    ({"apps": [_app("a", io="pty")]}, 400, "invalid_request", "body.apps[0].io"),
    ({"apps": [_app("a" * 64)]}, 400, "invalid_request", "body.apps[0].name"),
    ({"mode": "live"}, 400, "invalid_request", "body.mode"),
    ({"app": "nope"}, 400, "unknown_app", "helper"),
    ({"app": "helper"}, 400, "invalid_request", "body.app"),
    (
        {
            "bundle": {
                "entryRelativePath": "serve.sh",
                "files": [{"relativePath": "../x", "contents": ""}],
            }
        },
        400,
        "invalid_bundle",
        "../x",
    ),
    ({"agent": "nope"}, 400, "unknown_agent", "helper"),
    ({"agent": "portless"}, 400, "agent_port_undeclared", "portless"),
    ({"apps": [_app("Web")]}, 400, "invalid_app_name", "body.apps[0].name"),
    ({"apps": [_app("workspace")]}, 400, "reserved_app_name", "'workspace'"),
    ({"apps": [_app("a"), _app("a")]}, 400, "duplicate_app_name", "body.apps[1].name"),
    ({"apps": [_app("a", "../x.sh")]}, 400, "invalid_bundle", "body.apps[0].entryRelativePath"),
    (
        {"apps": [_app("a", ports=[TCP_1]), _app("b", ports=[TCP_1])]},
        400,
        "port_conflict",
        "app 'a'",
    ),
]


@pytest.mark.parametrize(("over", "status", "code", "named"), START_REFUSALS)
async def test_watch_start_refusals_answer_each_with_its_code_and_change_nothing(
    runnerd: SharedDaemon, over: dict[str, Any], status: int, code: str, named: str
) -> None:
    async with runnerd.client() as client:
        before = await _state(runnerd, client)
        response = await client.post("/v1/sessions", json={**watch_body(), **over})
        after = await _state(runnerd, client)
    assert error_of(response) == (status, code), response.text
    assert named in response.json()["message"]
    assert after == before


async def test_watch_start_order_image_before_watch_checks(runnerd: SharedDaemon) -> None:
    body = {**watch_body(apps=[_app("Bad")]), "agent": "nope"}
    body["config"] = {"image": "evil", "pullPolicy": "missing"}
    async with runnerd.client() as client:
        image = await client.post("/v1/sessions", json=body)
        body["config"] = {"image": "sh", "pullPolicy": "missing"}
        agent = await client.post("/v1/sessions", json=body)
    assert error_of(image) == (400, "invalid_config")
    assert error_of(agent) == (400, "unknown_agent")  # 8 before 10


async def test_app_route_stays_run_only(runnerd: SharedDaemon) -> None:
    async with runnerd.client() as client:
        response = await client.post("/v1/apps/helper/sessions", json={"mode": "watch"})
        assert response.status_code == 201, response.text
        session_id = response.json()["sessionId"]
        got = (await client.get(f"/v1/sessions/{session_id}")).json()
        await client.delete(f"/v1/sessions/{session_id}")
    assert got["mode"] == "run"


async def test_capabilities_with_watch_on_list_io_watch_and_agents(runnerd: SharedDaemon) -> None:
    async with runnerd.client() as client:
        document = (await client.get("/v1/capabilities")).json()
    assert document["features"] == {
        "io": ["tty", "streams"],
        "ports": True,
        "watch": True,
        "agents": ["helper"],
    }
    assert "HELPER_TOKEN" not in str(document) and "7070" not in str(document)


@pytest.mark.parametrize(("method", "tail", "kwargs"), ROUTES)
async def test_session_routes_on_an_unknown_id_are_404_not_found(
    runnerd: SharedDaemon, method: str, tail: str, kwargs: dict[str, Any]
) -> None:
    async with runnerd.client() as client:
        response = await route(client, method, UNKNOWN, tail, **kwargs)
    assert error_of(response) == (404, "not_found")


@pytest.mark.parametrize(("method", "tail", "kwargs"), ROUTES)
async def test_session_routes_on_a_run_session_are_409_not_a_watch_session(
    runnerd: SharedDaemon, method: str, tail: str, kwargs: dict[str, Any]
) -> None:
    async with runnerd.client() as client:
        session_id = await start_session(client, "exec sleep 600")
        before = (await client.get(f"/v1/sessions/{session_id}")).json()
        response = await route(client, method, session_id, tail, **kwargs)
        after = (await client.get(f"/v1/sessions/{session_id}")).json()
        await client.delete(f"/v1/sessions/{session_id}")
    assert error_of(response) == (409, "not_a_watch_session"), response.text
    assert "run session" in response.json()["message"]
    assert after["mode"] == "run" and after["apps"] == before["apps"]


async def test_resume_of_an_unknown_or_run_session_is_404_not_suspended(
    runnerd: SharedDaemon,
) -> None:
    async with runnerd.client() as client:
        session_id = await start_session(client, "exec sleep 600")
        unknown = await route(client, "POST", UNKNOWN, "resume")
        run = await route(client, "POST", session_id, "resume")
        status = (await client.get(f"/v1/sessions/{session_id}")).json()["status"]
        await client.delete(f"/v1/sessions/{session_id}")
    assert error_of(unknown) == (404, "not_suspended")
    assert error_of(run) == (404, "not_suspended")
    assert status["kind"] in ("starting", "running")


async def test_run_session_get_shows_mode_run_and_one_app(runnerd: SharedDaemon) -> None:
    ports = [{"port": 4321, "protocol": "tcp"}]
    async with runnerd.client() as client:
        created = await client.post("/v1/sessions", json=bundle_body("true", ports=ports))
        session_id = created.json()["sessionId"]
        got = (await client.get(f"/v1/sessions/{session_id}")).json()
        listed = (await client.get("/v1/sessions")).json()["sessions"]
    entry = next(s for s in listed if s["sessionId"] == session_id)
    app = {"name": "app", "io": "tty", "generation": 0, "ports": ports}
    for body in (got, entry):
        assert (body["mode"], body["apps"], "agent" in body) == ("run", [app], False)


async def test_terms_then_registry_full_for_a_watch_start(tmp_path: Path) -> None:
    """Check 2 (terms) before everything watch; check 11 (a registry full of
    live sessions) after every app check."""
    terms = {"body": "Be nice.", "version": "v3"}
    overrides = {**WATCH_ON, "terms": terms, "runner": {"max_sessions": 1}}
    accepted = {"x-telo-accepted-terms": "v3"}
    async with start_daemon(tmp_path, overrides) as daemon, daemon.client() as client:
        no_terms = await client.post("/v1/sessions", json=watch_body(agent="nope"))
        live = await client.post(
            "/v1/sessions", json=bundle_body("exec sleep 600"), headers=accepted
        )
        assert live.status_code == 201, live.text
        full = await client.post("/v1/sessions", json=watch_body(), headers=accepted)
        bad_app = await client.post(
            "/v1/sessions", json=watch_body(apps=[_app("Bad")]), headers=accepted
        )
        listed = (await client.get("/v1/sessions")).json()["sessions"]
    assert error_of(no_terms) == (428, "terms_required")
    assert error_of(full) == (409, "too_many_sessions")
    assert error_of(bad_app) == (400, "invalid_app_name")
    assert [s["sessionId"] for s in listed] == [live.json()["sessionId"]]


async def test_an_io_the_runner_does_not_offer_is_io_unsupported(tmp_path: Path) -> None:
    """Check 10's last answer, from a real daemon on a backend whose watch
    apps may only be `tty` (`tests/e2e/ttyonly.py`): `features.io` says so,
    a `streams` app is refused naming the app, and nothing was created."""
    command = [sys.executable, str(Path(__file__).with_name("ttyonly.py")), "serve", "--config"]
    overrides = {"runner": {"backend": "ttyonly"}, "watch": {"enabled": True}}
    async with start_daemon(tmp_path, overrides, command=command) as daemon:
        async with daemon.client() as client:
            features = (await client.get("/v1/capabilities")).json()["features"]
            body = {
                "env": {},
                "mode": "watch",
                "config": {"image": "sh", "pullPolicy": "missing"},
                "bundle": {
                    "entryRelativePath": "main.sh",
                    "files": [{"relativePath": "main.sh", "contents": "echo hi\n"}],
                },
                "apps": [
                    {"name": "web", "entryRelativePath": "main.sh"},
                    {"name": "log", "entryRelativePath": "main.sh", "io": "streams"},
                ],
            }
            refused = await client.post("/v1/sessions", json=body)
            listed = (await client.get("/v1/sessions")).json()["sessions"]
    assert features["io"] == ["tty"] and features["watch"] is True
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"] == "io_unsupported"
    assert "body.apps[1].io 'streams'" in refused.json()["message"]
    assert listed == []
