"""Watch sessions through a real daemon on the local backend: create one,
read and write its workspace, see its apps restart on the event stream,
reload, replace the app set, the agent's token; and every error of the
workspace, reload and apps routes on a running session, each refusal
changing nothing (the listing and the apps are the same after it)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import trio

from tests.e2e.watch_client import (
    FILES,
    error_of,
    has_status,
    route,
    runs,
    start_watch,
    started,
    wait_frames,
    wait_running,
    wait_started,
    watch_body,
)
from tests.harness import open_ws
from tests.shared_daemon import SharedDaemon, shared_daemon

AGENT = (
    'printf %s "$HELPER_TOKEN" > token.txt; printf %s "$WORKSPACE_DIR" > where.txt; exec sleep 600'
)
OVERRIDES = {
    "watch": {"enabled": True},
    "apps": {"helper": {"image": "agent", "port": 7070, "token_env": "HELPER_TOKEN"}},
    "local": {"runtimes": {"agent": {"command": ["/bin/sh", "-c", AGENT]}}},
}
APPS = [
    {
        "name": "serve",
        "entryRelativePath": "serve.sh",
        "ports": [{"port": 4100, "protocol": "tcp"}],
    },
    {"name": "once", "entryRelativePath": "once.sh", "io": "streams"},
]


@pytest.fixture(scope="module", name="runnerd")
def watch_runnerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    with shared_daemon(tmp_path_factory.mktemp("runnerd"), OVERRIDES) as daemon:
        yield daemon


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def workspace(client: httpx.AsyncClient, session_id: str) -> list[dict[str, str]]:
    listed = await route(client, "GET", session_id, "workspace")
    assert listed.status_code == 200, listed.text
    files: list[dict[str, str]] = listed.json()["files"]
    return files


async def get(client: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    answer = await client.get(f"/v1/sessions/{session_id}")
    assert answer.status_code == 200
    body: dict[str, Any] = answer.json()
    return body


def completed(frames: list[Any], app: str, generation: int) -> bool:
    return any(
        e["phase"] == "completed" and e["generation"] == generation for e in runs(frames, app)
    )


async def test_watch_session_lists_its_apps_and_workspace(runnerd: SharedDaemon) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client, apps=APPS)
        frames = await wait_frames(
            client,
            session_id,
            lambda fs: has_status("running")(fs) and completed(fs, "once", 1),
        )
        body = await get(client, session_id)
        files = await workspace(client, session_id)
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        await client.delete(f"/v1/sessions/{session_id}")
    assert sorted((e["app"], e["trigger"]) for e in runs(frames) if e["phase"] == "started") == [
        ("once", "initial"),
        ("serve", "initial"),
    ]
    assert body["mode"] == "watch" and "agent" not in body
    assert [(a["name"], a["io"], a["ports"]) for a in body["apps"]] == [
        ("serve", "tty", [{"port": 4100, "protocol": "tcp"}]),
        ("once", "streams", []),
    ]
    assert all(a["generation"] >= 1 for a in body["apps"])
    assert files == [{"path": p, "hash": sha256(FILES[p])} for p in sorted(FILES)]
    entry = next(s for s in listed if s["sessionId"] == session_id)
    assert (entry["mode"], [a["name"] for a in entry["apps"]]) == ("watch", ["serve", "once"])
    assert entry["image"] == "sh"
    assert entry["ports"] == [{"port": 4100, "protocol": "tcp"}]
    # `once` printed a line and exited: its output is in its own ring.
    assert entry["apps"][1]["lastOutputSeq"] >= 1 and entry["lastOutputSeq"] == 0


async def test_a_write_is_visible_at_once_and_restarts_every_app(runnerd: SharedDaemon) -> None:
    change = {
        "write": [
            {"path": "./serve.sh", "content": "echo v2; exec sleep 600"},
            {"path": "lib//data.bin", "content": base64.b64encode(b"\x00\xff").decode(),
             "encoding": "base64"},
        ],
        "delete": ["never-there.txt"],
    }  # fmt: skip
    async with runnerd.client() as client:
        session_id = await start_watch(client, apps=APPS)
        await wait_running(client, session_id)
        written = await route(client, "POST", session_id, "workspace", json=change)
        files = await workspace(client, session_id)
        text = await route(client, "GET", session_id, "workspace/file", params={"path": "serve.sh"})
        raw = await route(
            client, "GET", session_id, "workspace/file",
            params={"path": "lib/data.bin", "encoding": "base64"},
        )  # fmt: skip
        lossy = await route(
            client, "GET", session_id, "workspace/file", params={"path": "lib/data.bin"}
        )
        frames = await wait_frames(
            client,
            session_id,
            lambda fs: started(fs, "serve", 2) is not None and started(fs, "once", 2) is not None,
        )
        await client.delete(f"/v1/sessions/{session_id}")
    assert (written.status_code, written.json()) == (200, {"written": 2, "deleted": 0})
    assert [f["path"] for f in files] == ["lib/data.bin", "once.sh", "serve.sh"]
    assert files[2]["hash"] == sha256("echo v2; exec sleep 600")
    assert text.json() == {"content": "echo v2; exec sleep 600", "size": 23}
    assert raw.json() == {"content": "AP8=", "size": 2}
    assert lossy.json() == {"content": "\x00\ufffd", "size": 2}
    for app in ("serve", "once"):
        event = started(frames, app, 2)
        assert event is not None and event["trigger"] == "watch"
        # Generation 1 ended before generation 2 began.
        phases = [(e["generation"], e["phase"]) for e in runs(frames, app)]
        assert phases.index((2, "started")) > max(
            i for i, (gen, _) in enumerate(phases) if gen == 1
        )


async def test_reload_and_replace_the_app_set(runnerd: SharedDaemon) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client, apps=APPS)
        await wait_running(client, session_id)
        one = await route(client, "POST", session_id, "reload", params={"app": "serve"})
        await wait_started(client, session_id, "serve", 2)
        every = await route(client, "POST", session_id, "reload")
        # Both restarts begun before the PUT (a restart still pending when
        # another is asked for is one restart, with the later trigger).
        await wait_frames(
            client,
            session_id,
            lambda fs: started(fs, "once", 2) is not None and started(fs, "serve", 3) is not None,
        )
        new_set = [
            {"name": "fresh", "entryRelativePath": "serve.sh", "io": "streams"},
            {"name": "serve", "entryRelativePath": "serve.sh"},
        ]
        replaced = await route(client, "PUT", session_id, "apps", json={"apps": new_set})
        body = await get(client, session_id)
        frames = await wait_frames(
            client,
            session_id,
            lambda fs: started(fs, "fresh", 1) is not None and started(fs, "serve", 4) is not None,
        )
        await client.delete(f"/v1/sessions/{session_id}")
    assert (one.status_code, one.json()) == (202, {"reloaded": ["serve"]})
    assert (every.status_code, every.json()) == (202, {"reloaded": ["serve", "once"]})
    assert (replaced.status_code, replaced.json()) == (202, {"apps": ["fresh", "serve"]})
    assert [(a["name"], a["io"], a["ports"]) for a in body["apps"]] == [
        ("fresh", "streams", []),
        ("serve", "tty", []),
    ]
    serve = [(e["generation"], e["trigger"]) for e in runs(frames, "serve") if "trigger" in e]
    assert serve[:4] == [(1, "initial"), (2, "manual"), (3, "manual"), (4, "resume")]
    fresh = started(frames, "fresh", 1)
    assert fresh is not None and fresh["trigger"] == "resume"


async def test_the_agent_gets_its_token_and_the_workspace(runnerd: SharedDaemon) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client, apps=APPS[1:], agent="helper")
        frames = await wait_frames(client, session_id, has_status("running"))
        running = next(f.data["status"] for f in frames if f.event == "status"
                       and f.data["status"]["kind"] == "running")  # fmt: skip
        body = await get(client, session_id)
        token = await _read_when_written(client, session_id, "token.txt")
        where = await _read_when_written(client, session_id, "where.txt")
        await client.delete(f"/v1/sessions/{session_id}")
    assert body["agent"] == "helper"
    agent = running["agent"]
    assert (agent["port"], agent["protocol"]) == (7070, "tcp")
    assert len(agent["token"]) == 32 and token == agent["token"]
    assert where.startswith("/")  # WORKSPACE_DIR: the workspace's absolute path
    assert "HELPER_TOKEN" not in str(body)


async def _read_when_written(client: httpx.AsyncClient, session_id: str, path: str) -> str:
    """A file the agent writes, once it exists (it starts beside the apps)."""
    with trio.fail_after(20):
        while True:
            answer = await route(client, "GET", session_id, "workspace/file", params={"path": path})
            if answer.status_code == 200 and answer.json()["size"]:
                return str(answer.json()["content"])
            assert error_of(answer) == (404, "file_not_found") or answer.status_code == 200
            await trio.sleep(0.05)  # a file has no event to wait on


WORKSPACE_REFUSALS: list[tuple[str, str, dict[str, Any], int, str, str]] = [
    ("POST", "workspace", {"content": b"{", "headers": {"content-type": "application/json"}},
     400, "invalid_request", "body"),
    ("POST", "workspace", {"json": {"write": [{"path": "a", "content": 5}]}},
     400, "invalid_request", "body.write[0].content"),
    ("POST", "workspace", {"json": {"write": [{"path": "a", "content": "AP8",
                                               "encoding": "base64"}]}},
     400, "invalid_request", "base64"),
    ("POST", "workspace", {"json": {"write": [{"path": "ok.txt", "content": "x"},
                                              {"path": "../up", "content": "x"}]}},
     400, "invalid_path", "body.write[1].path"),
    ("POST", "workspace", {"json": {"delete": ["/etc/passwd"]}}, 400, "invalid_path", "delete[0]"),
    ("GET", "workspace/file", {}, 400, "invalid_path", "'path'"),
    ("GET", "workspace/file", {"params": {"path": "a/../b"}}, 400, "invalid_path", ".."),
    ("GET", "workspace/file", {"params": {"path": "serve.sh", "encoding": "hex"}},
     400, "invalid_request", "encoding"),
    ("GET", "workspace/file", {"params": {"path": "nope.txt"}}, 404, "file_not_found", "nope.txt"),
    ("GET", "workspace/file", {"params": {"path": "lib"}}, 404, "file_not_found", "lib"),
    ("POST", "reload", {"params": {"app": "nope"}}, 404, "unknown_app", "nope"),
    ("PUT", "apps", {"json": {"apps": []}}, 400, "invalid_request", "body.apps"),
    ("PUT", "apps", {"json": {}}, 400, "invalid_request", "body.apps"),
    ("PUT", "apps", {"json": {"apps": [{"name": "agent", "entryRelativePath": "a"}]}},
     400, "reserved_app_name", "agent"),
    ("PUT", "apps", {"json": {"apps": [{"name": "a", "entryRelativePath": "/../a"}]}},
     400, "invalid_bundle", "entryRelativePath"),
    ("PUT", "apps", {"json": {"apps": [
        {"name": "a", "entryRelativePath": "a", "ports": [{"port": 1, "protocol": "udp"}]},
        {"name": "b", "entryRelativePath": "b", "ports": [{"port": 1, "protocol": "udp"}]}]}},
     400, "port_conflict", "udp port 1"),
    ("POST", "resume", {}, 404, "not_suspended", ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "tail", "kwargs", "status", "code", "named"), WORKSPACE_REFUSALS
)
async def test_route_refusals_on_a_running_session_change_nothing(
    runnerd: SharedDaemon,
    method: str,
    tail: str,
    kwargs: dict[str, Any],
    status: int,
    code: str,
    named: str,
) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client, files={**FILES, "lib/x.txt": "x"}, apps=APPS)
        await wait_running(client, session_id)
        before = (await workspace(client, session_id), (await get(client, session_id))["apps"])
        response = await route(client, method, session_id, tail, **kwargs)
        after = (await workspace(client, session_id), (await get(client, session_id))["apps"])
        await client.delete(f"/v1/sessions/{session_id}")
    assert error_of(response) == (status, code), response.text
    assert named in response.json()["message"]
    assert [f["path"] for f in after[0]] == [f["path"] for f in before[0]]
    assert after[0] == before[0]
    assert [a["name"] for a in after[1]] == [a["name"] for a in before[1]]


SIZED = 'until [ "$(stty size)" = "43 132" ]; do sleep 0.05; done; echo sized; exec sleep 600'


async def test_the_terminal_size_header_reaches_every_tty_app(runnerd: SharedDaemon) -> None:
    apps = [{"name": "a", "entryRelativePath": "sized.sh"},
            {"name": "b", "entryRelativePath": "sized.sh"}]  # fmt: skip
    header = {"x-runnerd-terminal-size": "132x43"}
    async with runnerd.client() as client:
        created = await client.post(
            "/v1/sessions", json=watch_body({"sized.sh": SIZED}, apps), headers=header
        )
        assert created.status_code == 201, created.text
        session_id = created.json()["sessionId"]
        outputs = [await _app_output_until(runnerd, session_id, app, b"sized") for app in "ab"]
        await client.delete(f"/v1/sessions/{session_id}")
    assert all(b"sized" in output for output in outputs)


async def _app_output_until(
    runnerd: SharedDaemon, session_id: str, app: str, wanted: bytes
) -> bytes:
    """An app's output on `/io?app=` (seq, stream byte, payload) until `wanted`."""
    output = b""
    resource = f"/v1/sessions/{session_id}/io?app={app}&lastSeq=0"
    async with open_ws(runnerd.socket_path, resource) as ws:
        with trio.fail_after(20):
            while wanted not in output:
                message = await ws.get_message()
                if isinstance(message, bytes):
                    output += message[5:]
    return output
