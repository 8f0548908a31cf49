"""Shared fixtures: a real runnerd on a temp config (see tests/harness.py).

`runnerd` yields a running `tests.harness.Daemon` on the harness's default
config (local backend, runtimes `sh` and `python`, a UNIX socket). Tests that
need a different config use `tests.harness.start_daemon(tmp_path, overrides)`
directly.

`on_backend` (module-scoped, from tests/shared_daemon.py) is each backend in
turn, for a module that runs its tests on both; on kubernetes, one test
cluster per worker (`standalone_cluster`) serves every such module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.harness import Daemon, start_daemon
from tests.shared_daemon import on_each_backend, standalone_cluster

# the `on_backend` fixture, and the worker's test cluster it runs on
__all__ = ["on_each_backend", "standalone_cluster"]


@pytest.fixture
async def runnerd(tmp_path: Path) -> AsyncIterator[Daemon]:
    async with start_daemon(tmp_path) as daemon:
        yield daemon
