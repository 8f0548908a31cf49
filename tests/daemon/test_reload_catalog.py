"""A reload that withdraws an app: sessions admitted before it but not yet
run fail their start, running ones run on, new ones are refused.

The re-check is the session core's (`runnerd.session.admission.Catalog`),
made just before the backend runs, so no backend sees the catalog.
"""

from __future__ import annotations

import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio

from runnerd.contract import StartAppSessionRequest
from runnerd.daemon.reload import _apply_reloaded, build_reloaded
from runnerd.session.admission import admit_app, new_session_id
from tests.e2e.contract_client import read_events, statuses, wait_status
from tests.e2e.in_process import open_app, open_client
from tests.harness import read_pty_until, start_daemon

GREET_RUNTIME = {"greet": {"command": ["/bin/sh", "-c", "echo hello; exec cat"]}}
WITH_APP: dict[str, Any] = {
    "local": {"runtimes": GREET_RUNTIME},
    "apps": {"greeter": {"image": "greet"}},
}
WITHOUT_APP: dict[str, Any] = {"local": {"runtimes": GREET_RUNTIME}}
WITHDRAWN = "provision: app 'greeter' is no longer offered by this runner"


async def test_an_app_withdrawn_between_admission_and_run_fails_its_start(
    tmp_path: Path,
) -> None:
    # The window a client can hit: its POST admitted the app, then a SIGHUP
    # swapped in a catalog without it before the session's task ran. Driven
    # here without a checkpoint between the start and the swap, so the
    # ordering is certain, not a race the test hopes to win.
    async with open_app(tmp_path, overrides=WITH_APP) as (state, socket_path):
        old = state.config
        request = StartAppSessionRequest()
        spec = admit_app("greeter", request, old, accepted_terms=None, session_id=new_session_id())
        session = state.sessions.start(spec)
        new = replace(old, apps={})
        _apply_reloaded(state, old, new, build_reloaded(old, new))

        async with open_client(socket_path) as client:
            frames = await read_events(client, session.id)
            summary = (await client.get(f"/v1/sessions/{session.id}")).json()
    kinds = [status["kind"] for status in statuses(frames)]
    assert kinds == ["starting", "failed"], frames
    assert summary["status"] == {"kind": "failed", "message": WITHDRAWN}


async def test_a_reload_withdrawing_an_app_leaves_its_running_session_and_refuses_new_ones(
    tmp_path: Path,
) -> None:
    async with start_daemon(tmp_path, WITH_APP) as daemon, daemon.client() as client:
        started = await client.post("/v1/apps/greeter/sessions", json={})
        assert started.status_code == 201, started.text
        session_id = started.json()["sessionId"]
        await wait_status(client, session_id, "running")
        await read_pty_until(daemon.socket_path, session_id, b"hello")

        daemon.write_config(WITHOUT_APP)
        daemon.send_signal(signal.SIGHUP)
        await daemon.wait_for_stderr("config reloaded")

        refused = await client.post("/v1/apps/greeter/sessions", json={})
        assert refused.status_code == 404, refused.text
        assert refused.json()["error"] == "unknown_app"
        status = (await client.get(f"/v1/sessions/{session_id}")).json()["status"]
        assert status["kind"] == "running"
        with trio.fail_after(10):
            assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
