"""The Kubernetes backend through a real daemon when the apiserver goes away
mid-session: the terminal's output survives the outage (backfilled from
`pods/log` after the re-attach), or the client is told what was lost."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.contract_client import read_pty, wait_terminal
from tests.harness import open_ws
from tests.kube.daemon import kube_daemon, start_telo, wait_no_pods
from tests.kubesim.server import KubeSim

TIMEOUT_S = 20.0
LINES = 10
# A line every 0.8 s: the outage below spans several of them. Then input
# echoed until `quit`: the terminal works through a new attach.
TICKING = "".join(f"print line {n}\nsleep 0.8\n" for n in range(1, LINES + 1)) + "echo got:\n"


def numbered_lines(output: bytes) -> list[int]:
    return [int(n) for n in re.findall(rb"line (\d+)\r?\n", output)]


@pytest.mark.slow
async def test_an_apiserver_outage_mid_session_loses_no_output(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        session_id = await start_telo(client, TICKING)
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            transcript = await read_pty(ws, until=b"line 2\r\n", timeout_s=TIMEOUT_S)
            # Down for 5 s: the attach drops, lines are written meanwhile.
            await kubesim.faults.restart(down_s=5)
            await read_pty(ws, transcript, until=f"line {LINES}\r\n".encode(), timeout_s=TIMEOUT_S)
            # Re-attached once the apiserver is back: input reaches the program.
            await kubesim.stats.wait_until(lambda stats: stats.attaches_open == 1)
            await ws.send_message(b"after\n")
            await read_pty(ws, transcript, until=b"got:after", timeout_s=TIMEOUT_S)
            await ws.send_message(b"quit\n")
            # Read on until the session ends and the server closes /io.
            await read_pty(ws, transcript, timeout_s=TIMEOUT_S)
        assert await wait_terminal(client, session_id) == {"kind": "exited", "code": 0}
        # Every line exactly once, in order, and no claim that output was missed.
        assert numbered_lines(transcript.output) == list(range(1, LINES + 1)), transcript.output
        assert b"[runnerd:" not in transcript.output
        seqs = transcript.seqs
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        # A client replaying from the start sees the same.
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io?lastSeq=0") as ws:
            replay = await read_pty(ws, timeout_s=TIMEOUT_S)
        assert numbered_lines(replay.output) == list(range(1, LINES + 1))
        await wait_no_pods(kubesim)


async def test_a_drop_the_log_cannot_backfill_is_said_in_the_terminal(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        session_id = await start_telo(client, "print ready\necho got:\n")
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            transcript = await read_pty(ws, until=b"ready", timeout_s=TIMEOUT_S)
            await kubesim.stats.wait_until(lambda stats: stats.attaches_open == 1)
            # RBAC no longer lets runnerd read the log: a drop cannot be backfilled.
            kubesim.faults.deny("get", "pods/log")
            assert await kubesim.faults.drop_attaches() == 1
            await read_pty(ws, transcript, until=b"some is missing.]", timeout_s=TIMEOUT_S)
            await ws.send_message(b"after\n")
            await read_pty(ws, transcript, until=b"got:after", timeout_s=TIMEOUT_S)
            await ws.send_message(b"quit\n")
            await read_pty(ws, transcript, timeout_s=TIMEOUT_S)
        assert transcript.output.count(b"[runnerd:") == 1
        assert await wait_terminal(client, session_id) == {"kind": "exited", "code": 0}
