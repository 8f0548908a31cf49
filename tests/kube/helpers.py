"""Shared pieces of the kube tests: a client on the test cluster, a bundle server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import trio

from runnerd.kube.bundle import BundleTokens
from runnerd.kube.client import KubeClient, Policy, open_kube_client
from runnerd.kube.kubeconfig import load_connection
from runnerd.kube.settings import KubeSettings
from tests.kubesim.server import KubeSim

# Fast enough for a test suite, same shape as the defaults.
FAST = Policy(
    connect_timeout_s=2.0,
    read_timeout_s=5.0,
    deadline_s=10.0,
    backoff_base_s=0.02,
    backoff_cap_s=0.2,
    retry_after_cap_s=0.05,
)


@asynccontextmanager
async def open_client(
    sim: KubeSim, tmp_path: Path, policy: Policy = FAST, **settings: object
) -> AsyncIterator[KubeClient]:
    """A `KubeClient` on the test cluster, through the kubeconfig it writes."""
    path = sim.write_kubeconfig(tmp_path / "kubeconfig")
    conn = load_connection(replace(KubeSettings(), kubeconfig=str(path), **settings), {}, tmp_path)  # type: ignore[arg-type]
    async with open_kube_client(conn, policy=policy) as client:
        yield client


async def _serve_bundle(
    stream: trio.SocketStream, tokens: BundleTokens, fetches: list[str]
) -> None:
    """One HTTP/1.0 exchange: `GET /internal/bundles/<id>?token=…`."""
    async with stream:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return
            data += chunk
        target = data.split(b" ", 2)[1].decode()
        url = urlsplit(target)
        session_id = url.path.rsplit("/", 1)[-1]
        token = parse_qs(url.query).get("token", [""])[0]
        archive = tokens.redeem(session_id, token, now=trio.current_time())
        fetches.append(f"{session_id}:{'ok' if archive else 'refused'}")
        if archive is None:
            await stream.send_all(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return
        head = f"HTTP/1.0 200 OK\r\nContent-Length: {len(archive)}\r\n\r\n".encode()
        await stream.send_all(head + archive)


@asynccontextmanager
async def serve_bundles(tokens: BundleTokens) -> AsyncIterator[tuple[str, list[str]]]:
    """A stand-in for runnerd's bundle listener: (base URL, log of fetches)."""
    fetches: list[str] = []
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            partial(
                trio.serve_tcp, lambda s: _serve_bundle(s, tokens, fetches), 0, host="127.0.0.1"
            )
        )
        port = listeners[0].socket.getsockname()[1]
        yield f"http://127.0.0.1:{port}", fetches
        nursery.cancel_scope.cancel()


class BlackHole:
    """A TCP proxy to a server that can stop forwarding without closing anything:
    a peer that vanished with no FIN and no RST (a dead node, a dropped route)."""

    def __init__(self, port: int) -> None:
        self.target_port = port
        self.port = 0
        self._open = trio.Event()
        self._open.set()

    def swallow(self) -> None:
        self._open = trio.Event()

    async def _pump(self, source: trio.SocketStream, sink: trio.SocketStream) -> None:
        while data := await source.receive_some(65536):
            await self._open.wait()
            await sink.send_all(data)

    async def _handle(self, client: trio.SocketStream) -> None:
        async with client, await trio.open_tcp_stream("127.0.0.1", self.target_port) as server:
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, client, server)
                    nursery.start_soon(self._pump, server, client)
            except* (trio.BrokenResourceError, trio.ClosedResourceError):
                pass


@asynccontextmanager
async def open_black_hole(port: int) -> AsyncIterator[BlackHole]:
    hole = BlackHole(port)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, hole._handle, 0, host="127.0.0.1"))
        hole.port = listeners[0].socket.getsockname()[1]
        yield hole
        nursery.cancel_scope.cancel()
