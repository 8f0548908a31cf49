"""What `runnerd serve` imports to start: only the configured backend's stack.

Read from outside: the daemon runs under `python -X importtime` (each import
is written to its stderr as it happens), and the modules it names by the
time it is serving are what a start paid for.
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

from tests.harness import Daemon, start_daemon

# What only the Kubernetes backend needs: its package, its HTTP client and
# its exec-channel WebSocket client, and the kubeconfig's YAML.
KUBE_STACK = ("runnerd.kube", "httpx", "httpcore", "trio_websocket", "yaml")
IMPORTTIME = [sys.executable, "-X", "importtime", "-m", "runnerd", "serve", "--config"]


def imported(daemon: Daemon) -> set[str]:
    """The modules the daemon has imported so far, from its `-X importtime` lines."""
    lines = daemon.stderr_text().splitlines()
    return {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}


def loaded(modules: set[str], package: str) -> list[str]:
    return sorted(m for m in modules if m == package or m.startswith(package + "."))


async def test_serve_on_the_local_backend_imports_no_kubernetes_stack(tmp_path: Path) -> None:
    async with start_daemon(tmp_path, command=IMPORTTIME) as daemon:
        async with daemon.client() as client:
            assert (await client.get("/v1/health")).status_code == 200
        modules = imported(daemon)
    # The log is read right: the backend's modules show. (Not `runnerd.local`
    # itself: `importlib.import_module`, which loads a backend, is not timed.)
    assert "runnerd.local.backend" in modules
    assert [m for p in KUBE_STACK for m in loaded(modules, p)] == []


async def test_serve_builds_the_openapi_document_on_its_first_request(tmp_path: Path) -> None:
    async with start_daemon(tmp_path, command=IMPORTTIME) as daemon:
        async with daemon.client() as client:
            assert (await client.get("/v1/health")).status_code == 200
            assert "runnerd.http.openapi" not in imported(daemon)
            first = await client.get("/v1/openapi.json")
            again = await client.get("/v1/openapi.json")
        assert "runnerd.http.openapi" in imported(daemon)
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert first.json()["openapi"] == "3.1.0"


# What the serving stack imports but never serves with, one module of each
# (runnerd/daemon/deferred.py): quart's test client's debugger, werkzeug's
# development server, hypercorn's HTTP/2 and its asyncio server, and the
# templates' jinja2.
UNUSED = ("pdb", "http.server", "h2.connection", "hypercorn.asyncio.run", "jinja2.environment")
# And quart's annotation-only cookie jar (`urllib.request`), the CLIs'
# package metadata (`csv` comes only with `importlib.metadata`): the
# kubernetes backend's httpx imports the first for its cookies, and
# trio-websocket reads trio's version at import.
UNUSED_LOCALLY = (*UNUSED, "urllib.request", "csv")


async def test_serve_leaves_what_serving_never_uses_unimported(tmp_path: Path) -> None:
    async with start_daemon(tmp_path, command=IMPORTTIME) as daemon:
        async with daemon.client() as client:
            assert (await client.get("/v1/health")).status_code == 200
            assert (await client.get("/v1/sessions")).status_code == 200
        modules = imported(daemon)
    assert "quart_trio" in modules  # the log is read right
    assert [m for m in UNUSED_LOCALLY if m in modules] == []


async def test_an_http2_client_is_still_served_its_modules_loaded_then(tmp_path: Path) -> None:
    """HTTP/2 with prior knowledge (the h2c preface on the UNIX socket): the
    deferred protocol is imported on that first request and answers it."""
    async with start_daemon(tmp_path, command=IMPORTTIME) as daemon:
        transport = httpx.AsyncHTTPTransport(uds=str(daemon.socket_path), http1=False, http2=True)
        async with httpx.AsyncClient(transport=transport, base_url="http://runnerd") as client:
            response = await client.get("/v1/health")
            again = await client.get("/v1/capabilities")
        assert "h2.connection" in imported(daemon)
    assert (response.http_version, response.status_code) == ("HTTP/2", 200)
    assert again.status_code == 200
