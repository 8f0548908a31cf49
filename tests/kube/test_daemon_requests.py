"""What one run session costs the apiserver: the requests a real runnerd on the
test cluster makes for it, by verb and resource, counted by the cluster."""

from __future__ import annotations

import collections
from pathlib import Path

from tests.e2e.contract_client import read_pty, wait_terminal
from tests.harness import open_ws
from tests.kube.daemon import kube_daemon, start_telo, wait_no_pods
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


async def test_a_run_session_costs_one_create_one_delete_and_its_terminal(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # `print hi; exit 0` to its end: the pod created once and deleted once,
    # its state from the shared watch (no GET, no PATCH of the pod), its
    # terminal from one attach and the log reads the splice needs (an
    # attach joins the output some time after its handshake, so what the
    # container wrote before is only in pods/log), and the output once.
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        before = session_requests(kubesim)
        session_id = await start_telo(client, "print hi\nexit 0\n")
        assert await wait_terminal(client, session_id, timeout_s=TIMEOUT_S) == {
            "kind": "exited",
            "code": 0,
        }
        await wait_no_pods(kubesim)
        spent = session_requests(kubesim) - before
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            replay = await read_pty(ws, timeout_s=TIMEOUT_S)
    assert replay.output == b"hi\r\n"
    assert set(spent) <= {CREATE, DELETE, ATTACH, LOG}, spent
    assert (spent[CREATE], spent[DELETE]) == (1, 1), spent
    assert spent[ATTACH] <= 1, spent
    assert spent[LOG] <= 2, spent
