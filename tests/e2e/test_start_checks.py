"""`POST /v1/sessions` and `POST /v1/apps/{name}/sessions`: each check in the
contract's order with its own answer, and a rejected request changes nothing."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.contract_client import (
    SH_CONFIG,
    bundle_body,
    start_session,
    wait_terminal,
)
from tests.harness import start_daemon
from tests.shared_daemon import OnBackend, shared_runnerd_on_each_backend

TERMS = {"body": "Be excellent to each other.", "title": "House rules", "version": "v7"}
APPS = {"demo": {"image": "hello", "env": {"GREETING": "op"}}}
RUNTIMES = {"hello": {"command": ["/bin/sh", "-c", "echo hello $GREETING"]}}

# Every test taking `runnerd` runs on both backends.
__all__ = ["shared_runnerd_on_each_backend"]


async def test_schema_errors_are_400_naming_the_field(runnerd) -> None:
    async with runnerd.client() as client:
        bad_env = await client.post("/v1/sessions", json=bundle_body("true", env={"FOO": 1}))
        no_env = await client.post("/v1/sessions", json={"config": SH_CONFIG})
        bad_flag = await client.post("/v1/sessions", json={**bundle_body("true"), "inspect": "y"})
        bad_port = await client.post(
            "/v1/sessions", json=bundle_body("true", ports=[{"port": 0, "protocol": "tcp"}])
        )
        not_object = await client.post("/v1/sessions", json=["env"])
    for response, field in [
        (bad_env, "body.env.FOO"),
        (no_env, "body.env"),
        (bad_flag, "body.inspect"),
        (bad_port, "body.ports[0].port"),
        (not_object, "body"),
    ]:
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "invalid_request"
        assert field in response.json()["message"], response.json()
    assert "must be a string" in bad_env.json()["message"]


async def test_terms_gate_is_428_until_the_header_names_the_version(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    async with (
        start_daemon(tmp_path, on_backend.overrides({"terms": TERMS})) as daemon,
        daemon.client() as client,
    ):
        caps = (await client.get("/v1/capabilities")).json()
        missing = await client.post("/v1/sessions", json=bundle_body("true"))
        wrong = await client.post(
            "/v1/sessions", json=bundle_body("true"), headers={"x-telo-accepted-terms": "v6"}
        )
        accepted = await client.post(
            "/v1/sessions", json=bundle_body("true"), headers={"x-telo-accepted-terms": "v7"}
        )
        # Schema comes before terms.
        schema_first = await client.post("/v1/sessions", json={"env": 1})
    assert caps["terms"] == {"version": "v7", "title": "House rules", "body": TERMS["body"]}
    for response in (missing, wrong):
        assert response.status_code == 428
        body = response.json()
        assert body["error"] == "terms_required"
        assert body["message"]
        assert body["terms"] == caps["terms"]
    assert accepted.status_code == 201
    assert schema_first.status_code == 400


async def test_unknown_app_is_400_naming_offered_apps(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    overrides = {"local": {"runtimes": RUNTIMES}, "apps": APPS}
    async with (
        start_daemon(tmp_path, on_backend.overrides(overrides)) as daemon,
        daemon.client() as client,
    ):
        response = await client.post("/v1/sessions", json={"env": {}, "app": "nope"})
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "unknown_app"
    assert "nope" in body["message"] and "demo" in body["message"]
    assert "/v1/capabilities" in body["message"]


async def test_unknown_app_without_catalog_says_there_are_none(runnerd) -> None:
    async with runnerd.client() as client:
        response = await client.post("/v1/sessions", json={"env": {}, "app": "nope"})
    assert response.status_code == 400
    assert response.json()["error"] == "unknown_app"
    message = response.json()["message"]
    assert "nope" in message and "/v1/capabilities" in message
    assert "no predefined applications" in message


async def test_apps_route_unknown_name_is_404_before_terms(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    overrides = {"local": {"runtimes": RUNTIMES}, "apps": APPS, "terms": TERMS}
    async with (
        start_daemon(tmp_path, on_backend.overrides(overrides)) as daemon,
        daemon.client() as client,
    ):
        unknown = await client.post("/v1/apps/nope/sessions", json={})
        known_no_terms = await client.post("/v1/apps/demo/sessions", json={})
        known = await client.post(
            "/v1/apps/demo/sessions", json={}, headers={"x-telo-accepted-terms": "v7"}
        )
        # Terms come before the app check on the plain route.
        terms_first = await client.post("/v1/sessions", json={"env": {}, "app": "nope"})
    assert unknown.status_code == 404
    assert unknown.json()["error"] == "unknown_app"
    assert known_no_terms.status_code == 428
    assert known.status_code == 201
    assert terms_first.status_code == 428


async def test_bundle_session_needs_bundle_and_config(runnerd) -> None:
    async with runnerd.client() as client:
        no_bundle = await client.post("/v1/sessions", json={"env": {}, "config": SH_CONFIG})
        body = bundle_body("true")
        del body["config"]
        no_config = await client.post("/v1/sessions", json=body)
    for response in (no_bundle, no_config):
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_request"
        assert "bundle" in response.json()["message"]


async def test_escaping_bundle_paths_are_400_invalid_bundle(runnerd) -> None:
    escaping_entries = ["../main.sh", "a/../../main.sh", ".", "./", "/../x"]
    async with runnerd.client() as client:
        answers = []
        for entry in escaping_entries:
            body = bundle_body("true")
            body["bundle"]["entryRelativePath"] = entry
            answers.append((entry, await client.post("/v1/sessions", json=body)))
        body = bundle_body("true")
        body["bundle"]["files"].append({"relativePath": "lib/../../../etc/x", "contents": ""})
        answers.append(("lib/../../../etc/x", await client.post("/v1/sessions", json=body)))
        # The path check comes before the image check.
        body = bundle_body("true")
        body["bundle"]["entryRelativePath"] = "../x"
        body["config"] = {"image": "not-allowed", "pullPolicy": "missing"}
        answers.append(("../x", await client.post("/v1/sessions", json=body)))
    for path, response in answers:
        assert response.status_code == 400, (path, response.text)
        assert response.json()["error"] == "invalid_bundle", (path, response.json())


async def test_disallowed_image_is_400_invalid_config_naming_allowed(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    overrides = {"runner": {"allowed_images": ["sh"]}}
    async with (
        start_daemon(tmp_path, on_backend.overrides(overrides)) as daemon,
        daemon.client() as client,
    ):
        body = bundle_body("true")
        body["config"] = {"image": "python", "pullPolicy": "missing"}
        response = await client.post("/v1/sessions", json=body)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_config"
    assert "sh" in response.json()["message"]


async def test_capacity_evicts_oldest_terminal_then_409_when_all_live(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    overrides = {"runner": {"max_sessions": 2}}
    async with (
        start_daemon(tmp_path, on_backend.overrides(overrides)) as daemon,
        daemon.client() as client,
    ):
        done = await start_session(client, "exit 0")
        assert (await wait_terminal(client, done))["kind"] == "exited"
        live_a = await start_session(client, "exec sleep 30")
        # The registry is full (one terminal, one live): the terminal one makes room.
        live_b = await start_session(client, "exec sleep 30")
        assert (await client.get(f"/v1/sessions/{done}")).status_code == 404
        full = await client.post("/v1/sessions", json=bundle_body("exec sleep 30"))
        assert full.status_code == 409
        assert full.json()["error"] == "too_many_sessions"
        assert full.json()["message"]
        # A stopped session is terminal: it frees its slot for the next start.
        assert (await client.delete(f"/v1/sessions/{live_a}")).status_code == 204
        again = await client.post("/v1/sessions", json=bundle_body("exec sleep 30"))
        assert again.status_code == 201
        # live_b is untouched: still live (it may still be starting: the
        # namespace's init takes a few tens of ms to exec the workload).
        kind = (await client.get(f"/v1/sessions/{live_b}")).json()["status"]["kind"]
        assert kind in ("starting", "running")


async def test_rejected_requests_change_no_state(tmp_path: Path, on_backend: OnBackend) -> None:
    overrides = {
        "runner": {"max_sessions": 1, "allowed_images": ["sh"]},
        "local": {"runtimes": RUNTIMES},
        "apps": APPS,
        "terms": TERMS,
    }
    terms = {"x-telo-accepted-terms": "v7"}
    traversal = bundle_body("true")
    traversal["bundle"]["entryRelativePath"] = "../evil.sh"
    bad_image = bundle_body("true")
    bad_image["config"] = {"image": "python", "pullPolicy": "missing"}
    async with (
        start_daemon(tmp_path, on_backend.overrides(overrides)) as daemon,
        daemon.client() as client,
    ):
        rejected = [
            await client.post("/v1/sessions", json={"env": 5}, headers=terms),
            await client.post("/v1/sessions", json=bundle_body("true")),
            await client.post("/v1/sessions", json={"env": {}, "app": "nope"}, headers=terms),
            await client.post("/v1/sessions", json={"env": {}}, headers=terms),
            await client.post("/v1/sessions", json=traversal, headers=terms),
            await client.post("/v1/sessions", json=bad_image, headers=terms),
            await client.post("/v1/apps/nope/sessions", json={}, headers=terms),
        ]
        assert [r.status_code for r in rejected] == [400, 428, 400, 400, 400, 400, 404]
        # Nothing was registered or written: the one slot is still free, and
        # the workdir holds no session directory (on kubernetes, nothing at all).
        assert daemon.session_dirs() == []
        sleeper = bundle_body("exec sleep 30")
        assert (await client.post("/v1/sessions", json=sleeper, headers=terms)).status_code == 201
        full = await client.post("/v1/sessions", json=sleeper, headers=terms)
        assert full.status_code == 409
