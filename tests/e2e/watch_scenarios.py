"""Watch-session scenarios shared by both backends: each takes a client of a
daemon whose `config` runs the stand-in kernel (`tests/kubesim/kernel.py`
under `telo run --watch`: the local backend's `telo` runtime, a watch pod on
the test cluster), so its apps are directive scripts, never `sh`. Run on
local by `tests/e2e/test_watch_shared.py`, on Kubernetes by
`tests/kube/test_daemon_watch_shared.py`; `check_kernel_generations`
(`tests/e2e/test_kernel_watch.py`) is the first of them.

The daemon's `[server] max_body_bytes` is `MAX_BODY_BYTES` (the 413)."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import httpx

from tests.e2e.io_client import Io
from tests.e2e.watch_client import (
    error_of,
    has_status,
    route,
    runs,
    started,
    until_kind,
    wait_frames,
)
from tests.harness import SseFrame
from tests.kube.daemon import resume_sse

MAX_BODY_BYTES = 256 * 1024
APP = "port 3000\nprint v1\nwait\n"
TIMEOUT_S = 30.0


async def start_kernel(
    client: httpx.AsyncClient,
    config: dict[str, str],
    files: dict[str, str],
    apps: list[dict[str, Any]],
) -> str:
    """A watch session of `apps` over `files`, once it is `running`."""
    body = {
        "env": {},
        "mode": "watch",
        "config": dict(config),
        "bundle": {
            "entryRelativePath": apps[0]["entryRelativePath"],
            "files": [{"relativePath": p, "contents": t} for p, t in files.items()],
        },
        "apps": apps,
    }
    answer = await client.post("/v1/sessions", json=body)
    assert answer.status_code == 201, answer.text
    session_id = str(answer.json()["sessionId"])
    await wait_frames(client, session_id, has_status("running"), timeout_s=TIMEOUT_S)
    return session_id


async def listing(client: httpx.AsyncClient, session_id: str) -> list[dict[str, str]]:
    answer = await route(client, "GET", session_id, "workspace")
    assert answer.status_code == 200, answer.text
    files: list[dict[str, str]] = answer.json()["files"]
    return files


async def check_workspace_files(client: httpx.AsyncClient, config: dict[str, str]) -> None:
    """Text and binary files written and read back byte for byte; the
    refusals (404, 409, 413) name what was wrong and change nothing."""
    apps = [{"name": "app", "entryRelativePath": "app.telo"}]
    session_id = await start_kernel(client, config, {"app.telo": APP}, apps)
    blob = bytes(range(256)) * 8
    write = {
        "write": [
            {"path": "notes/a.txt", "content": "héllo\n"},
            {"path": "bin/blob.dat", "content": base64.b64encode(blob).decode(),
             "encoding": "base64"},
        ]
    }  # fmt: skip
    answer = await route(client, "POST", session_id, "workspace", json=write)
    assert (answer.status_code, answer.json()) == (200, {"written": 2, "deleted": 0})
    before = await listing(client, session_id)
    assert [f["path"] for f in before] == ["app.telo", "bin/blob.dat", "notes/a.txt"]
    assert before[1]["hash"] == hashlib.sha256(blob).hexdigest()
    text = await route(client, "GET", session_id, "workspace/file", params={"path": "notes/a.txt"})
    assert text.json() == {"content": "héllo\n", "size": len("héllo\n".encode())}
    raw = await route(
        client, "GET", session_id, "workspace/file",
        params={"path": "bin/blob.dat", "encoding": "base64"},
    )  # fmt: skip
    assert base64.b64decode(raw.json()["content"]) == blob

    missing = await route(client, "GET", session_id, "workspace/file", params={"path": "no.txt"})
    assert error_of(missing) == (404, "file_not_found") and "no.txt" in missing.text
    under_file = {"write": [{"path": "notes/a.txt/x", "content": "x"}]}
    conflict = await route(client, "POST", session_id, "workspace", json=under_file)
    assert error_of(conflict) == (409, "path_conflict"), conflict.text
    huge = {"write": [{"path": "big.txt", "content": "x" * MAX_BODY_BYTES}]}
    too_large = await route(client, "POST", session_id, "workspace", json=huge)
    assert error_of(too_large) == (413, "payload_too_large"), too_large.text
    assert await listing(client, session_id) == before  # refused: nothing changed
    await client.delete(f"/v1/sessions/{session_id}")


def generations(frames: list[SseFrame], app: str) -> list[tuple[int, str]]:
    return [(e["generation"], e["trigger"]) for e in runs(frames, app) if e["phase"] == "started"]


async def check_put_apps(client: httpx.AsyncClient, io: Io, config: dict[str, str]) -> None:
    """`PUT /apps`: a kept app keeps its counter, a new one starts at 1, a
    dropped one's `/io` is gone (4404); the session stays `running`."""
    files = {"app.telo": APP, "old.telo": "print old\nwait\n", "new.telo": "print new\nwait\n"}
    apps = [
        {"name": "app", "entryRelativePath": "app.telo"},
        {"name": "old", "entryRelativePath": "old.telo"},
    ]
    session_id = await start_kernel(client, config, files, apps)
    answer = await route(client, "POST", session_id, "reload", params={"app": "app"})
    assert answer.status_code == 202, answer.text
    await wait_frames(
        client, session_id, lambda fs: started(fs, "app", 2) is not None, timeout_s=TIMEOUT_S
    )
    kept = {"apps": [apps[0], {"name": "new", "entryRelativePath": "new.telo"}]}
    answer = await route(client, "PUT", session_id, "apps", json=kept)
    assert answer.status_code in (200, 202), answer.text
    frames = await wait_frames(
        client, session_id, lambda fs: started(fs, "new", 1) is not None, timeout_s=TIMEOUT_S
    )
    assert generations(frames, "app")[:2] == [(1, "initial"), (2, "manual")]
    got = (await client.get(f"/v1/sessions/{session_id}")).json()
    assert got["status"]["kind"] == "running"
    assert [a["name"] for a in got["apps"]] == ["app", "new"]
    dropped = await io.connect(session_id, "?app=old")
    assert await dropped.closed() == (4404, "no app 'old' in this session")
    await client.delete(f"/v1/sessions/{session_id}")


