"""Watch sessions at their edges, through a real daemon on the local
backend: a runtime whose executable is missing fails each app's start, not
the session; a file name the workload made that is not UTF-8 is not listed
(no route could name it back, and strict JSON clients refuse a lone
surrogate); a generation that ignores the restart's SIGTERM and is
SIGKILLed after the stop grace is `completed 137`, its real exit code."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import trio

from tests.e2e.watch_client import (
    has_status,
    route,
    runs,
    start_watch,
    wait_frames,
    wait_running,
    wait_started,
    watch_body,
)
from tests.harness import open_ws
from tests.shared_daemon import SharedDaemon, shared_daemon

OVERRIDES = {
    "watch": {"enabled": True},
    "local": {"runtimes": {"nobin": {"command": ["/nonexistent/bin", "{entry}"]}}},
}


@pytest.fixture(scope="module", name="runnerd")
def edges_runnerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    with shared_daemon(tmp_path_factory.mktemp("runnerd"), OVERRIDES) as daemon:
        yield daemon


async def test_a_missing_runtime_executable_fails_each_app_not_the_session(
    runnerd: SharedDaemon,
) -> None:
    apps = [{"name": "a", "entryRelativePath": "serve.sh"},
            {"name": "b", "entryRelativePath": "once.sh"}]  # fmt: skip
    body = watch_body(apps=apps)
    body["config"]["image"] = "nobin"
    async with runnerd.client() as client:
        created = await client.post("/v1/sessions", json=body)
        assert created.status_code == 201, created.text
        session_id = created.json()["sessionId"]
        frames = await wait_frames(
            client,
            session_id,
            lambda fs: has_status("running")(fs) or has_status("failed")(fs),
        )
        status = (await client.get(f"/v1/sessions/{session_id}")).json()["status"]
        await client.delete(f"/v1/sessions/{session_id}")
    assert status == {"kind": "running"}, status
    for app in ("a", "b"):
        events = runs(frames, app)
        assert [(e["generation"], e["phase"]) for e in events] == [(1, "started"), (1, "failed")]
        assert "'/nonexistent/bin' not found" in events[1]["reason"], events[1]


async def test_an_unnamed_runtime_is_still_refused_at_admission(runnerd: SharedDaemon) -> None:
    body = watch_body()
    body["config"]["image"] = "nosuch"
    async with runnerd.client() as client:
        before = (await client.get("/v1/sessions")).json()["sessions"]
        created = await client.post("/v1/sessions", json=body)
        after = (await client.get("/v1/sessions")).json()["sessions"]
    assert created.status_code == 400, created.text
    assert "nosuch" in created.json()["message"]
    assert after == before


BAD_NAME = "touch \"$(printf 'bad\\377name')\" 'good name'; mkdir \"$(printf 'd\\377')\"\n"
BAD_NAME += "touch \"$(printf 'd\\377/inner')\"; echo made"


async def test_a_file_name_that_is_not_utf8_is_left_out_of_the_listing(
    runnerd: SharedDaemon,
) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client, files={"make.sh": BAD_NAME}, entry="make.sh")
        await wait_frames(
            client,
            session_id,
            lambda fs: any(e["phase"] == "completed" for e in runs(fs, "app")),
        )
        listed = await route(client, "GET", session_id, "workspace")
        await client.delete(f"/v1/sessions/{session_id}")
    assert listed.status_code == 200, listed.text
    # Strict JSON: a lone surrogate escape (`\udcff`) would be refused here.
    strict = json.loads(listed.content.decode("utf-8", "strict"))
    assert "\\ud" not in listed.text
    assert [f["path"] for f in strict["files"]] == ["good name", "make.sh"]


# Ignores the restart's SIGTERM (an ignored signal stays ignored across exec).
STUBBORN = "trap '' TERM; echo trapped; exec sleep 600"


async def test_a_generation_killed_after_the_stop_grace_completes_137(
    runnerd: SharedDaemon,
) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client, files={"stub.sh": STUBBORN}, entry="stub.sh")
        await wait_running(client, session_id)
        await _output_until(runnerd, session_id, "app", b"trapped")
        reloaded = await route(client, "POST", session_id, "reload")
        assert reloaded.status_code == 202, reloaded.text
        await wait_started(client, session_id, "app", 2)
        frames = await wait_frames(client, session_id, lambda fs: len(runs(fs, "app")) >= 3)
        await client.delete(f"/v1/sessions/{session_id}")
    completed = [e for e in runs(frames, "app") if e["phase"] == "completed"]
    assert [(e["generation"], e["code"]) for e in completed] == [(1, 137)]


async def test_a_generation_ended_by_the_sigterm_still_completes_143(
    runnerd: SharedDaemon,
) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client)  # serve.sh: `exec sleep 600`
        await wait_running(client, session_id)
        reloaded = await route(client, "POST", session_id, "reload")
        assert reloaded.status_code == 202, reloaded.text
        frames = await wait_frames(client, session_id, lambda fs: len(runs(fs, "app")) >= 3)
        await client.delete(f"/v1/sessions/{session_id}")
    completed = [e for e in runs(frames, "app") if e["phase"] == "completed"]
    assert [(e["generation"], e["code"]) for e in completed] == [(1, 143)]


async def _output_until(runnerd: SharedDaemon, session_id: str, app: str, wanted: bytes) -> None:
    """An app's output on `/io?app=` (seq, stream byte, payload) until `wanted`."""
    output = b""
    resource = f"/v1/sessions/{session_id}/io?app={app}&lastSeq=0"
    async with open_ws(runnerd.socket_path, resource) as ws:
        with trio.fail_after(20):
            while wanted not in output:
                message = await ws.get_message()
                if isinstance(message, bytes):
                    output += message[5:]
