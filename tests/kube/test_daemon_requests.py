"""What one run session costs the apiserver: the requests a real runnerd on the
test cluster makes for it, by verb and resource, counted by the cluster, and
that the output stays whole with the splice's log reads cut to one."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.contract_client import read_pty, wait_terminal
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


async def test_one_log_read_when_the_attach_speaks_or_ends_first(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # Read after the attach's first output, the log holds everything up to
    # where the attach joined: no second read to find the seam. Read after
    # an attach that saw nothing, it is the whole output. Either way: once.
    spent, output = await run_to_end(kubesim, tmp_path, "print hi\nexit 0\n", **NO_QUIET_READ)
    assert output == b"hi\r\n"
    assert spent[LOG] == 1, spent
    assert sum(spent.values()) == 4, spent  # create, attach, the read, delete


@pytest.mark.parametrize("script,expected", LATE_ATTACH.values(), ids=LATE_ATTACH.keys())
async def test_a_late_attach_still_has_the_log_read_and_nothing_is_lost(
    kubesim: KubeSim, tmp_path: Path, script: str, expected: bytes
) -> None:
    # The attach joins a second after its handshake: what the container
    # wrote meanwhile is only in its log, which is read, and shown once.
    kubesim.faults.attach_lag_s = 1.0
    spent, output = await run_to_end(kubesim, tmp_path, script, **NO_QUIET_READ)
    assert output == expected
    assert spent[LOG] >= 1, spent
