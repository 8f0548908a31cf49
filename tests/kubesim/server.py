"""`open_kubesim`: the test cluster as one async context — TLS listener, apiserver, kubelet.

Owns the throwaway CA (trustme), the HTTPS listener on 127.0.0.1 (connection
accounting, stop and rebind on the same port), the seeded namespaces, the
kubeconfig writer, and the kubelet task (K2's `kubelet.Kubelet`).

Resource handling: everything runs in the nursery `open_kubesim` opens; leaving
the `async with` cancels it, which closes the listener and every connection.
"""

from __future__ import annotations

import base64
import socket
import ssl
import struct
import sys
import traceback
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import trustme
import yaml

from tests.kubesim import status
from tests.kubesim.apiserver import ApiServer, new_token
from tests.kubesim.faults import Faults, Stats
from tests.kubesim.images import ImageMap, build_default_images
from tests.kubesim.kubelet import Kubelet
from tests.kubesim.store import Store, run_compactor
from tests.kubesim.validation import default_namespace
from tests.kubesim.wire import Exchange, serve_connection

TLS_HANDSHAKE_TIMEOUT_S = 10.0


@dataclass
class KubeSim:
    """A running simulated cluster; see `open_kubesim`."""

    store: Store
    faults: Faults
    stats: Stats
    token: str
    namespace: str
    service_account: str
    ca: trustme.CA
    host: str = "127.0.0.1"
    port: int = 0
    kubelet: Kubelet | None = None
    _server_ctx: ssl.SSLContext | None = None
    _api: ApiServer | None = None
    _nursery: trio.Nursery | None = None
    _serve_scope: trio.CancelScope | None = None
    _serving_done: trio.Event = field(default_factory=trio.Event)
    _client_cert: trustme.LeafCert | None = field(default=None)

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    @property
    def served(self) -> dict[str, tuple[str, ...]]:
        """Group → served versions (preferred first), live: e.g.
        `sim.served["gateway.networking.k8s.io"] = ()` for a cluster without
        the Gateway API, `("v1beta1",)` for an older one."""
        assert self._api is not None
        return self._api.served

    @property
    def ca_pem(self) -> bytes:
        return self.ca.cert_pem.bytes()

    def client_ssl_context(self, *, client_cert: bool = False) -> ssl.SSLContext:
        """A context that trusts the sim's CA (and presents the client cert if asked)."""
        ctx = ssl.create_default_context()
        self.ca.configure_trust(ctx)
        if client_cert:
            self.client_cert.configure_cert(ctx)
        return ctx

    @property
    def client_cert(self) -> trustme.LeafCert:
        """A client certificate whose CommonName is the service-account user."""
        if self._client_cert is None:
            self._client_cert = self.ca.issue_cert(common_name=self.user)
        return self._client_cert

    def write_kubeconfig(
        self, path: Path, *, client_cert: bool = False, token: str | None = None
    ) -> Path:
        """A kubeconfig with the CA data and the token (or a client cert), current-context set."""
        user: dict[str, Any] = {}
        if client_cert:
            user["client-certificate-data"] = _b64(self.client_cert.cert_chain_pems[0].bytes())
            user["client-key-data"] = _b64(self.client_cert.private_key_pem.bytes())
        else:
            user["token"] = token if token is not None else self.token
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "kubesim",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": _b64(self.ca_pem),
                    },
                }
            ],
            "users": [{"name": self.service_account, "user": user}],
            "contexts": [
                {
                    "name": "kubesim",
                    "context": {
                        "cluster": "kubesim",
                        "user": self.service_account,
                        "namespace": self.namespace,
                    },
                }
            ],
            "current-context": "kubesim",
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    async def stop(self, *, graceful: bool = False) -> None:
        """Close the listener and every connection (the store survives, as etcd would).

        `graceful` ends open watches with their final chunk first, as an apiserver
        shutting down does (§2.6); otherwise they are cut mid-body, as in a crash.
        """
        assert self._serve_scope is not None
        if graceful:
            self.faults.cut_watches()
            with trio.move_on_after(5):
                await self.stats.wait_until(lambda s: s.watches_open == 0)
        self._serve_scope.cancel()
        await self._serving_done.wait()  # the listener is closed only once the task unwinds

    async def start(self) -> None:
        """Listen again on the same port."""
        assert self._nursery is not None
        if not self._serving_done.is_set():
            raise RuntimeError("kubesim is already serving")
        await self._nursery.start(self._serve)

    async def restart(self, down_s: float = 0.0, *, graceful: bool = False) -> None:
        """`stop`, wait `down_s`, `start` on the same port. While down, the port
        resets every connection at once (as a host whose apiserver process is
        gone), each counted in `stats.connections_refused`: how hard clients
        hammer a server that is down is measurable from here."""
        await self.stop(graceful=graceful)
        with trio.move_on_after(down_s):
            await self._refuse()
        await self.start()

    async def _refuse(self) -> None:
        (listener,) = await trio.open_tcp_listeners(self.port, host=self.host)
        async with listener:
            while True:
                tcp = await listener.accept()
                self.stats.connections_refused += 1
                # SO_LINGER 0: close with RST, as a refused connect feels to the client.
                tcp.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                tcp.socket.close()

    async def _serve(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        done = self._serving_done = trio.Event()
        try:
            with trio.CancelScope() as scope:
                self._serve_scope = scope
                (listener,) = await trio.open_tcp_listeners(self.port, host=self.host)
                self.port = listener.socket.getsockname()[1]
                async with listener, trio.open_nursery() as conns:
                    task_status.started()
                    while True:
                        tcp = await listener.accept()
                        self.stats.connections_accepted += 1
                        conns.start_soon(self._connection, tcp)
        finally:
            done.set()

    async def _connection(self, tcp: trio.SocketStream) -> None:
        assert self._server_ctx is not None and self._api is not None
        tls = trio.SSLStream(tcp, self._server_ctx, server_side=True)
        try:
            await self.faults.wait_handshake_allowed()
            with trio.fail_after(TLS_HANDSHAKE_TIMEOUT_S):
                await tls.do_handshake()
            self.stats.tls_handshakes += 1
            if await serve_connection(tls, self._handle, peer_cn=_common_name(tls)):
                self.stats.connections_closed_idle += 1
                self.stats.note()
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
            pass
        except Exception:  # one broken connection must not take the cluster down
            traceback.print_exc(file=sys.stderr)
        finally:
            await trio.aclose_forcefully(tls)

    async def _handle(self, ex: Exchange) -> None:
        assert self._api is not None
        try:
            await self._api.handle(ex)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise
        except Exception as exc:  # a bug here must show as a 500, not kill the cluster
            traceback.print_exc(file=sys.stderr)
            if not ex.responded:
                err = status.internal_error(f"kubesim: {type(exc).__name__}: {exc}")
                await ex.respond(err.code, err.render())


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _common_name(tls: trio.SSLStream[trio.SocketStream]) -> str | None:
    cert = tls.getpeercert()
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def _server_context(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(ctx)
    ca.configure_trust(ctx)
    ctx.verify_mode = ssl.CERT_OPTIONAL  # client certs are one way to log in, not required
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


@asynccontextmanager
async def open_kubesim(
    tmp_path: Path,
    *,
    images: ImageMap | None = None,
    namespace: str = "runnerd",
    service_account: str = "runnerd",
    token: str | None = None,
    port: int = 0,
    history_limit: int = 5000,
    bookmark_interval_s: float = 60.0,
    compaction_interval_s: float | None = 300.0,
    kubelet: bool = True,
) -> AsyncIterator[KubeSim]:
    """Start the cluster on 127.0.0.1:`port` over HTTPS; yields once it accepts connections.

    Bookmarks go to each watcher that asked every `bookmark_interval_s` (the watch cache's
    default is about a minute; tests shorten it). `history_limit` events are kept for
    watch resumes, and compacted every `compaction_interval_s` (kube-apiserver's default:
    5 min; None: never) to the RV of the previous tick. `namespace` (and `default`,
    `kube-system`) exist from the start; the token authenticates as
    `system:serviceaccount:<namespace>:<service_account>`. With `kubelet`, K2's simulated
    node schedules and runs pods (`images`: which images exist, default
    `images.build_default_images()`; work files under `tmp_path`); without it pods stay
    unscheduled and deletes are immediate.
    """
    store = Store(history_limit=history_limit)
    for ns in dict.fromkeys(("default", "kube-system", namespace)):
        store.create_nowait("namespaces", "", default_namespace({"metadata": {"name": ns}}))
    ca = trustme.CA()
    sim = KubeSim(
        store=store,
        faults=Faults(store),
        stats=Stats(),
        token=token or new_token(),
        namespace=namespace,
        service_account=service_account,
        ca=ca,
        port=port,
    )
    sim._server_ctx = _server_context(ca)
    async with trio.open_nursery() as nursery:
        sim._nursery = nursery
        if compaction_interval_s:
            nursery.start_soon(run_compactor, store, compaction_interval_s)
        if kubelet:
            sim.kubelet = await _start_kubelet(nursery, store, images, tmp_path)
        sim._api = ApiServer(
            store,
            sim.faults,
            sim.stats,
            token=sim.token,
            user=sim.user,
            server_address=lambda: f"{sim.host}:{sim.port}",
            bookmark_interval_s=bookmark_interval_s,
            kubelet=lambda: sim.kubelet,
        )
        sim.faults.restart_hook = sim.restart
        await nursery.start(sim._serve)
        try:
            yield sim
        finally:
            nursery.cancel_scope.cancel()


async def _start_kubelet(
    nursery: trio.Nursery, store: Store, images: ImageMap | None, tmp_path: Path
) -> Kubelet:
    workdir = tmp_path / "kubelet"
    workdir.mkdir(parents=True, exist_ok=True)
    node = Kubelet(store, images or build_default_images(), workdir)
    await nursery.start(node.run)
    return node
