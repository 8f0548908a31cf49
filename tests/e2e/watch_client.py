"""A test's view of watch sessions: bodies, waiting on their events, the
session routes. Every wait is bounded by `trio.fail_after` and ends on a
condition read from the daemon (an SSE frame, a status), never on a timer."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.e2e.contract_client import SH_CONFIG, SSE_TIMEOUT
from tests.harness import SESSION_PYTHON, SseFrame, iter_sse
from tests.kubesim.images import HERE as KUBESIM

# Apps that stay up until restarted (a restart is then visible as a new
# generation) and one that exits at once (the session stays up).
SERVE = "echo up $0; exec sleep 600"
FILES = {"serve.sh": SERVE, "once.sh": "echo once"}


def watch_body(
    files: dict[str, str] | None = None,
    apps: list[dict[str, Any]] | None = None,
    *,
    entry: str = "serve.sh",
    **extra: Any,
) -> dict[str, Any]:
    """A `POST /v1/sessions` body of a watch session under the `sh` runtime."""
    body: dict[str, Any] = {
        "env": {},
        "mode": "watch",
        "config": dict(SH_CONFIG),
        "bundle": {
            "entryRelativePath": entry,
            "files": [
                {"relativePath": path, "contents": text}
                for path, text in (files if files is not None else FILES).items()
            ],
        },
        **extra,
    }
    if apps is not None:
        body["apps"] = apps
    return body


async def start_watch(client: httpx.AsyncClient, **kwargs: Any) -> str:
    response = await client.post("/v1/sessions", json=watch_body(**kwargs))
    assert response.status_code == 201, response.text
    return str(response.json()["sessionId"])


async def wait_frames(
    client: httpx.AsyncClient,
    session_id: str,
    done: Callable[[list[SseFrame]], bool],
    *,
    timeout_s: float = 20.0,
) -> list[SseFrame]:
    """The session's SSE frames from the start, read until `done(frames)`."""
    frames: list[SseFrame] = []
    with trio.fail_after(timeout_s):
        async with client.stream(
            "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
        ) as response:
            assert response.status_code == 200, await response.aread()
            async with contextlib.aclosing(iter_sse(response)) as stream:
                async for frame in stream:
                    frames.append(frame)
                    if done(frames):
                        return frames
    raise AssertionError(f"the stream of {session_id} ended first: {[f.raw for f in frames]}")


def runs(frames: list[SseFrame], app: str | None = None) -> list[dict[str, Any]]:
    """The `run` events (of `app`), in order."""
    return [f.data for f in frames if f.event == "run" and (app is None or f.data["app"] == app)]


def started(frames: list[SseFrame], app: str, generation: int) -> dict[str, Any] | None:
    for event in runs(frames, app):
        if event["phase"] == "started" and event["generation"] == generation:
            return event
    return None


async def wait_started(
    client: httpx.AsyncClient, session_id: str, app: str, generation: int
) -> dict[str, Any]:
    """The `run started` event of `app`'s `generation`, once it was sent."""
    frames = await wait_frames(
        client, session_id, lambda fs: started(fs, app, generation) is not None
    )
    event = started(frames, app, generation)
    assert event is not None
    return event


def has_status(kind: str) -> Callable[[list[SseFrame]], bool]:
    return lambda frames: any(
        f.event == "status" and f.data["status"]["kind"] == kind for f in frames
    )


async def wait_running(client: httpx.AsyncClient, session_id: str) -> None:
    await wait_frames(client, session_id, has_status("running"))


async def route(
    client: httpx.AsyncClient, method: str, session_id: str, tail: str, **kwargs: Any
) -> httpx.Response:
    """`method /v1/sessions/{session_id}/{tail}`. A POST or PUT without a
    body says `content-type: application/json` as every client must (the
    guard's 415 otherwise: `runnerd.http.guard`)."""
    if method in ("POST", "PUT") and not {"json", "headers"} & set(kwargs):
        kwargs["headers"] = {"content-type": "application/json"}
    return await client.request(method, f"/v1/sessions/{session_id}/{tail}", **kwargs)


def error_of(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]


@contextlib.contextmanager
def telo_runtime() -> Iterator[dict[str, Any]]:
    """A `watch = "self"` runtime running the stand-in kernel
    (`tests/kubesim/kernel.py --watch`), from a copy a session can read: a
    checkout under /tmp is not in a session's view (each has a private
    /tmp), so the kernel is copied out of it for the test's duration."""
    parent = "/run" if os.access("/run", os.W_OK) else str(Path.home())
    copy = Path(tempfile.mkdtemp(prefix="rd-kernel-", dir=parent))
    try:
        copy.chmod(0o755)
        for name in ("kernel.py", "kernel_watch.py"):
            shutil.copy(KUBESIM / name, copy / name)
        yield {
            # -I: isolated, so no PYTHON* variable of the session reaches it.
            "command": [SESSION_PYTHON, "-I", str(copy / "kernel.py"), "run", "{entry}"],
            "inspect_args": ["--inspect", "127.0.0.1:{inspect_port}"],
            "watch": "self",
            "watch_args": ["--watch"],
        }
    finally:
        shutil.rmtree(copy, ignore_errors=True)


@contextlib.asynccontextmanager
async def open_sse(client: httpx.AsyncClient, session_id: str) -> AsyncIterator[Any]:
    """The session's SSE stream, held open (a subscriber) while inside."""
    async with client.stream(
        "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
    ) as response:
        assert response.status_code == 200
        async with contextlib.aclosing(iter_sse(response)) as frames:
            yield frames


async def next_status(frames: Any, kind: str, timeout_s: float = 30.0) -> list[SseFrame]:
    """Frames up to the first status of `kind`."""
    taken: list[SseFrame] = []
    with trio.fail_after(timeout_s):
        async for frame in frames:
            taken.append(frame)
            if frame.event == "status" and frame.data["status"]["kind"] == kind:
                return taken
    raise AssertionError(f"the stream ended before a {kind!r} status: {taken}")


async def final_status(
    client: httpx.AsyncClient, session_id: str, kind: str = "failed", timeout_s: float = 30.0
) -> dict[str, Any]:
    """The session's status once one of `kind` came (the last status by then)."""
    frames = await wait_frames(client, session_id, has_status(kind), timeout_s=timeout_s)
    status: dict[str, Any] = [f.data["status"] for f in frames if f.event == "status"][-1]
    return status


async def kind_of(client: httpx.AsyncClient, session_id: str) -> str:
    """The session's status kind, read by a plain GET."""
    kind: str = (await client.get(f"/v1/sessions/{session_id}")).json()["status"]["kind"]
    return kind


async def until_kind(
    client: httpx.AsyncClient, session_id: str, kind: str, timeout_s: float = 30.0
) -> None:
    """Poll GET until the status is `kind` (a plain request is no
    subscriber: it does not hold off an idle suspend)."""
    with trio.fail_after(timeout_s):
        while True:
            if await kind_of(client, session_id) == kind:
                return
            await trio.sleep(0.05)
