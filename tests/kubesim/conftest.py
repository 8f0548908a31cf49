"""Fixtures for the kubesim tests: a running simulated cluster and a client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.kubesim.server import KubeSim, open_kubesim


@pytest.fixture
async def kubesim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    """A cluster on 127.0.0.1 over HTTPS, bookmarks every 0.2 s, small history."""
    async with open_kubesim(tmp_path, bookmark_interval_s=0.2, history_limit=200) as sim:
        yield sim


def build_client(sim: KubeSim, *, token: str | None = None) -> httpx.AsyncClient:
    """An httpx client that trusts the sim's CA and sends its token."""
    return httpx.AsyncClient(
        base_url=sim.url,
        verify=sim.client_ssl_context(),
        headers={"Authorization": f"Bearer {token if token is not None else sim.token}"},
        timeout=httpx.Timeout(10, read=None),
    )


@pytest.fixture
async def kube(kubesim: KubeSim) -> AsyncIterator[httpx.AsyncClient]:
    async with build_client(kubesim) as client:
        yield client
