"""Bad bytes from a client are a clear 4xx, never a 500 or a dead handler.

Each case is what a fuzzer found against a real daemon: deep JSON on every
POST route, lone surrogates, absurd bundle paths, deep JSON in a WebSocket
text frame. A refused start leaves nothing behind.
"""

from __future__ import annotations

import json

import pytest

from runnerd.contract import MAX_JSON_DEPTH
from runnerd.session.paths import MAX_PATH_DEPTH
from tests.e2e.contract_client import bundle_body, read_pty, resize_message, start_session
from tests.harness import open_ws
from tests.shared_daemon import shared_runnerd_on_each_backend

JSON = {"content-type": "application/json"}

# Every test taking `runnerd` runs on both backends.
__all__ = ["shared_runnerd_on_each_backend"]


@pytest.mark.parametrize("path", ["/v1/sessions", "/v1/apps/x/sessions", "/v1/probe"])
async def test_deeply_nested_json_is_400_naming_the_limit(runnerd, path: str) -> None:
    deep = b'{"env": {}, "config": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    async with runnerd.client() as client:
        response = await client.post(path, content=deep, headers=JSON)
        health = await client.get("/v1/health")
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_request"
    assert f"limit of {MAX_JSON_DEPTH} levels" in response.json()["message"]
    assert health.status_code == 200
    assert "Traceback" not in runnerd.stderr_text()


async def test_lone_surrogate_in_env_is_400_naming_the_key(runnerd) -> None:
    rest = bundle_body("echo should-not-run")
    del rest["env"]
    # JSON escapes, as a client's encoder writes them: a proper pair, then a lone half.
    env = b'{"env": {"GOOD": "\\ud83d\\ude00", "BAD": "x\\ud800"}, '
    body = env + json.dumps(rest).encode()[1:]
    async with runnerd.client() as client:
        response = await client.post("/v1/sessions", content=body, headers=JSON)
    assert response.status_code == 400, response.text
    assert response.json()["message"].startswith("body.env.BAD contains a lone surrogate")
    assert runnerd.session_dirs() == []


async def test_absurd_bundle_paths_are_400_invalid_bundle(runnerd) -> None:
    deep = "/".join(["d"] * 2000) + "/main.sh"
    cases = {
        "deep": deep,
        "long name": "n" * 300 + ".sh",
        "long path": "/".join(["a" * 200] * 6),
    }
    async with runnerd.client() as client:
        answers = {}
        for name, path in cases.items():
            body = bundle_body("true")
            body["bundle"]["entryRelativePath"] = path
            body["bundle"]["files"][0]["relativePath"] = path
            answers[name] = await client.post("/v1/sessions", json=body)
    for name, response in answers.items():
        assert response.status_code == 400, (name, response.text)
        assert response.json()["error"] == "invalid_bundle", name
    assert f"deeper than {MAX_PATH_DEPTH} directories" in answers["deep"].json()["message"]
    assert "longer than 255 bytes" in answers["long name"].json()["message"]
    assert "longer than 1024 bytes" in answers["long path"].json()["message"]
    assert runnerd.session_dirs() == []


async def test_deep_or_huge_websocket_text_is_ignored_and_the_channel_lives(runnerd) -> None:
    script = 'echo ready; read line; echo "got:$line"; stty size; exit 0'
    async with runnerd.client() as client:
        session_id = await start_session(client, script)
        async with open_ws(runnerd.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            transcript = await read_pty(ws, until=b"ready")
            await ws.send_message("[" * 100_000)
            await ws.send_message('{"type": "resize", "x": ' + "[" * 900 + "]" * 900 + "}")
            await ws.send_message(" " * 5000 + resize_message(11, 7))
            await ws.send_message(resize_message(33, 22))
            await ws.send_message(b"still here\n")
            await read_pty(ws, transcript)
    assert b"got:still here" in transcript.output
    assert b"22 33" in transcript.output  # the last resize wins; the padded one was ignored
    assert transcript.close is not None
    assert (transcript.close.code, transcript.close.reason) == (1000, "session terminal")
