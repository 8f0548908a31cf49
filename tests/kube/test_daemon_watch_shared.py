"""The shared watch scenarios (`tests/e2e/watch_scenarios.py`) on a watch pod
of the test cluster, through a real daemon: the same assertions as on the
local backend (`tests/e2e/test_watch_shared.py`), and nothing left in the
cluster after each."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.e2e import watch_scenarios as scenarios
from tests.e2e.io_client import Io
from tests.kube.daemon import KERNEL_CONFIG, kube_daemon
from tests.kube.test_daemon_watch import WATCH, wait_gone
from tests.kubesim.server import KubeSim

SERVER = {"max_body_bytes": scenarios.MAX_BODY_BYTES}


@asynccontextmanager
async def open_client(
    kubesim: KubeSim, tmp_path: Path, watch: dict[str, Any] = WATCH
) -> AsyncIterator[tuple[httpx.AsyncClient, Io]]:
    """A daemon on `kubesim`, its client and `/io` sockets; on leaving, no
    pod and no ConfigMap is left."""
    async with kube_daemon(kubesim, tmp_path, watch=watch, server=SERVER) as daemon:
        sockets = Io(daemon.socket_path)
        try:
            async with daemon.client() as client:
                yield client, sockets
        finally:
            await sockets.close_all()
        await wait_gone(daemon, kubesim)


async def test_workspace_files_and_their_refusals(kubesim: KubeSim, tmp_path: Path) -> None:
    async with open_client(kubesim, tmp_path) as (client, _):
        await scenarios.check_workspace_files(client, KERNEL_CONFIG)


async def test_put_apps_keeps_counters_and_drops_the_old_app(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with open_client(kubesim, tmp_path) as (client, io):
        await scenarios.check_put_apps(client, io, KERNEL_CONFIG)


async def test_a_streams_app_s_io_keeps_its_streams_apart(kubesim: KubeSim, tmp_path: Path) -> None:
    async with open_client(kubesim, tmp_path) as (client, io):
        await scenarios.check_streams_io(client, io, KERNEL_CONFIG)


async def test_sse_replays_from_last_event_id(kubesim: KubeSim, tmp_path: Path) -> None:
    async with open_client(kubesim, tmp_path) as (client, _):
        await scenarios.check_sse_replay(client, KERNEL_CONFIG)


async def test_suspend_then_resume_brings_every_file_back(kubesim: KubeSim, tmp_path: Path) -> None:
    idle = {"enabled": True, "idle_seconds": 1}
    async with open_client(kubesim, tmp_path, idle) as (client, _):
        await scenarios.check_suspend_resume(client, KERNEL_CONFIG)
