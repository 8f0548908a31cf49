"""How a watch session on Kubernetes ends, and what of it does not end it,
through a real daemon on the test cluster: the TTL, a pod deleted or ended
on its own (an eviction), one app's container ended (an OOM kill: the
session goes on, `PUT /apps` brings the app back), and the co-resident
agent's container (its token in its env only), read back as a client of
the cluster would; and a watch pod no session adopts after a restart,
deleted by the sweep."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import trio

from tests.e2e.watch_client import (
    final_status,
    has_status,
    kind_of,
    next_status,
    open_sse,
    route,
    runs,
    started,
    until_kind,
    wait_frames,
)
from tests.harness import SseFrame
from tests.kube.daemon import KERNEL, kube_daemon, session_pods, wait_pods
from tests.kube.test_daemon_watch import (
    APP,
    TIMEOUT_S,
    WATCH,
    kube_watch_body,
    start,
    wait_gone,
)
from tests.kubesim.conftest import build_client
from tests.kubesim.server import KubeSim


async def test_the_ttl_ends_the_session_and_leaves_no_pod_and_no_configmap(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    ttl = {"enabled": True, "max_ttl_seconds": 2}
    async with kube_daemon(kubesim, tmp_path, watch=ttl) as daemon, daemon.client() as client:
        session_id = await start(client, {"app.telo": APP})
        status = await final_status(client, session_id, timeout_s=TIMEOUT_S)
        # The core's TTL fires with the pod's activeDeadlineSeconds (the same
        # TTL, the kubelet's backstop should runnerd be gone).
        assert status == {
            "kind": "failed",
            "message": "ttl: session exceeded its time limit of 2 s",
        }
        await wait_gone(daemon, kubesim)


async def test_a_watch_pod_deleted_outside_runnerd_fails_the_session(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as daemon, daemon.client() as client:
        session_id = await start(client, {"app.telo": APP})
        await wait_frames(client, session_id, has_status("running"), timeout_s=TIMEOUT_S)
        [pod] = session_pods(kubesim)
        await kubesim.store.delete("pods", "runnerd", pod, grace_period_s=0)  # kubectl delete
        status = await final_status(client, session_id, timeout_s=TIMEOUT_S)
        assert status == {
            "kind": "failed",
            "message": "the session pod was deleted outside runnerd",
        }
        await wait_gone(daemon, kubesim)


async def test_a_watch_pod_that_reaches_failed_on_its_own_fails_the_session_with_its_phase(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    """The node evicts the pod (its kubelet's own act, no API call runnerd
    or a user made): `failed "session pod reached Failed"`, no stage prefix."""
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as daemon, daemon.client() as client:
        session_id = await start(client, {"app.telo": APP})
        await wait_frames(client, session_id, has_status("running"), timeout_s=TIMEOUT_S)
        [pod] = session_pods(kubesim)
        assert kubesim.kubelet is not None
        await kubesim.kubelet.evict("runnerd", pod)
        status = await final_status(client, session_id, timeout_s=TIMEOUT_S)
        assert status == {"kind": "failed", "message": "session pod reached Failed"}
        await wait_gone(daemon, kubesim)


def container_env(pod: dict[str, Any], name: str) -> dict[str, str]:
    [container] = [c for c in pod["spec"]["containers"] if c["name"] == name]
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


async def test_the_agent_runs_in_its_own_container_with_its_token_and_no_other_has_it(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    """A catalog agent (`port`, `token_env`): `running.agent` names its
    endpoint and token; read back from the cluster (kubectl's view), only
    the agent container's env holds the token, with `WORKSPACE_DIR`."""
    catalog = {"helper": {"image": "busybox", "port": 7070, "token_env": "HELPER_TOKEN"}}
    runner = {"allowed_images": [KERNEL, "busybox"]}
    async with (
        kube_daemon(kubesim, tmp_path, watch=WATCH, apps=catalog, runner=runner) as daemon,
        daemon.client() as client,
    ):
        body = kube_watch_body({"app.telo": APP})
        body["agent"] = "helper"
        answer = await client.post("/v1/sessions", json=body)
        assert answer.status_code == 201, answer.text
        session_id = answer.json()["sessionId"]
        frames = await wait_frames(client, session_id, has_status("running"), timeout_s=TIMEOUT_S)
        running = [f.data["status"] for f in frames if f.event == "status"][-1]
        agent = running["agent"]
        assert (agent["port"], agent["protocol"]) == (7070, "tcp")
        token = agent["token"]
        assert len(token) == 32
        [name] = session_pods(kubesim)
        pod = await read_pod(kubesim, name)
        names = [c["name"] for c in pod["spec"]["containers"]]
        assert names == ["workspace", "app-app", "agent"]
        env = container_env(pod, "agent")
        assert env["HELPER_TOKEN"] == token and env["WORKSPACE_DIR"].startswith("/")
        assert token not in str(container_env(pod, "app-app"))
        assert token not in str(pod["spec"]["containers"][0])  # the workspace's
        assert "HELPER_TOKEN" not in container_env(pod, "workspace")
        assert token not in str(pod["metadata"])
        got = (await client.get(f"/v1/sessions/{session_id}")).json()
        assert got["agent"] == "helper" and "HELPER_TOKEN" not in str(got)
        await client.delete(f"/v1/sessions/{session_id}")
        await wait_gone(daemon, kubesim)


async def read_pod(sim: KubeSim, name: str) -> dict[str, Any]:
    """Pod `name` as a client of the cluster reads it (GET over the wire)."""
    async with build_client(sim) as http:
        answer = await http.get(f"/api/v1/namespaces/runnerd/pods/{name}")
        assert answer.status_code == 200, answer.text
        pod: dict[str, Any] = answer.json()
        return pod


def ended(frames: list[SseFrame], app: str, generation: int) -> dict[str, Any] | None:
    """The `run` event that ended `generation` of `app` (completed or failed)."""
    for event in runs(frames, app):
        if event["generation"] == generation and event["phase"] in ("completed", "failed"):
            return event
    return None


async def test_an_app_whose_container_ended_fails_its_generations_until_put_apps(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    """A pod's container never restarts (`restartPolicy: Never`): the app's
    open generation ends with it, the session stays running, a write gives
    it `run started` + `run failed` saying what brings it back, and a
    `PUT /apps` (a new pod) does."""
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as daemon, daemon.client() as client:
        session_id = await start(client, {"app.telo": APP})
        await wait_frames(client, session_id, has_status("running"), timeout_s=TIMEOUT_S)
        [pod] = session_pods(kubesim)
        assert kubesim.kubelet is not None
        await kubesim.kubelet.kill_container("runnerd", pod, "app-app")  # an OOM kill
        frames = await wait_frames(
            client, session_id, lambda fs: ended(fs, "app", 1) is not None, timeout_s=TIMEOUT_S
        )
        first = ended(frames, "app", 1)
        assert first is not None and first["phase"] == "completed" and first["code"] == 137
        assert await kind_of(client, session_id) == "running"

        write = {"write": [{"path": "app.telo", "content": "port 3000\nprint v2\nwait\n"}]}
        answer = await route(client, "POST", session_id, "workspace", json=write)
        assert answer.status_code == 200, answer.text
        frames = await wait_frames(
            client, session_id, lambda fs: ended(fs, "app", 2) is not None, timeout_s=TIMEOUT_S
        )
        second = ended(frames, "app", 2)
        assert second is not None and second["phase"] == "failed", second
        assert "resume" in second["reason"] and "PUT /apps" in second["reason"]
        assert await kind_of(client, session_id) == "running"

        apps = {"apps": [{"name": "app", "entryRelativePath": "app.telo"}]}
        answer = await route(client, "PUT", session_id, "apps", json=apps)
        assert answer.status_code in (200, 202), answer.text
        frames = await wait_frames(
            client, session_id, lambda fs: started(fs, "app", 3) is not None, timeout_s=TIMEOUT_S
        )
        [again] = session_pods(kubesim)
        assert again != pod
        await client.delete(f"/v1/sessions/{session_id}")
        await wait_gone(daemon, kubesim)


async def test_a_watch_pod_no_session_adopts_after_a_restart_is_deleted_by_the_sweep(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    """The session's record lost with the daemon (SIGKILL, then its state
    dir's watch records gone): the successor has nothing to adopt the pod
    for, and deletes it once `watch_adopt_grace_seconds` has passed."""
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as first, first.client() as client:
        session_id = await start(client, {"app.telo": APP})
        await wait_frames(client, session_id, has_status("running"), timeout_s=TIMEOUT_S)
        [pod] = session_pods(kubesim)
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
    records = tmp_path / "state" / "watch"
    for record in await trio.Path(records).iterdir():
        await record.unlink()
    assert session_pods(kubesim) == [pod]
    grace = {"watch_adopt_grace_seconds": 1}
    async with kube_daemon(kubesim, tmp_path, watch=WATCH, **grace) as second:
        await wait_pods(kubesim, lambda pods: not pods, TIMEOUT_S)
        async with second.client() as client:
            answer = await client.get(f"/v1/sessions/{session_id}")
            assert answer.status_code == 404, answer.text


def pod_phase(sim: KubeSim, name: str) -> str | None:
    pod = sim.store.get("pods", "runnerd", name)
    return None if pod is None else (pod.get("status") or {}).get("phase")


async def test_the_pod_s_deadline_ends_it_while_runnerd_is_gone_and_the_successor_reports_it(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    """`activeDeadlineSeconds` is the TTL's backstop: with no daemon, the
    kubelet ends the pod `Failed` (DeadlineExceeded); the successor ends the
    session with its TTL and deletes the ended pod at once."""
    ttl = {"enabled": True, "max_ttl_seconds": 2}
    async with kube_daemon(kubesim, tmp_path, watch=ttl) as first, first.client() as client:
        session_id = await start(client, {"app.telo": APP})
        await wait_frames(client, session_id, has_status("running"), timeout_s=TIMEOUT_S)
        [pod] = session_pods(kubesim)
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
    with trio.fail_after(TIMEOUT_S):
        async with kubesim.store.subscribe() as changes:
            while pod_phase(kubesim, pod) != "Failed":  # the kubelet's DeadlineExceeded
                await changes.receive()
    async with kube_daemon(kubesim, tmp_path, watch=ttl) as second, second.client() as client:
        # Deleted at once (an ended pod has nothing to adopt), well before
        # `watch_adopt_grace_seconds` (60 s) would give it to the sweep.
        await wait_pods(kubesim, lambda pods: not pods, TIMEOUT_S)
        got = (await client.get(f"/v1/sessions/{session_id}")).json()
        assert got["status"] == {
            "kind": "failed",
            "message": "ttl: session exceeded its time limit of 2 s",
        }


async def test_with_reap_a_restart_deletes_the_watch_pods_left_and_adopts_no_session(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    """`on_restart = "reap"`: the watch sessions a SIGKILLed daemon left are
    not adopted (not listed), their pods deleted, their records and
    checkpoints removed, as run pods are."""
    idle = {"enabled": True, "idle_seconds": 1}
    async with kube_daemon(kubesim, tmp_path, watch=idle) as first, first.client() as client:
        dormant = await start(client, {"app.telo": APP})
        await until_kind(client, dormant, "suspended")  # no subscriber: idle
        await wait_pods(kubesim, lambda pods: not pods, TIMEOUT_S)
        live = await start(client, {"app.telo": APP})
        async with open_sse(client, live) as frames:  # a subscriber: never idle
            await next_status(frames, "running")
            assert len(session_pods(kubesim)) == 1
            assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
    state = trio.Path(tmp_path / "state")
    assert len(list(await (state / "watch-checkpoints").iterdir())) == 1
    reap = {"on_restart": "reap"}
    async with kube_daemon(kubesim, tmp_path, watch=WATCH, **reap) as second:
        await wait_pods(kubesim, lambda pods: not pods, TIMEOUT_S)
        async with second.client() as client:
            listed = (await client.get("/v1/sessions")).json()
            assert [s for s in listed["sessions"] if s["sessionId"] in (live, dormant)] == []
            for session_id in (live, dormant):
                answer = await client.get(f"/v1/sessions/{session_id}")
                assert answer.status_code == 404, answer.text
        # (A write's temporary file the SIGKILL interrupted may stay.)
        records = [p for p in await (state / "watch").iterdir() if p.suffix == ".json"]
        assert records == []
        assert list(await (state / "watch-checkpoints").iterdir()) == []


async def test_an_app_whose_entry_is_missing_fails_to_start_and_a_write_creating_it_runs_it(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    """`PUT /apps` with an entry not in the workspace: the contract's pair
    `started` + `failed "entry 'later.telo' is not a file in the workspace"`,
    the session serves on; a write creating the entry restarts the app,
    whose container's entry wait then finds it."""
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as daemon, daemon.client() as client:
        session_id = await start(client, {"app.telo": APP})
        await wait_frames(client, session_id, has_status("running"), timeout_s=TIMEOUT_S)
        apps = {
            "apps": [
                {"name": "app", "entryRelativePath": "app.telo"},
                {"name": "late", "entryRelativePath": "later.telo"},
            ]
        }
        answer = await route(client, "PUT", session_id, "apps", json=apps)
        assert answer.status_code in (200, 202), answer.text
        frames = await wait_frames(
            client, session_id, lambda fs: len(runs(fs, "late")) >= 2, timeout_s=TIMEOUT_S
        )
        reason = "entry 'later.telo' is not a file in the workspace"
        assert [(e["phase"], e.get("reason")) for e in runs(frames, "late")[:2]] == [
            ("started", None),
            ("failed", reason),
        ]
        write = {"write": [{"path": "later.telo", "content": "print late\nwait\n"}]}
        answer = await route(client, "POST", session_id, "workspace", json=write)
        assert answer.status_code == 200, answer.text  # the session serves on
        await wait_frames(
            client, session_id, lambda fs: started(fs, "late", 2) is not None, timeout_s=TIMEOUT_S
        )
        assert await kind_of(client, session_id) == "running"
        await client.delete(f"/v1/sessions/{session_id}")
        await wait_gone(daemon, kubesim)
