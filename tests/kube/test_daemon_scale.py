"""Fifty concurrent sessions through a real daemon: one watch stream to the
apiserver whatever the session count, a pooled handful of connections kept
across a quiet spell, and no finished pod left behind."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from runnerd.kube.client import Policy
from tests.e2e.contract_client import wait_terminal
from tests.kube.daemon import kube_daemon, start_telo, wait_no_pods
from tests.kubesim.server import KubeSim

SESSIONS = 50
# Each session runs this long between its start and its end, with no request
# to the apiserver meanwhile: longer than httpx's default keep-alive (5 s),
# after which a pool that let its idle connections go opens new ones.
QUIET_S = 6


@pytest.mark.slow
async def test_fifty_sessions_share_one_watch_and_a_pool(kubesim: KubeSim, tmp_path: Path) -> None:
    stats = kubesim.stats
    async with (
        kube_daemon(kubesim, tmp_path, runner={"max_sessions": SESSIONS}) as daemon,
        daemon.client() as client,
    ):
        await stats.wait_until(lambda s: s.watches_open == 1)
        before = stats.snapshot()
        finals: dict[str, dict[str, object]] = {}

        async def one(i: int) -> None:
            script = f"print session {i}\nsleep {QUIET_S}\nexit {i % 7}\n"
            session_id = await start_telo(client, script)
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
    # Every request shares the pool (each attach is a WebSocket of its own),
    # and the pool keeps its connections through the quiet spell: none is let
    # go idle to be re-opened for the ends. (Counting connections alone would
    # also count re-connections after a stall or a cancelled request, which
    # load can cause; an idle close is the pool's own decision.)
    closed_idle = after["connections"]["closedIdle"] - before["connections"]["closedIdle"]
    attaches = after["attaches"]["total"] - before["attaches"]["total"]
    connections = after["connections"]["accepted"] - before["connections"]["accepted"]
    assert closed_idle == 0, (connections, attaches, closed_idle)
    assert connections - attaches <= Policy().max_connections, (connections, attaches)
    print(
        f"\n{SESSIONS} sessions: {connections} connections ({attaches} attaches),"
        f" requests by verb {after['requestsByVerb']}"
    )
