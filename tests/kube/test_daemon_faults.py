"""The Kubernetes backend through a real daemon when the cluster misbehaves or
time runs out: deadlines, back-offs, the TTL, API errors, watch cuts, an
apiserver restart, a shutdown, and the pods a previous process left."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio

from tests.e2e.contract_client import read_pty, wait_status, wait_terminal
from tests.harness import open_ws
from tests.kube.daemon import (
    NOT_PRESENT,
    kube_daemon,
    session_pods,
    start_telo,
    wait_no_pods,
    wait_pods,
)
from tests.kubesim.conftest import build_client, seed_pod
from tests.kubesim.server import KubeSim

TIMEOUT_S = 20.0


# An image the node cannot pull ends the start either way: after the pull
# back-off's grace, or at the start deadline, whichever the config makes first.
@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            {"pull_backoff_grace_seconds": 1},
            r"provision: container session: .*(ImagePullBackOff|ErrImagePull)",
        ),
        (
            {"start_deadline_seconds": 1},
            re.escape("provision: the session pod was not running after 1 s"),
        ),
    ],
    ids=["pull_back_off_grace", "start_deadline"],
)
async def test_an_unpullable_image_fails_the_start_and_leaves_no_pod(
    kubesim: KubeSim, tmp_path: Path, setting: dict[str, float], message: str
) -> None:
    assert kubesim.kubelet is not None
    kubesim.kubelet.image_pull_backoff_s = 0.2
    async with (
        kube_daemon(kubesim, tmp_path, **setting) as daemon,
        daemon.client() as client,
    ):
        session_id = await start_telo(client, "print x\n", image=NOT_PRESENT)
        final = await wait_terminal(client, session_id, timeout_s=TIMEOUT_S)
        assert final["kind"] == "failed"
        assert re.match(message, final["message"], re.DOTALL), final["message"]
        await wait_no_pods(kubesim)


async def test_ttl_ends_the_session_and_deletes_its_pod(kubesim: KubeSim, tmp_path: Path) -> None:
    ttl = {"ttl_seconds": 2}
    async with (
        kube_daemon(kubesim, tmp_path, limits={"session": ttl, "app": ttl}) as daemon,
        daemon.client() as client,
    ):
        session_id = await start_telo(client, "print up\nwait\n")
        final = await wait_terminal(client, session_id, timeout_s=TIMEOUT_S)
        assert final == {"kind": "failed", "message": "ttl: session exceeded its time limit of 2 s"}
        await wait_no_pods(kubesim)


async def test_ports_are_dialled_on_the_pod_and_debug_events_relayed(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        session_id = await start_telo(
            client,
            'listen 8080\nevent ready {"n":1}\nwait\n',
            ports=[{"port": 8080, "protocol": "tcp"}],
            inspect=True,
        )
        with trio.fail_after(TIMEOUT_S):
            async with client.stream(
                "GET", f"/v1/sessions/{session_id}/events", timeout=None
            ) as response:
                seen: set[str] = set()
                async for line in response.aiter_lines():
                    if '"state":"reachable"' in line.replace(" ", ""):
                        seen.add("reachable")
                    if line.startswith("data:") and '"type":"debug"' in line.replace(" ", ""):
                        seen.add("debug")
                    if seen == {"reachable", "debug"}:
                        break
        got = (await client.get(f"/v1/sessions/{session_id}")).json()
        assert got["status"]["kind"] == "running"
        assert got["status"]["inspectUrl"].endswith(":9230")
        # No ingress_base_domain: nothing published, the port announced without a host.
        assert got["status"]["endpoints"] == [{"host": "", "port": 8080, "protocol": "tcp"}]
        assert not kubesim.store.list("services", "runnerd")
        assert not kubesim.store.list("ingresses", "runnerd")
        assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
        await wait_no_pods(kubesim)


# Connection attempts runnerd may make while the apiserver is down for 3 s:
# each retrying loop (the shared watch, a session's attach) backs off from
# 0.2 s doubling, so a handful each.
MAX_ATTEMPTS_WHILE_DOWN = 20


@pytest.mark.slow
async def test_api_errors_watch_cuts_and_a_restart_do_not_end_a_session(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        # 429 with Retry-After on the create: retried (the server said when).
        kubesim.faults.fail_next(2, 429, verb="create")
        session_id = await start_telo(client, "print up\nsleep 6\nexit 4\n")
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        # A watch cut whose resume is answered 410: the re-list meets a burst
        # of 500s (a read: retried with backoff) and gets through.
        kubesim.faults.fail_next(3, 500, retry_after_s=None, verb="list")
        kubesim.faults.expire_next_watch()
        kubesim.faults.cut_watches()
        await kubesim.stats.wait_until(lambda s: s.responses[500] >= 3 and s.watches_open == 1)
        # Cut abruptly too.
        kubesim.faults.cut_watches(abrupt=True)
        # The apiserver down for 3 s: the watch (and the session's attach)
        # reconnect with capped backoff, not in a tight loop (the upstream
        # runner made ~850 connection attempts in 4 s).
        await kubesim.faults.restart(down_s=3)
        assert kubesim.stats.connections_refused <= MAX_ATTEMPTS_WHILE_DOWN, (
            kubesim.stats.connections_refused
        )
        async with daemon.client() as again:
            got = await again.get(f"/v1/sessions/{session_id}")
        assert got.json()["status"] == {"kind": "running"}
        # The session still ends on its own, and is seen to.
        final = await wait_terminal(client, session_id, timeout_s=TIMEOUT_S)
        assert final == {"kind": "exited", "code": 4}
        await wait_no_pods(kubesim)


async def test_shutdown_deletes_live_pods_and_start_reaps_stale_ones(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    stale = {"app.kubernetes.io/managed-by": "runnerd"}
    await seed_pod(kubesim, "runnerd-stale2345678", labels=stale)
    await seed_pod(kubesim, "someone-elses", labels={"app.kubernetes.io/managed-by": "other"})
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        await wait_pods(kubesim, lambda pods: "runnerd-stale2345678" not in pods, TIMEOUT_S)
        session_id = await start_telo(client, "print up\nwait\n")
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        assert f"runnerd-{session_id}" in session_pods(kubesim)
        assert await daemon.stop() == 0
    assert session_pods(kubesim) == ["someone-elses"]


@pytest.mark.slow
async def test_a_finished_pod_whose_delete_failed_is_deleted_later(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        # Every delete answered 500 for longer than the session's own delete
        # waits (its retries give up) once the pod has ended on its own...
        kubesim.faults.fail_next(12, 500, retry_after_s=None, verb="delete")
        session_id = await start_telo(client, "print up\nexit 0\n")
        # ...the status is recorded all the same...
        assert await wait_terminal(client, session_id) == {"kind": "exited", "code": 0}
        # ...the log says so (not "deleted")...
        await daemon.wait_for_stderr("session pod not deleted yet", TIMEOUT_S)
        assert "session pod deleted" not in daemon.stderr_text()
        # ...and the pod does not stay behind once the apiserver deletes again.
        await wait_no_pods(kubesim, 3 * TIMEOUT_S)
        assert kubesim.stats.responses[500] == 12


async def test_a_refused_delete_is_stop_failed_and_the_session_runs_on(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        session_id = await start_telo(client, "print up\necho got:\n")
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        # RBAC no longer lets runnerd delete pods (a real 403 Status).
        kubesim.faults.deny("delete", "pods")
        refused = await client.delete(f"/v1/sessions/{session_id}")
        assert refused.status_code == 500, refused.text
        body = refused.json()
        assert body["error"] == "stop_failed", body
        message = body["message"]
        assert "still running" in message and "not permitted" in message, message
        for identity in ("serviceaccount", "system:", "namespace", '"runnerd"'):
            assert identity not in message.lower(), message
        # Nothing changed: the session runs, its pod too, its terminal works.
        got = (await client.get(f"/v1/sessions/{session_id}")).json()
        assert got["status"] == {"kind": "running"}
        pod = kubesim.store.get("pods", "runnerd", f"runnerd-{session_id}")
        assert pod is not None and pod["status"]["phase"] == "Running"
        assert not pod["metadata"].get("deletionTimestamp")
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            await ws.send_message(b"still\n")
            await read_pty(ws, until=b"got:still", timeout_s=TIMEOUT_S)
        # Allowed again: the next DELETE stops it, and the pod is gone.
        kubesim.faults.allow("delete", "pods")
        assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
        assert await wait_terminal(client, session_id) == {"kind": "stopped"}
        assert session_pods(kubesim) == []


@pytest.mark.slow
async def test_twenty_concurrent_deletes_all_end_stopped_with_no_pod_left(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        ids = [await start_telo(client, "print up\nwait\n") for _ in range(20)]
        for session_id in ids:
            await wait_status(client, session_id, "running", timeout_s=3 * TIMEOUT_S)
        answers: list[int] = []

        async def stop(session_id: str) -> None:
            answers.append(
                (await client.delete(f"/v1/sessions/{session_id}", timeout=TIMEOUT_S)).status_code
            )

        async with trio.open_nursery() as nursery:
            for session_id in ids:
                nursery.start_soon(stop, session_id)
        assert answers == [204] * 20
        # Each 204 came once its session was stopped and its pod gone.
        assert session_pods(kubesim) == []
        for session_id in ids:
            got = (await client.get(f"/v1/sessions/{session_id}")).json()
            assert got["status"] == {"kind": "stopped"}, got


async def test_a_pod_deleted_outside_runnerd_fails_the_session(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        session_id = await start_telo(client, "print up\nwait\n")
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        # `kubectl delete pod`: a graceful delete, the container killed by SIGTERM.
        async with build_client(kubesim) as kube:
            gone = await kube.delete(f"/api/v1/namespaces/runnerd/pods/runnerd-{session_id}")
            assert gone.status_code == 200, gone.text
        assert await wait_terminal(client, session_id, timeout_s=TIMEOUT_S) == {
            "kind": "failed",
            "message": "the session pod was deleted outside runnerd",
        }
        await wait_no_pods(kubesim)
