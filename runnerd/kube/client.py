"""The apiserver client: one pooled connection set, the calls runnerd makes.

Owns the `httpx.AsyncClient` (HTTP/1.1 keep-alive, a bounded pool) for the
daemon's life and `KubeClient`, the calls on it: `request` (a JSON answer),
the pod verbs (a 404 or an own 409 taken as what they mean), the log read
and the watch stream. Each call goes through `exchange.Exchange.send`, the
one place that retries, times out and classifies (by `policy`'s rules:
retry classes, backoff, the deadline). Nothing httpx-shaped leaves this
module: answers are JSON dicts, failures are `errors.KubeError`s (`str()`
client-safe, the raw answer or transport error chained for the log).

Test seam: `open_kube_client(..., transport=...)` puts any
`httpx.AsyncBaseTransport` (an `httpx.MockTransport`) under the same client,
so everything below runs against a handler in memory, under a fake clock
(tests/kube/test_client_transport.py). Without it (production) the client is
httpx's pooled transport with the connection's TLS context and `Policy`'s
pool limits, exactly as before.

The client carries the daemon's `Metrics` (each attempt is counted there)
for the informer and the attach bridge as well.

Resource handling: `open_kube_client` owns the pool; leaving it closes every
connection. `open_watch` owns its stream and closes it on exit, cancelled or not.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing, asynccontextmanager
from typing import Any
from urllib.parse import quote

import httpx
import trio

import runnerd.kube.errors as errors
from runnerd.kube.credentials import Credentials, CredentialsUnavailable
from runnerd.kube.exchange import Exchange
from runnerd.kube.kubeconfig import Connection, build_ssl_context

# Part of this client's API (`open_kube_client(policy=)`, `request(retry=)`).
from runnerd.kube.policy import Policy as Policy
from runnerd.kube.policy import Retry as Retry
from runnerd.metrics import NULL_METRICS, Metrics

log = logging.getLogger(__name__)


class KubeClient:
    """Requests to one apiserver as one identity, in one namespace."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        conn: Connection,
        credentials: Credentials,
        policy: Policy,
        ssl_context: ssl.SSLContext,
        metrics: Metrics = NULL_METRICS,
    ) -> None:
        self.metrics = metrics
        self.connection = conn
        # Shared with the attach bridge: the same trust and client certificate.
        self.ssl_context = ssl_context
        self.policy = policy
        self.namespace = conn.namespace
        self._credentials = credentials
        extensions = {"sni_hostname": conn.tls_server_name} if conn.tls_server_name else {}
        self._exchange = Exchange(http, credentials, policy, metrics, extensions)

    def pods_path(self, name: str | None = None) -> str:
        base = f"/api/v1/namespaces/{quote(self.namespace, safe='')}/pods"
        return base if name is None else f"{base}/{quote(name, safe='')}"

    async def headers(self, operation: str) -> dict[str, str]:
        """Request headers with the current credentials (also for WebSockets).

        Raises:
            errors.NoCredentials: the token file or plugin failed.
        """
        return await self._exchange.headers(operation)

    def invalidate_credentials(self) -> None:
        """A 401 (e.g. on an attach): re-read the token before the next request."""
        self._credentials.invalidate()

    async def request(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        retry: Retry,
        params: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> dict[str, Any]:
        """Send one API request, retrying per `retry`; the JSON answer.

        Raises:
            errors.KubeError: a non-2xx answer (typed by status), no answer
                (`Unreachable`), or the deadline passed (`Unreachable`).
        """
        content = None if body is None else json.dumps(body).encode()
        response = await self._exchange.send(
            method, path, operation, retry, params, content, stream=False
        )
        if not response.content:
            return {}
        try:
            parsed = json.loads(response.content)
        except ValueError as exc:
            raise errors.classify(operation, 502) from exc
        return parsed if isinstance(parsed, dict) else {}

    # -- pods ---------------------------------------------------------------

    async def get_pod(self, name: str, *, operation: str) -> dict[str, Any] | None:
        """The pod, or None when it does not exist."""
        try:
            return await self.request(
                "GET", self.pods_path(name), operation=operation, retry=Retry.READ
            )
        except errors.NotFound:
            return None

    async def create_pod(
        self,
        pod: Mapping[str, Any],
        *,
        operation: str,
        is_ours: Callable[[Mapping[str, Any]], bool],
    ) -> dict[str, Any]:
        """Create `pod` (it has a fixed name); the stored pod.

        A 409 AlreadyExists is success when the existing pod `is_ours` (an
        earlier attempt landed before its answer was lost); otherwise it is
        raised as `errors.AlreadyExists`.
        """
        try:
            return await self.request(
                "POST", self.pods_path(), operation=operation, retry=Retry.WRITE, body=pod
            )
        except errors.AlreadyExists:
            existing = await self.get_pod(pod["metadata"]["name"], operation=operation)
            if existing is not None and is_ours(existing):
                log.info("pod create had landed already name=%s", pod["metadata"]["name"])
                return existing
            raise

    async def delete_pod(
        self, name: str, *, operation: str, grace_period_s: int | None = None
    ) -> bool:
        """Delete the pod (background propagation); False if it was already gone."""
        body: dict[str, Any] = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Background",
        }
        if grace_period_s is not None:
            body["gracePeriodSeconds"] = grace_period_s
        try:
            await self.request(
                "DELETE",
                self.pods_path(name),
                operation=operation,
                retry=Retry.IDEMPOTENT,
                body=body,
            )
        except errors.NotFound:
            return False
        return True

    async def list_pods(
        self,
        *,
        label_selector: str,
        operation: str,
    ) -> tuple[list[dict[str, Any]], str]:
        """Every matching pod in the namespace, and the list's resourceVersion."""
        answer = await self.request(
            "GET",
            self.pods_path(),
            operation=operation,
            retry=Retry.READ,
            params={"labelSelector": label_selector},
        )
        items = [i for i in answer.get("items") or [] if isinstance(i, dict)]
        return items, str((answer.get("metadata") or {}).get("resourceVersion", ""))

    # -- configmaps (the watch pods' workspace application) -------------------

    def configmaps_path(self, name: str | None = None) -> str:
        base = f"/api/v1/namespaces/{quote(self.namespace, safe='')}/configmaps"
        return base if name is None else f"{base}/{quote(name, safe='')}"

    async def create_configmap(
        self, configmap: Mapping[str, Any], *, operation: str
    ) -> dict[str, Any]:
        """Create `configmap`; the stored object.

        Raises:
            errors.AlreadyExists: one of that name exists (content-addressed
                callers take it as success).
            errors.KubeError: any other refusal, classified.
        """
        return await self.request(
            "POST", self.configmaps_path(), operation=operation, retry=Retry.WRITE, body=configmap
        )

    async def get_configmap(self, name: str, *, operation: str) -> dict[str, Any]:
        """The ConfigMap `name`. Raises errors.NotFound if there is none."""
        return await self.request(
            "GET", self.configmaps_path(name), operation=operation, retry=Retry.READ
        )

    async def list_configmaps(self, *, label_selector: str, operation: str) -> list[dict[str, Any]]:
        """Every ConfigMap in the namespace matching `label_selector`."""
        answer = await self.request(
            "GET",
            self.configmaps_path(),
            operation=operation,
            retry=Retry.READ,
            params={"labelSelector": label_selector},
        )
        return [i for i in answer.get("items") or [] if isinstance(i, dict)]

    async def delete_configmap(self, name: str, *, operation: str) -> bool:
        """Delete the ConfigMap; False if it was already gone."""
        try:
            await self.request(
                "DELETE", self.configmaps_path(name), operation=operation, retry=Retry.IDEMPOTENT
            )
        except errors.NotFound:
            return False
        return True

    async def read_log(
        self, name: str, *, container: str, operation: str, limit_bytes: int = 1024 * 1024
    ) -> bytes:
        """The container's output so far (`pods/log`, at most `limit_bytes`):
        what it wrote before an attach was up. Retried as a read.

        Raises:
            errors.KubeError: e.g. `BadRequest` while the container is waiting.
        """
        params = {"container": container, "limitBytes": str(limit_bytes)}
        response = await self._exchange.send(
            "GET", f"{self.pods_path(name)}/log", operation, Retry.READ, params, None, stream=False
        )
        return response.content

    @asynccontextmanager
    async def open_watch(
        self, path: str, params: Mapping[str, str], *, operation: str
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """A watch stream: yields an iterator of watch events (`{"type", "object"}`).

        Opening retries as a read (within the deadline). The iterator ends
        when the server ends the stream cleanly (timeoutSeconds); an `ERROR`
        event is yielded as is (the caller re-lists on 410).

        Raises:
            errors.KubeError: opening failed; or, from the iterator, the
                stream broke or went idle for `watch_idle_s` (`Unreachable`).
        """
        response = await self._exchange.send(
            "GET", path, operation, Retry.READ, {**params, "watch": "1"}, None, stream=True
        )
        try:
            async with aclosing(self._events(response, operation)) as events:
                yield events
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await response.aclose()

    async def _events(
        self, response: httpx.Response, operation: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        try:
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError as exc:
                    raise errors.classify(operation, None) from exc
                if isinstance(event, dict):
                    yield event
        except httpx.HTTPError as exc:  # a broken stream, or a body that cannot be decoded
            raise errors.classify(operation, None) from exc


@asynccontextmanager
async def open_kube_client(
    conn: Connection,
    *,
    policy: Policy | None = None,
    credentials: Credentials | None = None,
    metrics: Metrics = NULL_METRICS,
    transport: httpx.AsyncBaseTransport | None = None,
) -> AsyncIterator[KubeClient]:
    """A `KubeClient` whose connection pool lives as long as the block,
    counting its requests in `metrics`.

    `transport` is the test seam: None (production) is httpx's own pooled
    transport, with the TLS context and the pool limits of `policy`; a given
    one (an `httpx.MockTransport`) carries every request instead, so the
    retry loop, the deadline, the 401 reload and the metrics run IO-free.
    Everything else (credentials, headers, timeouts, the SSL context the
    attach bridge shares) is built the same either way.

    Raises:
        errors.NoCredentials: an exec plugin that yields a client certificate
            failed (it is run once here, to build the TLS context).
    """
    policy = policy or Policy()
    credentials = credentials or Credentials(conn)
    try:
        plugin_cert = await credentials.client_cert()
    except CredentialsUnavailable as exc:
        raise errors.NoCredentials("could not connect to the Kubernetes API") from exc
    ctx: ssl.SSLContext = build_ssl_context(conn, plugin_cert)
    timeout = httpx.Timeout(
        policy.connect_timeout_s,
        read=policy.read_timeout_s,
        write=policy.read_timeout_s,
        pool=policy.deadline_s,
    )
    limits = httpx.Limits(
        max_connections=policy.max_connections,
        max_keepalive_connections=policy.max_connections,
        keepalive_expiry=policy.keepalive_expiry_s,
    )
    async with httpx.AsyncClient(
        base_url=conn.server,
        verify=ctx,
        timeout=timeout,
        limits=limits,
        http1=True,
        http2=False,
        trust_env=False,
        transport=transport,
    ) as http:
        yield KubeClient(http, conn, credentials, policy, ctx, metrics)
