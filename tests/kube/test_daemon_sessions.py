"""The Kubernetes backend end to end: a real runnerd subprocess on the test
cluster (TLS and its token), driven over `/v1` like any client would."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import httpx
import trio

from tests.e2e.contract_client import (
    read_events,
    read_pty,
    resize_message,
    statuses,
    wait_status,
    wait_terminal,
)
from tests.harness import open_ws
from tests.kube.daemon import (
    BAD_NAME,
    KERNEL_CONFIG,
    NOT_PRESENT,
    kube_daemon,
    session_pods,
    start_telo,
    wait_no_pods,
    wait_pods,
)
from tests.kube.test_daemon_requests import LOG, session_requests
from tests.kubesim.server import KubeSim

TIMEOUT_S = 20.0


async def test_bundle_session_runs_to_exited_with_its_output(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        session_id = await start_telo(client, "print hello from the pod\nexit 3\n")
        frames = await read_events(client, session_id, timeout_s=TIMEOUT_S)
        kinds = [s["kind"] for s in statuses(frames)]
        assert kinds == ["starting", "running", "exited"]
        assert statuses(frames)[-1] == {"kind": "exited", "code": 3}
        progress = [f.data["message"] for f in frames if f.event == "progress"]
        assert "delivering the application" in progress
        # Printed and exited before any attach could be up: the log splice has it.
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            transcript = await read_pty(ws, timeout_s=TIMEOUT_S)
        assert transcript.output.count(b"hello from the pod") == 1
        await wait_no_pods(kubesim)


async def test_catalog_app_runs_its_image_entrypoint(kubesim: KubeSim, tmp_path: Path) -> None:
    # The kernel image's own entrypoint is `telo --help`: an app pod has no
    # bundle and no init container, and runs the image as it is.
    apps = {"kernel-help": {"image": "telorun/node:latest-slim", "env": {"TOKEN": "s3cret"}}}
    async with kube_daemon(kubesim, tmp_path, apps=apps) as daemon, daemon.client() as client:
        response = await client.post("/v1/apps/kernel-help/sessions", json={})
        assert response.status_code == 201, response.text
        session_id = response.json()["sessionId"]
        assert await wait_terminal(client, session_id, timeout_s=TIMEOUT_S) == {
            "kind": "exited",
            "code": 0,
        }
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            transcript = await read_pty(ws, timeout_s=TIMEOUT_S)
        assert b"usage: telo run ENTRY" in transcript.output
        assert "s3cret" not in daemon.stderr_text()
        await wait_no_pods(kubesim)


async def test_stdin_resize_and_exit_zero(kubesim: KubeSim, tmp_path: Path) -> None:
    script = "print ready\necho got:\nprint bye\n"
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        session_id = await start_telo(client, script)
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            transcript = await read_pty(ws, until=b"ready", timeout_s=TIMEOUT_S)
            await ws.send_message(resize_message(100, 30))
            await read_pty(ws, transcript, until=b"resize 100x30", timeout_s=TIMEOUT_S)
            await ws.send_message(b"abc\n")
            await read_pty(ws, transcript, until=b"got:abc", timeout_s=TIMEOUT_S)
            await ws.send_message(b"quit\n")
            await read_pty(ws, transcript, timeout_s=TIMEOUT_S)
        assert b"bye" in transcript.output
        assert transcript.output.count(b"ready") == 1  # the log splice adds no duplicate
        assert b"[runnerd:" not in transcript.output  # the attach ended, it did not drop
        assert await wait_terminal(client, session_id) == {"kind": "exited", "code": 0}
        await wait_no_pods(kubesim)


async def test_delete_during_start_and_while_running_ends_stopped(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        # An image no registry has: the pull backs off inside the 30 s grace.
        starting = await start_telo(client, "print never\n", image=NOT_PRESENT)
        running = await start_telo(client, "print up\nwait\n")
        await wait_pods(kubesim, lambda pods: len(pods) == 2, TIMEOUT_S)
        assert (await client.delete(f"/v1/sessions/{starting}")).status_code == 204
        assert await wait_terminal(client, starting) == {"kind": "stopped"}
        # `stopped` is published once the pod is gone, not merely asked to go.
        assert session_pods(kubesim) == [f"runnerd-{running}"]
        await wait_status(client, running, "running", timeout_s=TIMEOUT_S)
        assert (await client.delete(f"/v1/sessions/{running}")).status_code == 204
        assert await wait_terminal(client, running) == {"kind": "stopped"}
        assert session_pods(kubesim) == []


async def test_dropped_attach_is_restored_with_nothing_lost(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        before = session_requests(kubesim)
        session_id = await start_telo(client, "print ready\necho got:\n")
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            transcript = await read_pty(ws, until=b"ready", timeout_s=TIMEOUT_S)
            await kubesim.stats.wait_until(lambda stats: stats.attaches_open == 1)
            assert await kubesim.faults.drop_attaches() == 1
            await kubesim.stats.wait_until(
                lambda stats: stats.attaches_total == 2 and stats.attaches_open == 1
            )
            got = await client.get(f"/v1/sessions/{session_id}")
            assert got.json()["status"] == {"kind": "running"}
            await ws.send_message(b"after\n")
            await read_pty(ws, transcript, until=b"got:after", timeout_s=TIMEOUT_S)
            await ws.send_message(b"quit\n")
            await read_pty(ws, transcript, timeout_s=TIMEOUT_S)
        # The log backfilled the drop: no line says output was missed, none repeats.
        assert b"[runnerd:" not in transcript.output
        assert transcript.output.count(b"ready") == 1
        assert await wait_terminal(client, session_id) == {"kind": "exited", "code": 0}
        # The start needed no log read (its program waited for the attach);
        # the re-attach did: only the log has what was written meanwhile.
        assert (session_requests(kubesim) - before)[LOG] >= 1


async def test_refused_attach_writes_its_reason_once(kubesim: KubeSim, tmp_path: Path) -> None:
    kubesim.faults.deny("create", "pods/attach")
    kubesim.faults.deny("get", "pods/attach")
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        session_id = await start_telo(client, "print hi\nwait\n")
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            transcript = await read_pty(ws, until=b"RBAC.]", timeout_s=TIMEOUT_S)
        assert b"[runnerd: could not attach" in transcript.output
        assert b"not permitted" in transcript.output
        assert b"serviceaccount" not in transcript.output
        # Retried with backoff, said once.
        await kubesim.stats.wait_until(lambda s: s.responses[403] >= 3)
        assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            replay = await read_pty(ws, timeout_s=TIMEOUT_S)
        assert replay.output.count(b"[runnerd: could not attach") == 1
        await wait_no_pods(kubesim)


async def _failure(client: httpx.AsyncClient, session_id: str) -> str:
    final = await wait_terminal(client, session_id, timeout_s=TIMEOUT_S)
    assert final["kind"] == "failed", final
    return str(final["message"])


async def test_permanent_causes_fail_the_start_with_their_name(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        bad = await start_telo(client, "print x\n", image=BAD_NAME)
        never = await start_telo(client, "print x\n", image=NOT_PRESENT, pull_policy="never")
        bad_message = await _failure(client, bad)
        assert bad_message.startswith("provision: container session: InvalidImageName")
        never_message = await _failure(client, never)
        assert never_message.startswith("provision: container session: ErrImageNeverPull")
        await wait_no_pods(kubesim)


async def _client_visible(client: httpx.AsyncClient, session_id: str) -> str:
    """Everything a client can read about a session: its SSE stream and GET."""
    frames = await read_events(client, session_id, timeout_s=TIMEOUT_S)
    got = await client.get(f"/v1/sessions/{session_id}")
    return json.dumps([f.data for f in frames]) + got.text


async def test_quota_and_rbac_refusals_say_what_not_who(kubesim: KubeSim, tmp_path: Path) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        await kubesim.faults.set_quota("runnerd", "sessions", {"pods": "0"})
        quota = await start_telo(client, "print x\n")
        assert await _failure(client, quota) == (
            "create: could not create the session pod: the session namespace's resource"
            " quota is exhausted (Forbidden, HTTP 403)"
        )
        quota_text = await _client_visible(client, quota)
        await kubesim.faults.set_quota("runnerd", "sessions", {"pods": "100"})
        kubesim.faults.deny("create", "pods")
        rbac = await start_telo(client, "print x\n")
        assert await _failure(client, rbac) == (
            "create: could not create the session pod: the runner is not permitted to do this"
            " (Forbidden, HTTP 403). The cluster operator must check the runner's RBAC."
        )
        for text in (quota_text, await _client_visible(client, rbac)):
            lowered = text.lower()
            for secret in ("serviceaccount", "audit", "exceeded quota", "is forbidden", 'user \\"'):
                assert secret not in lowered, text
        assert session_pods(kubesim) == []


async def test_probe_says_what_is_wrong(kubesim: KubeSim, tmp_path: Path) -> None:
    body = {"config": KERNEL_CONFIG}
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        assert (await client.post("/v1/probe", json=body)).json() == {"status": "ready"}
        kubesim.faults.deny("list", "pods")
        report = (await client.post("/v1/probe", json=body)).json()
        assert report["status"] == "unavailable" and "RBAC" in report["remediation"]
        assert "serviceaccount" not in json.dumps(report)
        kubesim.faults.allow("list", "pods")
    async with (
        kube_daemon(kubesim, tmp_path, namespace="absent") as daemon,
        daemon.client() as client,
    ):
        report = (await client.post("/v1/probe", json=body)).json()
        assert report == {
            "status": "unavailable",
            "message": "the session namespace 'absent' does not exist",
            "remediation": "create it (kubectl create namespace absent) or set"
            " kubernetes.namespace",
        }


async def test_health_answers_while_the_apiserver_is_silent(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    kubesim.faults.go_silent()
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        with trio.fail_after(5):
            response = await client.get("/v1/health")
        assert response.status_code == 200 and response.json()["ok"] is True
        # The probe is bounded too, and says what to check.
        with trio.fail_after(15):
            probe = await client.post("/v1/probe", json={"config": KERNEL_CONFIG})
        assert probe.json() == {
            "status": "unavailable",
            "message": "the Kubernetes API did not answer within 5 s",
            "remediation": "check that the apiserver is up and reachable from this host",
        }
        kubesim.faults.resume()


async def test_bundle_listener_serves_nothing_else(kubesim: KubeSim, tmp_path: Path) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon:
        base = daemon_config_self_url(daemon.config_path)
        async with httpx.AsyncClient(base_url=base) as http:
            for path in ("/v1/health", "/internal/bundles/abc?token=00", "/internal/bundles/", "/"):
                response = await http.get(path)
                assert (response.status_code, response.content) == (404, b""), path


def daemon_config_self_url(path: Path) -> str:
    return str(tomllib.loads(path.read_text())["kubernetes"]["self_url"])
