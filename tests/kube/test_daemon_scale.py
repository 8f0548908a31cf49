"""Fifty concurrent sessions through a real daemon: one watch stream to the
apiserver whatever the session count, a pooled handful of connections, and
no finished pod left behind."""

from __future__ import annotations

from pathlib import Path

import trio

from runnerd.kube.client import Policy
from tests.e2e.contract_client import wait_terminal
from tests.kube.daemon import kube_daemon, start_telo, wait_no_pods
from tests.kubesim.server import KubeSim

SESSIONS = 50


async def test_fifty_sessions_share_one_watch_and_a_pool(kubesim: KubeSim,
                                                        tmp_path: Path) -> None:
    stats = kubesim.stats
    async with kube_daemon(kubesim, tmp_path, runner={"max_sessions": SESSIONS}) as daemon, \
            daemon.client() as client:
        await stats.wait_until(lambda s: s.watches_open == 1)
        before = stats.snapshot()
        finals: dict[str, dict[str, object]] = {}

        async def one(i: int) -> None:
            session_id = await start_telo(client, f"print session {i}\nsleep 1\nexit {i % 7}\n")
            finals[session_id] = await wait_terminal(client, session_id, timeout_s=90)

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for i in range(SESSIONS):
                    nursery.start_soon(one, i)
        assert sorted(f["kind"] for f in finals.values()) == ["exited"] * SESSIONS
        await wait_no_pods(kubesim, timeout_s=30)
        after = stats.snapshot()
    watches = after["watches"]["total"] - before["watches"]["total"]
    # One watch stream the whole time (it is re-opened only on a cut or its timeout).
    assert watches == 0 and after["watches"]["open"] <= 1
    # Each attach is a WebSocket of its own; every other request shares the pool.
    attaches = after["attaches"]["total"] - before["attaches"]["total"]
    connections = after["connections"]["accepted"] - before["connections"]["accepted"]
    assert connections - attaches <= Policy().max_connections, (connections, attaches)
    print(f"\n{SESSIONS} sessions: {connections} connections ({attaches} attaches),"
          f" requests by verb {after['requestsByVerb']}")
