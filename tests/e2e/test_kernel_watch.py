"""A self-watching app end to end (local backend): the stand-in kernel
(tests/kubesim/kernel.py) as a runtime with `watch = "self"`, so runnerd
starts it once and its generations on SSE are the projection of its
`Kernel.*` debug frames (`runnerd.watch.kernel`): `started` with the
kernel's version, the port set it announced as an `endpoints` event, a
`POST /workspace` restarting it through the kernel's own watch (`watch`
trigger, `completed` then `started`), and a manifest it cannot load as the
pair `started` + `failed {reason: its diagnostic code}`; a reload restarts
the process itself (runnerd's, trigger `manual`), ending the open
generation with the signal's code."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.io_client import assert_sse_conforms
from tests.e2e.watch_client import (
    has_status,
    route,
    runs,
    start_watch,
    started,
    telo_runtime,
    wait_frames,
)
from tests.harness import SseFrame
from tests.shared_daemon import SharedDaemon, shared_daemon

TELO_CONFIG = {"image": "telo", "pullPolicy": "missing"}
APP = "port 3000\nprint v1\nwait\n"
APPS = [{"name": "kernel", "entryRelativePath": "app.telo"}]


@pytest.fixture(scope="module", name="runnerd")
def kernel_runnerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    with telo_runtime() as telo:
        # A self-watching runtime that is no kernel: it reports no run at all.
        mute = {"command": ["/bin/sh", "{entry}"], "watch": "self", "watch_args": ["--watch"]}
        # One with a debug server that never answers: its kernel never says
        # it started a run, so the session stays `starting` while it lives.
        hung = {**mute, "inspect_args": ["--inspect", "127.0.0.1:{inspect_port}"]}
        runtimes = {"telo": telo, "mute": mute, "hung": hung}
        overrides = {"watch": {"enabled": True}, "local": {"runtimes": runtimes}}
        with shared_daemon(tmp_path_factory.mktemp("runnerd"), overrides) as daemon:
            yield daemon


def phases(frames: list[SseFrame]) -> list[tuple[int, str]]:
    return [(e["generation"], e["phase"]) for e in runs(frames, "kernel")]


def has_run(generation: int, phase: str) -> Any:
    return lambda frames: (generation, phase) in phases(frames)


async def test_kernel_watch_generations_are_the_kernel_s_own(runnerd: SharedDaemon) -> None:
    async with runnerd.client() as client:
        await check_kernel_generations(client, TELO_CONFIG)


async def check_kernel_generations(client: httpx.AsyncClient, config: dict[str, str]) -> None:
    """The kernel's generations as the session's runs, on any backend whose
    `config` runs the stand-in kernel (tests/kube runs it on Kubernetes)."""
    session_id = await start_watch(
        client, files={"app.telo": APP}, apps=APPS, entry="app.telo", config=config
    )
    frames = await wait_frames(client, session_id, has_run(1, "started"))
    first = runs(frames, "kernel")[0]
    assert (first["trigger"], first["telo"]) == ("initial", "0.0.0-kubesim")
    # `running` once generation 1 has started: the kernel's first run,
    # not the process's start.
    frames = await wait_frames(client, session_id, has_status("running"))
    order = [(f.event, f.data.get("status", {}).get("kind", f.data.get("phase"))) for f in frames]
    assert order.index(("run", "started")) < order.index(("status", "running")), order
    frames = await wait_frames(
        client, session_id, lambda fs: any(f.event == "endpoints" for f in fs)
    )
    endpoints = next(f.data for f in frames if f.event == "endpoints")
    assert endpoints == {
        "type": "endpoints",
        "app": "kernel",
        "added": [{"host": "", "port": 3000, "protocol": "tcp"}],
    }
    # An edit: runnerd writes it, the kernel restarts itself.
    write = {"write": [{"path": "app.telo", "content": "port 3000\nprint v2\nwait\n"}]}
    assert (await route(client, "POST", session_id, "workspace", json=write)).status_code == 200
    frames = await wait_frames(client, session_id, has_run(2, "started"))
    assert phases(frames)[:3] == [(1, "started"), (1, "completed"), (2, "started")]
    assert [e.get("trigger") for e in runs(frames, "kernel")][2] == "watch"
    # A manifest it cannot load: the pair, with the kernel's diagnostic code.
    broken = {"write": [{"path": "app.telo", "content": "bogus\n"}]}
    assert (await route(client, "POST", session_id, "workspace", json=broken)).status_code == 200
    frames = await wait_frames(client, session_id, has_run(3, "failed"))
    failed = [e for e in runs(frames, "kernel") if e["phase"] == "failed"][0]
    assert failed["reason"] == "ERR_MANIFEST_VALIDATION_FAILED"
    await assert_sse_conforms(client, frames)  # run (telo too), endpoints, debug with app
    assert phases(frames)[2:6] == [
        (2, "started"),
        (2, "completed"),
        (3, "started"),
        (3, "failed"),
    ]
    await client.delete(f"/v1/sessions/{session_id}")


async def test_kernel_watch_a_reload_restarts_the_process_itself(runnerd: SharedDaemon) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(
            client,
            files={"main.telo": "port 8081\nprint v1\nwait\n"},
            entry="main.telo",
            config=TELO_CONFIG,
        )
        await wait_frames(client, session_id, lambda fs: started(fs, "app", 1) is not None)
        write = {"write": [{"path": "main.telo", "content": "port 8082\nprint v2\nwait\n"}]}
        answer = await route(client, "POST", session_id, "workspace", json=write)
        assert answer.status_code == 200, answer.text
        await wait_frames(client, session_id, lambda fs: started(fs, "app", 2) is not None)
        # `running.endpoints` follows the port set the kernel announced.
        got = (await client.get(f"/v1/sessions/{session_id}")).json()
        assert got["status"]["endpoints"] == [{"host": "", "port": 8082, "protocol": "tcp"}]
        assert got["apps"][0]["ports"] == [{"port": 8082, "protocol": "tcp"}]
        answer = await route(client, "POST", session_id, "reload")
        assert answer.status_code == 202, answer.text
        frames = await wait_frames(client, session_id, lambda fs: started(fs, "app", 3) is not None)
        await client.delete(f"/v1/sessions/{session_id}")
    events = [(e["generation"], e["phase"], e.get("trigger", e.get("code"))) for e in runs(frames)]
    assert events[:5] == [
        (1, "started", "initial"),
        (1, "completed", 0),  # the kernel stopped its run for the change
        (2, "started", "watch"),  # the kernel's own restart, not the core's
        (2, "completed", 143),  # the reload stopped the process
        (3, "started", "manual"),
    ]
    ports = [f.data for f in frames if f.event == "endpoints"]
    assert {"port": 8082, "protocol": "tcp", "host": ""} in ports[-1].get("added", [])


async def test_kernel_watch_an_exit_before_any_run_is_a_failed_start(runnerd: SharedDaemon) -> None:
    """A self-watching process that ends before its kernel reported a run
    (bad arguments, a crash at load) is reported, not silent: `started` then
    `failed` naming its exit code; a write starts it again, since no kernel
    is left to notice the change."""
    async with runnerd.client() as client:
        session_id = await start_watch(
            client,
            files={"main.sh": "exit 3\n"},
            entry="main.sh",
            config={"image": "mute", "pullPolicy": "missing"},
        )
        frames = await wait_frames(client, session_id, lambda fs: len(runs(fs)) >= 2)
        write = {"write": [{"path": "main.sh", "content": "exit 0\n"}]}
        answer = await route(client, "POST", session_id, "workspace", json=write)
        assert answer.status_code == 200, answer.text
        frames = await wait_frames(client, session_id, lambda fs: len(runs(fs)) >= 4)
        await client.delete(f"/v1/sessions/{session_id}")
    events = [
        (e["generation"], e["phase"], e.get("trigger", e.get("reason"))) for e in runs(frames)
    ]
    assert events[:4] == [
        (1, "started", "initial"),
        (1, "failed", "the runtime exited with code 3 before it reported a run"),
        (2, "started", "watch"),
        (2, "failed", "the runtime exited with code 0 before it reported a run"),
    ]


async def test_kernel_watch_a_session_still_starting_has_no_live_workspace(
    runnerd: SharedDaemon,
) -> None:
    """`409 not_running` while `starting`: its kernel has not reported
    generation 1 yet, so the workspace routes refuse, and change nothing."""
    async with runnerd.client() as client:
        session_id = await start_watch(
            client,
            files={"main.sh": "exec sleep 600\n"},
            entry="main.sh",
            config={"image": "hung", "pullPolicy": "missing"},
        )
        write = {"write": [{"path": "late.txt", "content": "x"}]}
        apps = {"apps": [{"name": "b", "entryRelativePath": "main.sh"}]}
        answers = [
            await route(client, "GET", session_id, "workspace"),
            await route(client, "POST", session_id, "workspace", json=write),
            await route(client, "GET", session_id, "workspace/file", params={"path": "main.sh"}),
            await route(client, "POST", session_id, "reload"),
            await route(client, "PUT", session_id, "apps", json=apps),
        ]
        got = (await client.get(f"/v1/sessions/{session_id}")).json()
        await client.delete(f"/v1/sessions/{session_id}")
    assert got["status"] == {"kind": "starting"} and got["apps"][0]["name"] == "app"
    for answer in answers:
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"] == "not_running"
        assert "starting" in answer.json()["message"]
