"""Shared fixtures: a real runnerd on a temp config (see tests/harness.py).

`runnerd` yields a running `tests.harness.Daemon` on the harness's default
config (local backend, runtimes `sh` and `python`, a UNIX socket). Tests that
need a different config use `tests.harness.start_daemon(tmp_path, overrides)`
directly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.harness import Daemon, start_daemon


@pytest.fixture
async def runnerd(tmp_path: Path) -> AsyncIterator[Daemon]:
    async with start_daemon(tmp_path) as daemon:
        yield daemon
