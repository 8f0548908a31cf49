"""A real runnerd on the Kubernetes backend, against the in-process test cluster."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.harness import Daemon, SseFrame, iter_sse, start_daemon
from tests.kubesim.server import KubeSim

KERNEL = "telorun/node:latest-slim"
KERNEL_CONFIG = {"image": KERNEL, "pullPolicy": "missing"}
# Images the start-failure tests ask for: one that never parses, one that is
# not on the node with pullPolicy never, one no registry has.
BAD_NAME = "telorun/node:Bad Tag"
NOT_PRESENT = "telorun/absent:1"
IMAGES = [KERNEL, BAD_NAME, NOT_PRESENT]


def free_port() -> int:
    # Free now; runnerd binds it moments later. self_url must name the port,
    # so the bundle listener cannot take port 0.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def kube_overrides(sim: KubeSim, tmp_path: Path, **kubernetes: Any) -> dict[str, Any]:
    """The harness config switched to the kubernetes backend on `sim`."""
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    port = free_port()
    return {
        "runner": {"backend": "kubernetes", "default_image": KERNEL, "allowed_images": IMAGES},
        "local": None,
        "kubernetes": {
            "kubeconfig": str(kubeconfig),
            "self_url": f"http://127.0.0.1:{port}",
            "bundle_listen": f"tcp:127.0.0.1:{port}",
            **kubernetes,
        },
    }


@asynccontextmanager
async def kube_daemon(
    sim: KubeSim,
    tmp_path: Path,
    *,
    limits: dict[str, Any] | None = None,
    runner: dict[str, Any] | None = None,
    apps: dict[str, Any] | None = None,
    watch: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
    **kubernetes: Any,
) -> AsyncIterator[Daemon]:
    """runnerd on `sim`; `kubernetes` keys, `[runner]` keys, `[limits]`,
    `[apps]`, `[watch]` and `[server]` tables override the defaults."""
    overrides = kube_overrides(sim, tmp_path, **kubernetes)
    if server is not None:
        overrides["server"] = server
    if watch is not None:
        overrides["watch"] = watch
    if apps is not None:
        overrides["apps"] = apps
    if limits is not None:
        overrides["limits"] = limits
    overrides["runner"].update(runner or {})
    async with start_daemon(tmp_path, overrides) as daemon:
        yield daemon


def telo_body(
    script: str, *, image: str = KERNEL, pull_policy: str = "missing", **extra: Any
) -> dict[str, Any]:
    """A `POST /v1/sessions` body running the stand-in kernel on `script`."""
    return {
        "env": {},
        "config": {"image": image, "pullPolicy": pull_policy},
        "bundle": {
            "entryRelativePath": "main.telo",
            "files": [{"relativePath": "main.telo", "contents": script}],
        },
        **extra,
    }


async def start_telo(client: httpx.AsyncClient, script: str, **kwargs: Any) -> str:
    response = await client.post("/v1/sessions", json=telo_body(script, **kwargs))
    assert response.status_code == 201, response.text
    return str(response.json()["sessionId"])


def session_pods(sim: KubeSim) -> list[str]:
    return [p["metadata"]["name"] for p in sim.store.list("pods", "runnerd")]


async def wait_pods(
    sim: KubeSim, done: Callable[[list[str]], bool], timeout_s: float = 10.0
) -> None:
    """Return once `done(session_pods(sim))`, woken by each store change."""
    with trio.fail_after(timeout_s):
        async with sim.store.subscribe() as changes:
            while not done(session_pods(sim)):
                await changes.receive()


async def wait_no_pods(sim: KubeSim, timeout_s: float = 10.0) -> None:
    await wait_pods(sim, lambda pods: not pods, timeout_s)


async def resume_sse(
    client: httpx.AsyncClient,
    session_id: str,
    last_event_id: int,
    done: Callable[[list[SseFrame]], bool],
    timeout_s: float = 20.0,
) -> list[SseFrame]:
    """Resume a session's event stream from `last_event_id` as a client would
    (the `Last-Event-ID` header) and collect its frames, heartbeats aside,
    until `done(frames)`."""
    frames: list[SseFrame] = []
    with trio.fail_after(timeout_s):
        async with client.stream(
            "GET",
            f"/v1/sessions/{session_id}/events",
            headers={"last-event-id": str(last_event_id)},
            timeout=httpx.Timeout(10.0, read=None),
        ) as response:
            assert response.status_code == 200, response.status_code
            async with contextlib.aclosing(iter_sse(response)) as stream:
                async for frame in stream:
                    if frame.event is None and frame.id is None:
                        continue  # a heartbeat
                    frames.append(frame)
                    if done(frames):
                        break
    return frames
