"""Watch sessions on Kubernetes through a real daemon on the test cluster: the
watch pod (workspace container + one container per app, the stand-in kernel
under `telo run --watch`), its workspace routes over the pod IP, the app's
generations from the kernel's debug stream, suspend (snapshot, pod deleted)
and resume (a new pod seeded from the checkpoint), and no pod or ConfigMap
left once the session is gone (read back as a client of the cluster would)."""

from __future__ import annotations

import base64
import contextlib
import json
import signal
import stat
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.e2e.io_client import Io, printed
from tests.e2e.test_kernel_watch import check_kernel_generations
from tests.e2e.watch_client import (
    has_status,
    next_status,
    open_sse,
    route,
    runs,
    started,
    until_kind,
    wait_frames,
    watch_body,
)
from tests.harness import Daemon, SseFrame
from tests.kube.daemon import KERNEL_CONFIG, kube_daemon, session_pods, wait_pods
from tests.kubesim.server import KubeSim

TIMEOUT_S = 30.0
APP = "port 3000\nprint v1\nwait\n"
WATCH = {"enabled": True}


def kube_watch_body(
    files: dict[str, str], apps: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    body = watch_body(files, apps, entry="app.telo")
    body["config"] = dict(KERNEL_CONFIG)
    return body


async def start(client: httpx.AsyncClient, files: dict[str, str], **kw: Any) -> str:
    answer = await client.post("/v1/sessions", json=kube_watch_body(files, **kw))
    assert answer.status_code == 201, answer.text
    return str(answer.json()["sessionId"])


def configmaps(sim: KubeSim) -> list[str]:
    return [c["metadata"]["name"] for c in sim.store.list("configmaps", "runnerd")]


async def read_file(client: httpx.AsyncClient, session_id: str, path: str) -> str:
    answer = await route(client, "GET", session_id, "workspace/file", params={"path": path})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    if body.get("encoding") == "base64":
        return base64.b64decode(body["content"]).decode()
    return str(body["content"])


async def wait_gone(daemon: Daemon, sim: KubeSim) -> None:
    await wait_pods(sim, lambda pods: not pods, TIMEOUT_S)
    with trio.fail_after(TIMEOUT_S):
        async with sim.store.subscribe() as changes:
            while configmaps(sim):
                await changes.receive()


async def test_a_watch_session_runs_in_a_watch_pod_and_leaves_nothing_behind(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as daemon, daemon.client() as client:
        session_id = await start(client, {"app.telo": APP})
        frames = await wait_frames(client, session_id, has_status("running"), timeout_s=TIMEOUT_S)
        assert started(frames, "app", 1) is not None, [f.raw for f in frames]
        [pod] = session_pods(kubesim)
        assert pod.startswith(f"runnerd-{session_id}-")
        assert len(configmaps(kubesim)) == 1
        assert "print v1" in await read_file(client, session_id, "app.telo")

        write = {"write": [{"path": "app.telo", "content": "port 3000\nprint v2\nwait\n"}]}
        answer = await route(client, "POST", session_id, "workspace", json=write)
        assert answer.status_code == 200, answer.text
        frames = await wait_frames(
            client,
            session_id,
            lambda fs: started(fs, "app", 2) is not None,
            timeout_s=TIMEOUT_S,
        )
        assert [e["trigger"] for e in runs(frames, "app") if e["phase"] == "started"] == [
            "initial",
            "watch",
        ]
        answer = await client.delete(f"/v1/sessions/{session_id}")
        assert answer.status_code in (200, 202, 204), answer.text
        await wait_gone(daemon, kubesim)


async def until_count(directory: Path, count: int) -> list[Path]:
    """Poll until `directory` holds `count` entries (checkpoints are written
    and discarded by the core's own tasks, after the answers a test sees)."""
    with trio.fail_after(TIMEOUT_S):
        while True:
            found = [Path(p) for p in await trio.Path(directory).iterdir()]
            if len(found) == count:
                return found
            await trio.sleep(0.05)


async def test_suspend_deletes_the_pod_and_resume_brings_the_files_back_in_a_new_one(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    idle = {"enabled": True, "idle_seconds": 1}
    async with kube_daemon(kubesim, tmp_path, watch=idle) as daemon, daemon.client() as client:
        session_id = await start(client, {"app.telo": APP})
        async with open_sse(client, session_id) as frames:  # held off while open
            await next_status(frames, "running")
            write = {"write": [{"path": "notes/a.txt", "content": "kept"}]}
            answer = await route(client, "POST", session_id, "workspace", json=write)
            assert answer.status_code == 200, answer.text
            [first] = session_pods(kubesim)
        await until_kind(client, session_id, "suspended")
        await wait_pods(kubesim, lambda pods: not pods, TIMEOUT_S)
        # The suspend's last checkpoint; one it replaced may still be on its
        # way out (the core discards it after the status), so wait for one.
        [kept] = await until_count(tmp_path / "state" / "watch-checkpoints", 1)
        assert stat.S_IMODE((await trio.Path(kept).stat()).st_mode) == 0o600

        answer = await route(client, "POST", session_id, "resume")
        assert answer.status_code == 202, answer.text
        async with open_sse(client, session_id) as frames:
            await next_status(frames, "running")  # the replayed one first, then the new
            await until_kind(client, session_id, "running")
            [second] = session_pods(kubesim)
            assert second != first  # a new pod, a fresh name
            assert await read_file(client, session_id, "notes/a.txt") == "kept"
            assert "print v1" in await read_file(client, session_id, "app.telo")
        answer = await client.delete(f"/v1/sessions/{session_id}")
        await wait_gone(daemon, kubesim)
        await until_count(tmp_path / "state" / "watch-checkpoints", 0)


def generations(frames: list[SseFrame], app: str) -> list[tuple[int, str]]:
    return [(e["generation"], e["trigger"]) for e in runs(frames, app) if e["phase"] == "started"]


async def test_reload_and_put_apps_reload_in_place_then_recreate_the_pod_keeping_counters(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    files = {"app.telo": APP, "b.telo": "print b\nwait\n"}
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as daemon, daemon.client() as client:
        session_id = await start(client, files)
        await wait_frames(client, session_id, has_status("running"), timeout_s=TIMEOUT_S)
        [first] = session_pods(kubesim)
        answer = await route(client, "POST", session_id, "reload")
        assert answer.status_code == 202, answer.text
        frames = await wait_frames(
            client, session_id, lambda fs: started(fs, "app", 2) is not None, timeout_s=TIMEOUT_S
        )
        assert generations(frames, "app") == [(1, "initial"), (2, "manual")]
        assert session_pods(kubesim) == [first]  # reloaded in place: the same pod

        apps = {
            "apps": [
                {"name": "app", "entryRelativePath": "app.telo"},
                {"name": "b", "entryRelativePath": "b.telo"},
            ]
        }
        answer = await route(client, "PUT", session_id, "apps", json=apps)
        assert answer.status_code in (200, 202), answer.text
        frames = await wait_frames(
            client,
            session_id,
            lambda fs: started(fs, "b", 1) is not None and started(fs, "app", 3) is not None,
            timeout_s=TIMEOUT_S,
        )
        [second] = session_pods(kubesim)
        assert second != first  # a new app set is a new pod
        assert generations(frames, "app")[:2] == [(1, "initial"), (2, "manual")]
        pod = kubesim.store.get("pods", "runnerd", second)
        names = [c["name"] for c in pod["spec"]["containers"]]
        assert names == ["workspace", "app-app", "app-b"]
        await client.delete(f"/v1/sessions/{session_id}")
        await wait_gone(daemon, kubesim)


async def test_a_streams_app_keeps_stdout_and_stderr_apart_and_a_tty_app_has_its_terminal(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    files = {
        "web.telo": "print web up\necho got:\n",
        "worker.telo": "print worker out\nstderr worker err\nwait\n",
    }
    apps = [
        {"name": "web", "entryRelativePath": "web.telo"},
        {"name": "worker", "entryRelativePath": "worker.telo", "io": "streams"},
    ]
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as daemon, daemon.client() as client:
        sockets = Io(daemon.socket_path)
        try:
            answer = await client.post("/v1/sessions", json=kube_watch_body(files, apps))
            assert answer.status_code == 201, answer.text
            session_id = answer.json()["sessionId"]
            worker = await sockets.connect(session_id, "?app=worker&lastSeq=0")
            seen = await worker.until(
                lambda s: b"worker out" in s.of(1) and b"worker err" in s.of(2)
            )
            assert seen.controls[0] == {"type": "seq", "seq": 0, "app": "worker", "io": "streams"}
            assert b"worker err" not in seen.of(1) and b"worker out" not in seen.of(2)
            web = await sockets.connect(session_id, "?app=web&lastSeq=0")
            await web.until(printed(0, rb"web up"))
            await web.send(b"hello\n")
            seen = await web.until(printed(0, rb"got:hello"))
            assert {stream for _, stream, _ in seen.chunks} == {0}
            assert seen.of(0).count(b"web up") == 1  # the log splice: once
            await client.delete(f"/v1/sessions/{session_id}")
            await wait_gone(daemon, kubesim)
        finally:
            await sockets.close_all()


async def test_after_sigkill_a_running_session_is_adopted_and_a_suspended_one_resumes(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as first, first.client() as client:
        live = await start(client, {"app.telo": APP})
        await wait_frames(client, live, has_status("running"), timeout_s=TIMEOUT_S)
        write = {"write": [{"path": "notes.txt", "content": "kept"}]}
        answer = await route(client, "POST", live, "workspace", json=write)
        assert answer.status_code == 200, answer.text
        [pod] = session_pods(kubesim)
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
    assert session_pods(kubesim) == [pod]  # a pod outlives its daemon
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as second, second.client() as client:
        await until_kind(client, live, "running")
        assert await read_file(client, live, "notes.txt") == "kept"
        assert session_pods(kubesim) == [pod]  # adopted, not recreated
        change = {"write": [{"path": "app.telo", "content": "port 3000\nprint v2\nwait\n"}]}
        answer = await route(client, "POST", live, "workspace", json=change)
        assert answer.status_code == 200, answer.text
        frames = await wait_frames(
            client, live, lambda fs: started(fs, "app", 2) is not None, timeout_s=TIMEOUT_S
        )
        assert generations(frames, "app")[-1] == (2, "watch")
        await client.delete(f"/v1/sessions/{live}")
        await wait_gone(second, kubesim)


async def test_a_session_suspended_before_a_sigkill_resumes_from_its_checkpoint(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    idle = {"enabled": True, "idle_seconds": 1}
    async with kube_daemon(kubesim, tmp_path, watch=idle) as first, first.client() as client:
        session_id = await start(client, {"app.telo": APP})
        async with open_sse(client, session_id) as frames:
            await next_status(frames, "running")
            write = {"write": [{"path": "notes.txt", "content": "kept"}]}
            answer = await route(client, "POST", session_id, "workspace", json=write)
            assert answer.status_code == 200, answer.text
        await until_kind(client, session_id, "suspended")
        await wait_pods(kubesim, lambda pods: not pods, TIMEOUT_S)
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
    async with kube_daemon(kubesim, tmp_path, watch=idle) as second, second.client() as client:
        await until_kind(client, session_id, "suspended")
        answer = await route(client, "POST", session_id, "resume")
        assert answer.status_code == 202, answer.text
        async with open_sse(client, session_id) as frames:
            await until_kind(client, session_id, "running")
            assert await read_file(client, session_id, "notes.txt") == "kept"
        await client.delete(f"/v1/sessions/{session_id}")
        await wait_gone(second, kubesim)
        await until_count(tmp_path / "state" / "watch-checkpoints", 0)


async def test_the_kernel_s_generations_are_the_session_s_runs_as_on_the_local_backend(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    """tests/e2e/test_kernel_watch.py's scenario, on a watch pod."""
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as daemon, daemon.client() as client:
        await check_kernel_generations(client, dict(KERNEL_CONFIG))
        await wait_gone(daemon, kubesim)


def kernel_events(frames: list[SseFrame], name: str) -> int:
    return sum(1 for f in frames if f.event == "debug" and f.data["frame"].get("event") == name)


async def until_recorded(path: Path, generation: int) -> None:
    """Until the watch record at `path` holds the app's `generation`."""
    with trio.fail_after(TIMEOUT_S):
        while True:
            with contextlib.suppress(FileNotFoundError, ValueError):
                [app] = json.loads(await trio.Path(path).read_bytes())["apps"]
                if app["generation"] == generation:
                    return
            await trio.sleep(0.05)


async def test_an_adopted_kernel_s_replayed_frames_invent_no_generation(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    """The kernel replays its debug frames to the successor's relay (its
    generation 1's `Kernel.Stopped`, generation 2's `Kernel.Starting`): the
    successor projects none of them again; the open generation 2 stays open
    and the next change is generation 3, its one `watch` run."""
    v2 = {"write": [{"path": "app.telo", "content": "port 3000\nprint v2\nwait\n"}]}
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as first, first.client() as client:
        session_id = await start(client, {"app.telo": APP})
        await wait_frames(client, session_id, has_status("running"), timeout_s=TIMEOUT_S)
        answer = await route(client, "POST", session_id, "workspace", json=v2)
        assert answer.status_code == 200, answer.text
        await until_recorded(tmp_path / "state" / "watch" / f"{session_id}.json", 2)
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as second, second.client() as client:
        await until_kind(client, session_id, "running")
        v3 = {"write": [{"path": "app.telo", "content": "port 3000\nprint v3\nwait\n"}]}
        answer = await route(client, "POST", session_id, "workspace", json=v3)
        assert answer.status_code == 200, answer.text
        # The replay's two `Kernel.Started` and the v3 run's: every frame
        # before that last one has been projected.
        frames = await wait_frames(
            client,
            session_id,
            lambda fs: kernel_events(fs, "Kernel.Started") == 3,
            timeout_s=TIMEOUT_S,
        )
        events = [(e["generation"], e["phase"], e.get("trigger")) for e in runs(frames, "app")]
        assert events == [(2, "completed", None), (3, "started", "watch")], events
        await client.delete(f"/v1/sessions/{session_id}")
        await wait_gone(second, kubesim)


async def test_a_write_the_kernel_does_not_see_restarts_its_app_once(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    """The entry in a subdirectory: its kernel watches only that directory,
    so a write at the root is not a change to it; the contract's write
    restarts every app all the same: runnerd reloads it (`watch`)."""
    apps = [{"name": "app", "entryRelativePath": "src/app.telo"}]
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as daemon, daemon.client() as client:
        session_id = await start(client, {"app.telo": APP, "src/app.telo": APP}, apps=apps)
        await wait_frames(client, session_id, has_status("running"), timeout_s=TIMEOUT_S)
        write = {"write": [{"path": "notes.txt", "content": "outside src/"}]}
        answer = await route(client, "POST", session_id, "workspace", json=write)
        assert answer.status_code == 200, answer.text
        frames = await wait_frames(
            client, session_id, lambda fs: started(fs, "app", 2) is not None, timeout_s=TIMEOUT_S
        )
        assert generations(frames, "app") == [(1, "initial"), (2, "watch")]
        await client.delete(f"/v1/sessions/{session_id}")
        await wait_gone(daemon, kubesim)
