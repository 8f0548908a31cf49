"""Operator-predefined apps and the workload environment: catalog values win
over the client's, reach the workload, and never reach a client or the log;
`TELO_REGISTRY_URL` precedence for bundle sessions. On both backends (on
kubernetes the catalog's image is a test-cluster image running the same
command: `tests.shared_daemon.OnBackend`)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.contract_client import SSE_TIMEOUT, bundle_body, read_pty, start_session
from tests.harness import open_ws, start_daemon
from tests.shared_daemon import OnBackend

SECRET = "s3cr3t-0f-the-operator-91c7"
ECHO_ENV = "echo TOKEN=$DEMO_TOKEN MODE=$MODE EXTRA=$EXTRA REG=$TELO_REGISTRY_URL."
OVERRIDES = {
    "runner": {"registry_url": "https://registry.example"},
    "local": {"runtimes": {"envdump": {"command": ["/bin/sh", "-c", ECHO_ENV]}}},
    "apps": {
        "demo": {
            "image": "envdump",
            "title": "Demo",
            "env": {"DEMO_TOKEN": SECRET, "MODE": "operator"},
        }
    },
}
CLIENT_ENV = {"DEMO_TOKEN": "from-client", "MODE": "client", "EXTRA": "kept"}


async def _output(daemon, session_id: str) -> bytes:
    async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
        return (await read_pty(ws)).output


async def test_app_env_wins_reaches_workload_and_stays_secret(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    overrides = on_backend.overrides(OVERRIDES)
    async with start_daemon(tmp_path, overrides) as daemon, daemon.client() as client:
        by_body = await client.post("/v1/sessions", json={"env": CLIENT_ENV, "app": "demo"})
        by_path = await client.post("/v1/apps/demo/sessions", json={"env": CLIENT_ENV})
        assert by_body.status_code == 201 and by_path.status_code == 201
        client_visible = [by_body.text, by_path.text]
        outputs = []
        for created in (by_body, by_path):
            session_id = created.json()["sessionId"]
            outputs.append(await _output(daemon, session_id))
            async with client.stream(
                "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
            ) as response:
                client_visible.append((await response.aread()).decode())
            client_visible.append((await client.get(f"/v1/sessions/{session_id}")).text)
        client_visible.append((await client.get("/v1/capabilities")).text)
        client_visible.append((await client.get("/v1/openapi.json")).text)
        # Error answers about the app, too.
        for path, body in [
            ("/v1/apps/demo/sessions", {"env": {"DEMO_TOKEN": 1}}),
            ("/v1/apps/demo/sessions", {"ports": [{"port": 0, "protocol": "tcp"}]}),
            ("/v1/sessions", {"env": {}, "app": "nope"}),
            ("/v1/apps/nope/sessions", {}),
        ]:
            response = await client.post(path, json=body)
            assert response.status_code >= 400
            client_visible.append(response.text)
        # A probe agrees with a start: an app's image is not a bundle image
        # (starting it is 400 invalid_config), and no probe answer lists it.
        for image in ("envdump", "no-such-runtime"):
            config = {"image": image, "pullPolicy": "missing"}
            probed = await client.post("/v1/probe", json={"config": config})
            assert probed.status_code == 200 and probed.json()["status"] == "unavailable"
            if image != "envdump":  # the one a client asked about is echoed back
                assert "envdump" not in probed.text
        body = bundle_body("exit 0")
        body["config"]["image"] = "envdump"
        started = await client.post("/v1/sessions", json=body)
        assert started.status_code == 400 and started.json()["error"] == "invalid_config"
        assert "envdump" not in (await client.get("/v1/capabilities")).text
        session_ids = [created.json()["sessionId"] for created in (by_body, by_path)]
        log = daemon.stderr_text()
    for output in outputs:
        # Operator values win; client keys the catalog does not define pass.
        assert f"TOKEN={SECRET} MODE=operator EXTRA=kept".encode() in output
        assert b"REG=https://registry.example." in output
    for text in client_visible:
        assert SECRET not in text
    assert SECRET not in log
    for session_id in session_ids:
        assert session_id in log  # the log did record the sessions


async def test_registry_url_precedence_for_bundle_sessions(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    script = 'echo "REG=$TELO_REGISTRY_URL."'
    overrides = on_backend.overrides(OVERRIDES)
    async with start_daemon(tmp_path, overrides) as daemon, daemon.client() as client:
        default = await start_session(client, script)
        body = bundle_body(script)
        body["config"]["registryUrl"] = "  https://override.example  "
        override = (await client.post("/v1/sessions", json=body)).json()["sessionId"]
        body["config"]["registryUrl"] = "   "
        blank = (await client.post("/v1/sessions", json=body)).json()["sessionId"]
        explicit = await start_session(
            client, script, env={"TELO_REGISTRY_URL": "https://env.example"}
        )
        found = {
            name: re.search(rb"REG=(.*?)\.\r\n", await _output(daemon, sid)).group(1)
            for name, sid in [
                ("default", default),
                ("override", override),
                ("blank", blank),
                ("explicit", explicit),
            ]
        }
    assert found == {
        "default": b"https://registry.example",
        "override": b"https://override.example",
        "blank": b"https://registry.example",
        "explicit": b"https://env.example",
    }
