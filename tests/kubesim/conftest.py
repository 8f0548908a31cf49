"""Fixtures for the kubesim tests: a running simulated cluster and clients for it.

`kubesim` is the whole cluster (with K2's kubelet when present); `apiserver` is the
same without a kubelet, so pods stay unscheduled and deletes are immediate — what
the apiserver's own tests want.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.kubesim.server import KubeSim, open_kubesim
from tests.kubesim.validation import default_pod

PODS = "/api/v1/namespaces/runnerd/pods"


@pytest.fixture
async def kubesim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    """A cluster on 127.0.0.1 over HTTPS, bookmarks every 0.2 s, small history, compacted
    every 10 s (an RV from the last 10 s always resumes; tests force more with
    `sim.store.compact()`)."""
    async with open_kubesim(
        tmp_path, bookmark_interval_s=0.2, history_limit=200, compaction_interval_s=10
    ) as sim:
        yield sim


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[KubeSim]:
    async with open_kubesim(
        tmp_path,
        bookmark_interval_s=0.2,
        history_limit=50,
        compaction_interval_s=10,
        kubelet=False,
    ) as sim:
        yield sim


def build_client(sim: KubeSim, *, token: str | None = None) -> httpx.AsyncClient:
    """An httpx client that trusts the sim's CA and sends its token."""
    headers = {"Authorization": f"Bearer {token}"} if token != "" else {}
    if token is None:
        headers = {"Authorization": f"Bearer {sim.token}"}
    return httpx.AsyncClient(
        base_url=sim.url,
        verify=sim.client_ssl_context(),
        headers=headers,
        timeout=httpx.Timeout(10, read=None),
    )


@pytest.fixture
async def kube(apiserver: KubeSim) -> AsyncIterator[httpx.AsyncClient]:
    async with build_client(apiserver) as client:
        yield client


def build_pod(name: str, *, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}], **spec},
    }
    if labels:
        pod["metadata"]["labels"] = labels
    return pod


async def seed_pod(sim: KubeSim, name: str, **kw: Any) -> dict[str, Any]:
    """Store a pod as a create over HTTP would (with the apiserver's defaults)."""
    return await sim.store.create("pods", "runnerd", default_pod(build_pod(name, **kw)))


def lines_of(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line]
