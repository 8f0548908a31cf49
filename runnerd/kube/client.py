"""The apiserver client: one pooled connection set, one request function.

Owns the `httpx.AsyncClient` (HTTP/1.1 keep-alive, a bounded pool) and
`KubeClient.request`, the one place that retries, times out and classifies.
Nothing httpx-shaped leaves this module: answers are JSON dicts, failures are
`errors.KubeError`s (`str()` client-safe, the raw answer or transport error
chained for the log).

Test seam: `open_kube_client(..., transport=...)` puts any
`httpx.AsyncBaseTransport` (an `httpx.MockTransport`) under the same client,
so everything below runs against a handler in memory, under a fake clock
(tests/kube/test_client_transport.py). Without it (production) the client is
httpx's pooled transport with the connection's TLS context and `Policy`'s
pool limits, exactly as before.

Retry policy, by `Retry` class:
- `READ` (GET, list, opening a watch): 429, 5xx and connection errors, with
  capped exponential backoff plus jitter, or the server's `Retry-After`.
- `WRITE` (create): only an answer that carried `Retry-After` (the server
  asks us to come back). Such a retry may find its own earlier attempt
  landed (a 504 after the write reached etcd): pods have fixed names, so a
  409 AlreadyExists is checked by label and taken as success (`create_pod`).
- `IDEMPOTENT` (delete by name): retried as `READ` is; a repeat that finds
  the pod gone gets 404, which is "done". A teardown delete lost to one reset
  connection would leak a pod until its deadline.
A 401 re-reads the credentials and is retried once, whatever the class.

Timeouts: every attempt has httpx's connect/read/write/pool timeouts, and
every call a total deadline (`Policy.deadline_s`) across its retries; a call
past it raises `errors.Unreachable`. Nothing the apiserver does (silence,
slowness, refusal) blocks a caller longer than the deadline. Watches are the
exception by nature: opening one obeys the deadline; reading one has an idle
timeout instead (`Policy.watch_idle_s`).

Metrics: every attempt (each retry too) is counted in `metrics`
(`apiserver_request`: the Kubernetes verb, the HTTP code or `none`, the
classifier's class, the time to the answer's headers). The client carries
the daemon's `Metrics` for the informer and the attach bridge as well.

Resource handling: `open_kube_client` owns the pool; leaving it closes every
connection. `open_watch` owns its stream and closes it on exit, cancelled or not.
"""

from __future__ import annotations

import json
import logging
import random
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Any
from urllib.parse import quote

import httpx
import trio

import runnerd.kube.errors as errors
from runnerd.kube.credentials import Credentials, CredentialsUnavailable
from runnerd.kube.kubeconfig import Connection, build_ssl_context
from runnerd.metrics import NULL_METRICS, Metrics

log = logging.getLogger(__name__)

USER_AGENT = "runnerd/0.1"
RETRYABLE = frozenset({429, 500, 502, 503, 504})
# The call's own cancel-scope backstop beyond its deadline: httpx's timeouts,
# clipped to the deadline, normally end an attempt first.
BACKSTOP_S = 0.5


class Retry(Enum):
    READ = "read"
    WRITE = "write"
    IDEMPOTENT = "idempotent"


@dataclass(frozen=True)
class Policy:
    """Timeouts and backoff. Defaults suit a daemon: short enough that a
    dead apiserver is reported within half a minute, long enough to ride out
    an apiserver restart (a few seconds) without failing a session."""

    connect_timeout_s: float = 5.0
    read_timeout_s: float = 15.0
    deadline_s: float = 30.0
    backoff_base_s: float = 0.2
    backoff_cap_s: float = 5.0
    # Honour a server's Retry-After up to this; beyond it, the deadline decides.
    retry_after_cap_s: float = 10.0
    # A watch that sends nothing (not even a bookmark) for this long is dead:
    # the server-side timeout we ask for is shorter, so a live stream ends first.
    watch_idle_s: float = 120.0
    # Pooled connections: one per open watch plus a handful for requests.
    max_connections: int = 16
    # An idle pooled connection is kept this long (client-go's IdleConnTimeout),
    # not httpx's 5 s: sessions end and start seconds apart, and each request
    # after a pause would otherwise pay a new TCP connection and TLS handshake.
    keepalive_expiry_s: float = 90.0