async def check_streams_io(client: httpx.AsyncClient, io: Io, config: dict[str, str]) -> None:
    """A `streams` app's `/io`: stdout on stream 1, stderr on stream 2, apart."""
    files = {"worker.telo": "print worker out\nstderr worker err\nwait\n"}
    apps = [{"name": "worker", "entryRelativePath": "worker.telo", "io": "streams"}]
    session_id = await start_kernel(client, config, files, apps)
    worker = await io.connect(session_id, "?app=worker&lastSeq=0")
    seen = await worker.until(lambda s: b"worker out" in s.of(1) and b"worker err" in s.of(2))
    assert seen.controls[0] == {"type": "seq", "seq": 0, "app": "worker", "io": "streams"}
    assert b"worker err" not in seen.of(1) and b"worker out" not in seen.of(2)
    await client.delete(f"/v1/sessions/{session_id}")


async def check_sse_replay(client: httpx.AsyncClient, config: dict[str, str]) -> None:
    """An SSE stream resumed by `Last-Event-ID` replays exactly what came after."""
    apps = [{"name": "app", "entryRelativePath": "app.telo"}]
    session_id = await start_kernel(client, config, {"app.telo": APP}, apps)
    first = await wait_frames(client, session_id, has_status("running"), timeout_s=TIMEOUT_S)
    ids = [int(f.id) for f in first if f.id is not None]
    middle = ids[len(ids) // 2]
    later = [f.raw for f in first if f.id is not None and int(f.id) > middle]
    replayed = await resume_sse(
        client, session_id, middle, lambda fs: len(fs) >= len(later), timeout_s=TIMEOUT_S
    )
    assert [f.raw for f in replayed][: len(later)] == later
    await client.delete(f"/v1/sessions/{session_id}")


async def check_suspend_resume(client: httpx.AsyncClient, config: dict[str, str]) -> None:
    """Idle (no subscriber for the daemon's `idle_seconds`) → `suspended`;
    `POST /resume` → `running` with every file back byte for byte."""
    apps = [{"name": "app", "entryRelativePath": "app.telo"}]
    session_id = await start_kernel(client, config, {"app.telo": APP}, apps)
    blob = bytes(range(256)) * 8
    write = {
        "write": [
            {"path": "notes/a.txt", "content": "kept\n"},
            {"path": "bin/blob.dat", "content": base64.b64encode(blob).decode(),
             "encoding": "base64"},
        ]
    }  # fmt: skip
    answer = await route(client, "POST", session_id, "workspace", json=write)
    assert answer.status_code == 200, answer.text
    before = await listing(client, session_id)
    await until_kind(client, session_id, "suspended")
    answer = await route(client, "POST", session_id, "resume")
    assert answer.status_code == 202, answer.text
    await until_kind(client, session_id, "running")
    assert await listing(client, session_id) == before  # the same paths, the same hashes
    raw = await route(
        client, "GET", session_id, "workspace/file",
        params={"path": "bin/blob.dat", "encoding": "base64"},
    )  # fmt: skip
    assert base64.b64decode(raw.json()["content"]) == blob
    await client.delete(f"/v1/sessions/{session_id}")
