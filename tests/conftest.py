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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The `slow` tests (each waits many seconds) at the head of each xdist
    worker's share: `--dist worksteal` hands worker k the k-th contiguous
    slice of this list, and a slow test that started last on its worker
    would be the whole run's tail. The rest keeps its order (a module's
    shared daemon starts once); the order is the same on every worker."""
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    rest = iter([item for item in items if item.get_closest_marker("slow") is None])
    share, extra = divmod(len(items), workers)
    ordered: list[pytest.Item] = []
    for worker in range(workers):
        part = slow[worker::workers]
        size = share + (1 if worker < extra else 0)
        part += [item for _, item in zip(range(size - len(part)), rest, strict=False)]
        ordered += part
    ordered += list(rest)
    items[:] = ordered