def backoff_s(attempt: int, policy: Policy, retry_after_s: float | None) -> float:
    """The wait before retry number `attempt` (0-based): the server's
    Retry-After when it sent one, else full-range jittered exponential backoff
    (half to all of `base * 2**attempt`, capped), so a herd of clients spreads."""
    if retry_after_s is not None:
        return min(retry_after_s, policy.retry_after_cap_s)
    ceiling = min(policy.backoff_cap_s, policy.backoff_base_s * 2**attempt)
    return random.uniform(ceiling / 2, ceiling)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP-date: rare from an apiserver; fall back to backoff


# Verbs by method for what is not a GET (a GET is `get`, `list` or `watch`).
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def kube_verb(method: str, path: str, params: Mapping[str, str] | None) -> str:
    """The Kubernetes verb of a request: a GET of a collection (`.../pods`,
    one segment past the namespace or the group version) is `list`, of a
    named object or its subresource (`.../pods/NAME/log`) `get`, with
    `watch=1` `watch`."""
    if method != "GET":
        return _VERBS.get(method, method.lower())
    if params and params.get("watch") in ("1", "true"):
        return "watch"
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    scope = parts.index("namespaces") + 2 if "namespaces" in parts else len(parts)
    if scope < len(parts):  # .../namespaces/NS/RESOURCE...
        rest = parts[scope:]
    else:  # cluster-scoped: /api/v1/RESOURCE... or /apis/GROUP/VERSION/RESOURCE...
        rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    return "list" if len(rest) <= 1 else "get"


