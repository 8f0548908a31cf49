"""The end-to-end tests' daemon: one real runnerd per test module.

These tests make requests a daemon answers per session or not at all (each
test starts its own sessions and checks only those; a refused request
changes nothing), so a module shares one daemon instead of paying a daemon
start per test (`tests.shared_daemon`). A test that needs its own config, or
stops or signals the daemon, starts its own with `tests.harness.start_daemon`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.e2e.io_client import Io
from tests.shared_daemon import SharedDaemon, shared_runnerd

__all__ = ["shared_runnerd"]  # the `runnerd` fixture of every module here


@pytest.fixture
async def io(runnerd: SharedDaemon) -> AsyncIterator[Io]:
    """`/io` sockets to the module's daemon, each closed after the test."""
    sockets = Io(runnerd.socket_path)
    try:
        yield sockets
    finally:
        await sockets.close_all()
