"""One apiserver call carried to its answer: the retry loop.

Owns `Exchange.send`, the one place that retries, times out, re-reads the
credentials and counts each attempt; `policy` decides what it retries and
how long it waits. What it hands back is a 2xx `httpx.Response` (open, for
a stream); every other ending is an `errors.KubeError` (`str()`
client-safe, the raw answer or the transport error chained for the log).
Only `client.KubeClient` uses it: no httpx name leaves the two.

Timeouts: every attempt has httpx's connect/read/write/pool timeouts, and
every call a total deadline (`Policy.deadline_s`) across its retries; a call
past it raises `errors.Unreachable`. Nothing the apiserver does (silence,
slowness, refusal) blocks a caller longer than the deadline. Watches are the
exception by nature: opening one obeys the deadline; reading one has an idle
timeout instead (`Policy.watch_idle_s`).

Metrics: every attempt (each retry too) is counted in `metrics`
(`apiserver_request`: the Kubernetes verb, the HTTP code or `none`, the
classifier's class, the time to the answer's headers).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import httpx
import trio

import runnerd.kube.errors as errors
from runnerd.kube.credentials import Credentials, CredentialsUnavailable
from runnerd.kube.policy import Policy, Retry, backoff_s, kube_verb, parse_retry_after, should_retry
from runnerd.metrics import Metrics

log = logging.getLogger(__name__)

USER_AGENT = "runnerd/0.1"
# The call's own cancel-scope backstop beyond its deadline: httpx's timeouts,
# clipped to the deadline, normally end an attempt first.
BACKSTOP_S = 0.5


class Exchange:
    """Calls over one pooled `httpx.AsyncClient` as one identity."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        credentials: Credentials,
        policy: Policy,
        metrics: Metrics,
        extensions: Mapping[str, str],
    ) -> None:
        self._http = http
        self._credentials = credentials
        self._policy = policy
        self._metrics = metrics
        self._extensions = dict(extensions)

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

    async def send(
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
        """The retry loop (module docstring); a 2xx response (open, if `stream`).

        Raises:
            errors.KubeError: a non-2xx answer (typed by status), no answer
                (`Unreachable`), or the deadline passed (`Unreachable`).
        """
        deadline = trio.current_time() + self._policy.deadline_s
        attempt, reauthenticated = 0, False
        verb = kube_verb(method, path, params)
        cause: BaseException | None = None  # the last attempt's failure
        while True:
            remaining = deadline - trio.current_time()
            if remaining <= 0:  # after a 401's prompt retry, or a backoff that overslept
                raise errors.classify(operation, None) from cause
            request = await self._build(
                method, path, operation, params, content, self._attempt_timeout(remaining, stream)
            )
            try:
                response, error = await self._attempt(request, stream, remaining, verb, operation)
            except (httpx.TransportError, trio.TooSlowError) as exc:
                log.debug("apiserver unreachable; retrying op=%s error=%r", operation, exc)
                if not should_retry(retry, None, None) or not await self._pause(
                    deadline, attempt, None
                ):
                    raise errors.classify(operation, None) from exc
                attempt, cause = attempt + 1, exc
                continue
            if error is None:
                return response
            if response.status_code == 401 and not reauthenticated:
                self._credentials.invalidate()
                reauthenticated, cause = True, error
                continue
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            if not should_retry(retry, response.status_code, retry_after) or not await self._pause(
                deadline, attempt, retry_after
            ):
                raise error
            attempt, cause = attempt + 1, error

    async def _attempt(
        self, request: httpx.Request, stream: bool, remaining_s: float, verb: str, operation: str
    ) -> tuple[httpx.Response, errors.KubeError | None]:
        """One attempt, counted in the metrics: a 2xx response (open, if
        `stream`) and None, or a closed non-2xx response and its classified
        error (the raw answer chained).

        Raises:
            httpx.TransportError, trio.TooSlowError: no answer (the loop's to retry).
            errors.KubeError: an answer httpx could not decode (the server's fault).
        """
        started = trio.current_time()
        try:
            with trio.fail_after(remaining_s + BACKSTOP_S):
                response, body = await self._send(request, stream)
        except (httpx.TransportError, trio.TooSlowError):
            self._count(verb, started, None, None)
            raise
        except httpx.HTTPError as exc:
            malformed = errors.classify(operation, 502)
            self._count(verb, started, None, malformed)
            raise malformed from exc
        status = response.status_code
        error = None if body is None else errors.classify_answer(operation, status, body)
        self._count(verb, started, status, error)
        return response, error

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
            # A PATCH body is a JSON merge patch (RFC 7386): what every kind
            # takes, custom resources included (no strategic merge there).
            merge = "application/merge-patch+json"
            headers["Content-Type"] = merge if method == "PATCH" else "application/json"
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
        self._metrics.apiserver_request(
            verb,
            "none" if status is None else str(status),
            errors.error_class(error),
            trio.current_time() - started,
        )
