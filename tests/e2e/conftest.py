"""The end-to-end tests' daemon: one real runnerd per test module.

These tests make requests a daemon answers per session or not at all (each
test starts its own sessions and checks only those; a refused request
changes nothing), so a module shares one daemon instead of paying a daemon
start per test (`tests.shared_daemon`). A test that needs its own config, or
stops or signals the daemon, starts its own with `tests.harness.start_daemon`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.shared_daemon import SharedDaemon, shared_daemon


@pytest.fixture(scope="module")
def runnerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    with shared_daemon(tmp_path_factory.mktemp("runnerd")) as daemon:
        yield daemon
