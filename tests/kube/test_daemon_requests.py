"""What one run session costs the apiserver: the requests a real runnerd on the
test cluster makes for it, by verb and resource, counted by the cluster, and
that the output stays whole with no log read for a fresh run (its program
waits for the first attach)."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.contract_client import read_pty, wait_status, wait_terminal
from tests.harness import open_ws
from tests.kube.daemon import kube_daemon, start_telo, wait_no_pods
from tests.kube.test_daemon_stop_bounds import LATE_ATTACH
from tests.kubesim.server import KubeSim

TIMEOUT_S = 20.0


def session_requests(sim: KubeSim) -> collections.Counter[tuple[str, str]]:
    """The cluster's requests naming one pod (create is on the collection),
    the informer's daemon-wide list and watch aside."""
    counted: collections.Counter[tuple[str, str]] = collections.Counter()
    for (verb, pattern), n in sim.stats.requests.items():
        if verb in ("list", "watch"):
            continue
        counted[(verb, pattern)] += n
    return counted


POD = "/api/v1/namespaces/{namespace}/pods"
CREATE = ("create", POD)
DELETE = ("delete", POD + "/{name}")
ATTACH = ("get", POD + "/{name}/attach")
LOG = ("get", POD + "/{name}/log")


async def run_to_end(
    sim: KubeSim, tmp_path: Path, script: str, **kubernetes: Any
) -> tuple[collections.Counter[tuple[str, str]], bytes]:
    """One session of `script` to its end and its pod gone: the requests it
    cost, and its output as a client reads it afterwards."""
    async with kube_daemon(sim, tmp_path, **kubernetes) as daemon, daemon.client() as client:
        before = session_requests(sim)
        session_id = await start_telo(client, script)
        assert await wait_terminal(client, session_id, timeout_s=TIMEOUT_S) == {
            "kind": "exited",
            "code": 0,
        }
        await wait_no_pods(sim)
        spent = session_requests(sim) - before
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            replay = await read_pty(ws, timeout_s=TIMEOUT_S)
    return spent, replay.output


async def test_a_run_session_costs_one_create_one_delete_and_its_terminal(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # `print hi; exit 0` to its end: the pod created once and deleted once,
    # its state from the shared watch (no GET, no PATCH of the pod), its
    # terminal from one attach and the log reads the splice needs (an
    # attach joins the output some time after its handshake, so what the
    # container wrote before is only in pods/log), and the output once.
    spent, output = await run_to_end(kubesim, tmp_path, "print hi\nexit 0\n")
    assert output == b"hi\r\n"
    assert set(spent) <= {CREATE, DELETE, ATTACH, LOG}, spent
    assert (spent[CREATE], spent[DELETE]) == (1, 1), spent
    assert spent[ATTACH] <= 1, spent
    assert spent[LOG] <= 2, spent


# No quiet-time read: the log is read only once the attach delivered output
# or ended, whichever the machine's speed makes first (both are one read).
NO_QUIET_READ = {"attach_quiet_seconds": 30}


async def test_a_fresh_run_session_reads_no_log_and_loses_nothing(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # The program is held until the first attach delivered the start line
    # (`podspec.gated_command`): that attach saw all its output, even a
    # print at its very start, so no pods/log read; the line never shows.
    spent, output = await run_to_end(kubesim, tmp_path, "print hi\nexit 0\n", **NO_QUIET_READ)
    assert output == b"hi\r\n"
    assert spent[LOG] == 0, spent
    assert sum(spent.values()) == 3, spent  # create, attach, delete


@pytest.mark.parametrize("script,expected", LATE_ATTACH.values(), ids=LATE_ATTACH.keys())
async def test_a_late_attach_holds_the_program_and_nothing_is_lost(
    kubesim: KubeSim, tmp_path: Path, script: str, expected: bytes
) -> None:
    # The attach joins a second after its handshake: the start line goes
    # through only then, so the program writes nothing before; no log read.
    kubesim.faults.attach_lag_s = 1.0
    spent, output = await run_to_end(kubesim, tmp_path, script, **NO_QUIET_READ)
    assert output == expected
    assert spent[LOG] == 0, spent


async def test_after_the_gate_stdin_reaches_the_program_and_its_exit_code_propagates(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # The gate's ^D is not the program's input and never shows: the program's
    # first output is its own, a line sent right after `running` is its first
    # stdin (echoed once, by the tty), and its own exit code is the session's.
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        session_id = await start_telo(client, "print ready\necho got:\nprint bye\nexit 3\n")
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            await ws.send_message(b"abc\n")
            transcript = await read_pty(ws, until=b"got:abc", timeout_s=TIMEOUT_S)
            await ws.send_message(b"quit\n")
            await read_pty(ws, transcript, timeout_s=TIMEOUT_S)
        assert await wait_terminal(client, session_id) == {"kind": "exited", "code": 3}
        assert transcript.output.count(b"ready") == 1, transcript.output
        assert transcript.output.count(b"abc") == 2  # the tty's echo, then the program's
        assert b"\x04" not in transcript.output and b"^D" not in transcript.output
        assert b"bye\r\n" in transcript.output
        await wait_no_pods(kubesim)
