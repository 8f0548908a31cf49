"""Stopping on the Kubernetes backend whatever the apiserver does: a stop
during a create the apiserver holds is bounded, and the pod, should it land
later, is deleted; a stop before the terminal attached keeps what the
container had written; the start deadline counts a held create too."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.e2e.contract_client import read_pty, wait_status, wait_terminal
from tests.harness import open_ws
from tests.kube.daemon import NOT_PRESENT, kube_daemon, session_pods, start_telo, wait_no_pods
from tests.kubesim.conftest import seed_pod
from tests.kubesim.server import KubeSim

TIMEOUT_S = 20.0
MANAGED = {"app.kubernetes.io/managed-by": "runnerd"}
# The contract: SIGTERM → exit within 10 s.
SHUTDOWN_S = 10.0
PODS = "/api/v1/namespaces/{namespace}/pods"


async def _create_arrived(sim: KubeSim, count: int) -> None:
    with trio.fail_after(TIMEOUT_S):
        await sim.stats.wait_until(lambda s: s.count("create", PODS) >= count)


@pytest.mark.slow
async def test_a_stop_during_a_held_create_is_bounded_and_a_late_pod_is_deleted(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    kubesim.faults.slow_next(1, TIMEOUT_S, verb="create")
    async with kube_daemon(kubesim, tmp_path / "first") as daemon, daemon.client() as client:
        # DELETE while the apiserver holds the create: stopped within the
        # bound, and the running daemon deletes the pod when it lands (the
        # cluster's commit of that create, after the client gave up).
        session_id = await start_telo(client, "print up\nwait\n")
        await _create_arrived(kubesim, 1)
        with trio.fail_after(SHUTDOWN_S):
            assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
        final = await wait_terminal(client, session_id)
        assert final == {"kind": "stopped"}, final
        await seed_pod(kubesim, f"runnerd-{session_id}", labels=MANAGED)
        await wait_no_pods(kubesim, TIMEOUT_S)
        # SIGTERM while the apiserver answers nothing at all, mid-create:
        # the daemon exits within the contract's 10 s.
        kubesim.faults.go_silent()
        late = await start_telo(client, "print up\nwait\n")
        await _create_arrived(kubesim, 2)
        assert await daemon.stop(timeout_s=SHUTDOWN_S) == 0
    # The apiserver answers again and the create lands after the daemon left:
    # the next daemon's reaper deletes it.
    kubesim.faults.resume()
    await seed_pod(kubesim, f"runnerd-{late}", labels=MANAGED)
    async with kube_daemon(kubesim, tmp_path / "second"):
        await wait_no_pods(kubesim, TIMEOUT_S)


async def test_a_stop_before_any_attach_came_up_ends_the_held_program(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # No attach ever comes up: the program waits for its start line
    # (`podspec.gated_command`), so it writes nothing the log alone would
    # hold; the stop ends it all the same.
    kubesim.faults.deny("create", "pods/attach")
    kubesim.faults.deny("get", "pods/attach")
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        session_id = await start_telo(client, "print written before any attach\nwait\n")
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
        assert await wait_terminal(client, session_id) == {"kind": "stopped"}
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            replay = await read_pty(ws, timeout_s=TIMEOUT_S)
        assert b"written before any attach" not in replay.output
        await wait_no_pods(kubesim)


async def test_the_start_deadline_counts_from_the_start_not_from_the_pod_create(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # The apiserver holds the create past the whole start deadline: when it
    # answers, the time is up, however fast the pod would run from then on.
    kubesim.faults.slow_next(1, 2.0, verb="create")
    async with (
        kube_daemon(kubesim, tmp_path, start_deadline_seconds=1) as daemon,
        daemon.client() as client,
    ):
        session_id = await start_telo(client, "print x\nwait\n")
        final = await wait_terminal(client, session_id, timeout_s=TIMEOUT_S)
        assert final["kind"] == "failed"
        assert final["message"].startswith("provision: the session pod was not running after 1 s")
        await wait_no_pods(kubesim)


async def test_a_start_that_times_out_on_a_refused_watch_names_the_refusal(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # The runner may create pods but not list or watch them (an RBAC slip):
    # the start cannot see its pod run, and its failure says why.
    kubesim.faults.deny("list", "pods")
    kubesim.faults.deny("watch", "pods")
    async with (
        kube_daemon(kubesim, tmp_path, start_deadline_seconds=2) as daemon,
        daemon.client() as client,
    ):
        session_id = await start_telo(client, "print x\nwait\n")
        final = await wait_terminal(client, session_id, timeout_s=TIMEOUT_S)
        assert final == {
            "kind": "failed",
            "message": (
                "provision: the session pod was not running after 2 s (last: waiting for a node;"
                " could not watch the session pods: the runner is not permitted to do this"
                " (Forbidden, HTTP 403). The cluster operator must check the runner's RBAC.)"
            ),
        }
        kubesim.faults.allow("list", "pods")
        kubesim.faults.allow("watch", "pods")
        await wait_no_pods(kubesim, TIMEOUT_S)


# The attach joins the container's streams 1 s after its upgrade: the log is
# read (empty) at once and the container prints in between. Then it either
# stays quiet (the attach sees only its end) or goes on writing once the
# attach is in.
LATE_ATTACH = {
    "quiet-after": ("sleep 0.3\nprint printed in the gap\nsleep 1.5\n", b"printed in the gap\r\n"),
    "writes-after": (
        "sleep 0.3\nprint in the gap\nsleep 1.2\nprint after the attach\nsleep 0.3\n",
        b"in the gap\r\nafter the attach\r\n",
    ),
}


@pytest.mark.parametrize("script,expected", LATE_ATTACH.values(), ids=LATE_ATTACH.keys())
async def test_output_written_before_a_late_attach_joins_is_shown_once_in_order(
    kubesim: KubeSim, tmp_path: Path, script: str, expected: bytes
) -> None:
    kubesim.faults.attach_lag_s = 1.0
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        session_id = await start_telo(client, script)
        assert await wait_terminal(client, session_id, timeout_s=TIMEOUT_S) == {
            "kind": "exited",
            "code": 0,
        }
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            replay = await read_pty(ws, timeout_s=TIMEOUT_S)
        assert replay.output == expected


@pytest.mark.slow
async def test_pods_a_sigterm_could_not_delete_are_deleted_not_adopted_next_start(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        # Sessions in every phase: running, running with its attach dropped
        # (re-attaching), pending (its image pull backing off), creating.
        running = await start_telo(client, "print up\nwait\n")
        dropped = await start_telo(client, "print up\nwait\n")
        for session_id in (running, dropped):
            await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        pending = await start_telo(client, "print x\n", image=NOT_PRESENT, pull_policy="always")
        kubesim.faults.deny("get", "pods/attach")
        kubesim.faults.deny("create", "pods/attach")
        await kubesim.faults.drop_attaches()
        kubesim.faults.slow_next(1, 60, verb="create")
        creating = await start_telo(client, "print up\nwait\n")
        await _create_arrived(kubesim, 4)
        # SIGTERM stops them all; the apiserver (frozen) sees none of the deletes.
        kubesim.faults.go_silent(handshakes=True)
        assert await daemon.stop(timeout_s=SHUTDOWN_S) == 0
    assert session_pods(kubesim)
    kubesim.faults.resume()
    kubesim.faults.allow("get", "pods/attach")
    kubesim.faults.allow("create", "pods/attach")
    # The next daemon (on_restart = "adopt") deletes them: their sessions were
    # stopped, and none comes back as `running`.
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        await wait_no_pods(kubesim, TIMEOUT_S)
        for session_id in (running, dropped, pending, creating):
            assert (await client.get(f"/v1/sessions/{session_id}")).status_code == 404
