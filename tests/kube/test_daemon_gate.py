"""A bundle session's start gate (`podspec.gated_command`) through a real
runnerd on the test cluster: the start line (^D) reaches the gate exactly
once, whether the daemon that created the pod went before its first attach
or that attach dropped before sending it, and the gate's marker
(`podspec.GATE_MARKER`) never reaches a client."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx

from tests.e2e.contract_client import PtyTranscript, read_pty, wait_status
from tests.harness import Daemon, open_ws
from tests.kube.daemon import kube_daemon, start_telo, wait_pods
from tests.kubesim.server import KubeSim

TIMEOUT_S = 20.0
# Echoes each stdin line as `got:<line>` until `quit` (or end-of-input), then exits 7.
ECHO = "print ready\necho got:\nexit 7\n"
MARKER = b"\x1b]6510;"  # the head of `podspec.GATE_MARKER`, as the test sees the wire


async def drop_and_reattach(sim: KubeSim) -> None:
    """Drop the attach; return once the next one reached the apiserver, so
    that what is typed next goes to it (input into a dead attach is lost)."""
    made = sum(sim.stats.attaches_by_protocol.values())
    # A lagged attach dropped earlier may still be counted as open: >= 1.
    assert await sim.faults.drop_attaches() >= 1
    await sim.stats.wait_until(lambda stats: sum(stats.attaches_by_protocol.values()) > made)


async def type_and_finish(daemon: Daemon, session_id: str, sim: KubeSim) -> PtyTranscript:
    """From seq 0: "ready" once, an echo, a dropped attach (its re-attach
    must not end the echo's input), a second echo, then `quit` to the close."""
    async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io?lastSeq=0") as ws:
        transcript = await read_pty(ws, until=b"ready", timeout_s=TIMEOUT_S)
        await ws.send_message(b"one\n")
        await read_pty(ws, transcript, until=b"got:one", timeout_s=TIMEOUT_S)
        await drop_and_reattach(sim)
        await ws.send_message(b"two\n")
        await read_pty(ws, transcript, until=b"got:two", timeout_s=TIMEOUT_S)
        await ws.send_message(b"quit\n")
        return await read_pty(ws, transcript, timeout_s=TIMEOUT_S)  # to the close


async def assert_started_once(
    daemon: Daemon, client: httpx.AsyncClient, session_id: str, sim: KubeSim
) -> None:
    """The program ran once, its input never ended by a second ^D, its exit
    code the session's; neither the live stream nor a replay from seq 0
    (once it ended) shows the marker."""
    transcript = await type_and_finish(daemon, session_id, sim)
    assert transcript.output.count(b"ready") == 1
    assert b"got:one" in transcript.output and MARKER not in transcript.output
    ended = await wait_status(client, session_id, "exited", timeout_s=TIMEOUT_S)
    assert ended == {"kind": "exited", "code": 7}
    async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io?lastSeq=0") as ws:
        replay = await read_pty(ws, timeout_s=TIMEOUT_S)
    assert replay.output.count(b"ready") == 1 and b"got:two" in replay.output
    assert MARKER not in replay.output


async def test_a_pod_adopted_before_its_first_attach_is_started_once(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # No attach comes up while the first daemon runs: its ^D never goes out.
    kubesim.faults.deny("create", "pods/attach")
    try:
        async with kube_daemon(kubesim, tmp_path) as first, first.client() as client:
            session_id = await start_telo(client, ECHO)
            await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
            assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
    finally:
        kubesim.faults.allow("create", "pods/attach")
    async with kube_daemon(kubesim, tmp_path) as second, second.client() as client:
        await assert_started_once(second, client, session_id, kubesim)
        await wait_pods(kubesim, lambda pods: not pods, TIMEOUT_S)


async def test_a_first_attach_dropped_before_its_start_line_still_starts_the_program(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # The kubelet never joins the first attach to the container: the ^D sent
    # through it is lost with it when it drops.
    kubesim.faults.attach_lag_s = 3600.0
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        session_id = await start_telo(client, ECHO)
        await kubesim.stats.wait_until(lambda stats: stats.attaches_open == 1)
        kubesim.faults.attach_lag_s = 0.0
        assert await kubesim.faults.drop_attaches() == 1
        await assert_started_once(daemon, client, session_id, kubesim)
