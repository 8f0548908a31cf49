"""The shared watch scenarios (`tests/e2e/watch_scenarios.py`) on the local
backend: the stand-in kernel as the `telo` runtime (`watch = "self"`). The
same scenarios run on a watch pod in `tests/kube/test_daemon_watch_shared.py`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.e2e import watch_scenarios as scenarios
from tests.e2e.io_client import Io
from tests.e2e.watch_client import telo_runtime
from tests.shared_daemon import SharedDaemon, shared_daemon

TELO_CONFIG = {"image": "telo", "pullPolicy": "missing"}


@pytest.fixture(scope="module", name="runnerd")
def kernel_runnerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    with telo_runtime() as telo:
        overrides = {
            "watch": {"enabled": True},
            "server": {"max_body_bytes": scenarios.MAX_BODY_BYTES},
            "local": {"runtimes": {"telo": telo}},
        }
        with shared_daemon(tmp_path_factory.mktemp("runnerd"), overrides) as daemon:
            yield daemon


@pytest.fixture(scope="module", name="idle_runnerd")
def idle_kernel_runnerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    """A daemon whose sessions suspend after 1 s without a subscriber."""
    with telo_runtime() as telo:
        overrides = {
            "watch": {"enabled": True, "idle_seconds": 1},
            "local": {"runtimes": {"telo": telo}},
        }
        with shared_daemon(tmp_path_factory.mktemp("runnerd"), overrides) as daemon:
            yield daemon


@pytest.fixture(name="io")
async def io_sockets(runnerd: SharedDaemon) -> AsyncIterator[Io]:
    sockets = Io(runnerd.socket_path)
    try:
        yield sockets
    finally:
        await sockets.close_all()


async def test_workspace_files_and_their_refusals(runnerd: SharedDaemon) -> None:
    async with runnerd.client() as client:
        await scenarios.check_workspace_files(client, TELO_CONFIG)


async def test_put_apps_keeps_counters_and_drops_the_old_app(runnerd: SharedDaemon, io: Io) -> None:
    async with runnerd.client() as client:
        await scenarios.check_put_apps(client, io, TELO_CONFIG)


async def test_a_streams_app_s_io_keeps_its_streams_apart(runnerd: SharedDaemon, io: Io) -> None:
    async with runnerd.client() as client:
        await scenarios.check_streams_io(client, io, TELO_CONFIG)


async def test_sse_replays_from_last_event_id(runnerd: SharedDaemon) -> None:
    async with runnerd.client() as client:
        await scenarios.check_sse_replay(client, TELO_CONFIG)


async def test_suspend_then_resume_brings_every_file_back(idle_runnerd: SharedDaemon) -> None:
    async with idle_runnerd.client() as client:
        await scenarios.check_suspend_resume(client, TELO_CONFIG)