def _should_retry(retry: Retry, status: int | None, retry_after: float | None) -> bool:
    if status is None:  # no answer: a connection error or a read timeout
        return retry is not Retry.WRITE
    if status not in RETRYABLE:
        return False
    return retry is not Retry.WRITE or retry_after is not None


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
        self._http = http
        self.metrics = metrics
        self.connection = conn
        # Shared with the attach bridge: the same trust and client certificate.
        self.ssl_context = ssl_context
        self.policy = policy
        self.namespace = conn.namespace
        self._credentials = credentials
        self._policy = policy
        self._extensions = {"sni_hostname": conn.tls_server_name} if conn.tls_server_name else {}

    def pods_path(self, name: str | None = None) -> str:
        base = f"/api/v1/namespaces/{quote(self.namespace, safe='')}/pods"
        return base if name is None else f"{base}/{quote(name, safe='')}"

    async def headers(self, operation: str) -> dict[str, str]:
        """Request headers with the current credentials (also for WebSockets).

        Raises:
            errors.NoCredentials: the token file or plugin failed.
        """
        try:
            auth = await self._credentials.authorization()
        except CredentialsUnavailable as exc:
            raise errors.NoCredentials(operation) from exc
        out = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if auth is not None:
            out["Authorization"] = auth
        return out

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
        response = await self._exchange(
            method, path, operation, retry, params, content, stream=False
        )
        if not response.content:
            return {}
        try:
            parsed = json.loads(response.content)
        except ValueError as exc:
            raise errors.classify(operation, 502) from exc
        return parsed if isinstance(parsed, dict) else {}

    def _attempt_timeout(self, remaining_s: float, stream: bool) -> httpx.Timeout:
        # httpx's own timeouts fire before the call's deadline would cancel the
        # attempt: a cancellation mid-handshake leaks the socket (httpcore closes
        # it only on an Exception), a timeout does not.
        p = self._policy
        read = p.watch_idle_s if stream else min(p.read_timeout_s, remaining_s)
        return httpx.Timeout(
            min(p.connect_timeout_s, remaining_s),
            read=read,
            write=min(p.read_timeout_s, remaining_s),
            pool=remaining_s,
        )

    async def _pause(self, deadline: float, attempt: int, retry_after: float | None) -> bool:
        """Sleep before the next attempt; False (no sleep) if it would pass the deadline."""
        delay = backoff_s(attempt, self._policy, retry_after)
        if trio.current_time() + delay >= deadline:
            return False
        await trio.sleep(delay)
        return True

    async def _exchange(
        self,
        method: str,
        path: str,
        operation: str,
        retry: Retry,
        params: Mapping[str, str] | None,
        content: bytes | None,
        *,
        stream: bool,
    ) -> httpx.Response:
        """The retry loop (module docstring); a 2xx response (open, if `stream`)."""
        deadline = trio.current_time() + self._policy.deadline_s
        attempt, reauthenticated = 0, False
        verb = kube_verb(method, path, params)
        while True:
            remaining = deadline - trio.current_time()
            request = await self._build(
                method, path, operation, params, content, self._attempt_timeout(remaining, stream)
            )
            started = trio.current_time()
            try:
                with trio.fail_after(max(remaining, 0.0) + BACKSTOP_S):
                    response, body = await self._send(request, stream)
            except (httpx.TransportError, trio.TooSlowError) as exc:
                self._count(verb, started, None, None)
                log.debug("apiserver unreachable; retrying op=%s error=%r", operation, exc)
                if not _should_retry(retry, None, None) or not await self._pause(
                    deadline, attempt, None
                ):
                    raise errors.classify(operation, None) from exc
                attempt += 1
                continue
            except httpx.HTTPError as exc:  # an answer httpx could not decode: the server's fault
                malformed = errors.classify(operation, 502)
                self._count(verb, started, None, malformed)
                raise malformed from exc
            if body is None:
                self._count(verb, started, response.status_code, None)
                return response
            error = errors.classify_answer(operation, response.status_code, body)
            self._count(verb, started, response.status_code, error)
            if response.status_code == 401 and not reauthenticated:
                self._credentials.invalidate()
                reauthenticated = True
                continue
            retry_after = _retry_after(response)
            if not _should_retry(retry, response.status_code, retry_after) or not await self._pause(
                deadline, attempt, retry_after
            ):
                raise error
            attempt += 1

    async def _send(
        self, request: httpx.Request, stream: bool
    ) -> tuple[httpx.Response, bytes | None]:
        """One attempt: a 2xx response (open, if `stream`) and None, or a
        closed non-2xx response and its body. Reading an error body is part of
        the attempt: a connection that breaks mid-body is a transport error
        like any other, retried by class, never an httpx error escaping."""
        response = await self._http.send(request, stream=stream)
        if response.is_success:
            return response, None
        try:
            return response, await response.aread()
        finally:
            await response.aclose()

    async def _build(
        self,
        method: str,
        path: str,
        operation: str,
        params: Mapping[str, str] | None,
        content: bytes | None,
        timeouts: httpx.Timeout,
    ) -> httpx.Request:
        headers = await self.headers(operation)
        if content is not None:
            headers["Content-Type"] = "application/json"
        return self._http.build_request(
            method,
            path,
            params=params,
            content=content,
            headers=headers,
            timeout=timeouts,
            extensions=self._extensions,
        )

    def _count(
        self, verb: str, started: float, status: int | None, error: errors.KubeError | None
    ) -> None:
        """One attempt in the metrics: no answer (`status` None) is `none`, its
        class `unreachable` unless `error` says otherwise (a malformed answer)."""
        if status is None and error is None:
            error = errors.Unreachable("")
        self.metrics.apiserver_request(
            verb,
            "none" if status is None else str(status),
            errors.error_class(error),
            trio.current_time() - started,
        )

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

    async def read_log(
        self, name: str, *, container: str, operation: str, limit_bytes: int = 1024 * 1024
    ) -> bytes:
        """The container's output so far (`pods/log`, at most `limit_bytes`):
        what it wrote before an attach was up. Retried as a read.

        Raises:
            errors.KubeError: e.g. `BadRequest` while the container is waiting.
        """
        params = {"container": container, "limitBytes": str(limit_bytes)}
        response = await self._exchange(
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
        response = await self._exchange(
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
