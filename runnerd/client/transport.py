"""Where the daemon is, and plain HTTP requests to it.

Owns endpoint resolution (`--url` for a TCP listener, else `--socket`, else
`RUNNERD_SOCKET`, else `/run/runnerd/runnerd.sock`) and `Api`, a small
synchronous JSON client on the standard library's `http.client` (importing
httpx costs more start-up than a whole `runnerd ls`).

Every request carries `content-type: application/json` when it has a body
(and on DELETE, which the daemon may require) and never an `Origin`: the
daemon treats a request with an Origin as a browser's. Failures come out as
`ClientError` with a message meant for the user, never a traceback.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from runnerd.client.args import DEFAULT_SOCKET, SOCKET_ENV

# Plain requests are small; a stop waits for the workload's grace period.
REQUEST_TIMEOUT_S = 30.0
# `body=NO_BODY`: a POST that carries nothing (reload, resume), sent as such.
NO_BODY: Any = object()


class ClientError(Exception):
    """A request that did not get the answer it needed; the message is for the user."""


class UsageError(ClientError):
    """An argument the command line itself refuses (a bad `--url`, `--env`,
    `--port`, PATH or `--entry`): exit 2, as argparse exits for a usage error."""


def no_session(session_id: str) -> ClientError:
    """What every verb says of a session id the daemon does not know."""
    return ClientError(f"no session {session_id!r} (see `runnerd ls -a`)")


class ApiError(ClientError):
    """The daemon answered with an error body `{error, message}`."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(f"{message} ({status} {code})")
        self.status = status
        self.code = code
        self.message = message
        self.body = body
        self.headers: Mapping[str, str] = headers or {}  # lower-case names


@dataclass(frozen=True)
class Endpoint:
    """The daemon's API: a UNIX socket path, or an http(s) base URL."""

    socket_path: Path | None = None
    url: str | None = None

    def describe(self) -> str:
        return self.url if self.url is not None else f"unix:{self.socket_path}"

    @property
    def host(self) -> str:
        """The Host header (and WebSocket host): the URL's, or a fixed name on a socket."""
        return urlsplit(self.url).netloc if self.url is not None else "runnerd"


def resolve_endpoint(
    socket_path: Path | None, url: str | None, environ: Mapping[str, str] = os.environ
) -> Endpoint:
    """The endpoint the user chose. Raises ClientError for a URL that is not http(s)."""
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UsageError(f"--url must be http://HOST:PORT or https://..., got {url!r}")
        return Endpoint(url=url.rstrip("/"))
    if socket_path is None:
        socket_path = Path(environ.get(SOCKET_ENV) or DEFAULT_SOCKET)
    return Endpoint(socket_path=socket_path)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float | None) -> None:
        super().__init__("runnerd", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self._path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


@dataclass
class Reply:
    status: int
    headers: Mapping[str, str]
    body: Any


class Api:
    """JSON requests to one daemon; one connection per request (short-lived CLI)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        e = self.endpoint
        if e.url is None:
            assert e.socket_path is not None
            return _UnixConnection(e.socket_path, timeout)
        parts = urlsplit(e.url)
        if parts.scheme == "https":
            return http.client.HTTPSConnection(parts.netloc, timeout=timeout)
        return http.client.HTTPConnection(parts.netloc, timeout=timeout)

    def _path(self, path: str) -> str:
        prefix = urlsplit(self.endpoint.url).path if self.endpoint.url else ""
        return prefix + path

    def open(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = REQUEST_TIMEOUT_S,
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send a request; the caller reads (or streams) the response and closes both."""
        all_headers = {"accept": "application/json", **(headers or {})}
        data = None
        if body is NO_BODY:
            # content-length 0 (http.client's for a POST): the request ends
            # with its head. A body sent after the head (http.client's second
            # write) to a route that reads none may meet a connection the
            # daemon closed after answering: EPIPE instead of the answer.
            all_headers["content-type"] = "application/json"
        elif body is not None or method in ("POST", "DELETE"):
            all_headers["content-type"] = "application/json"
            data = json.dumps(body if body is not None else {}).encode()
        conn = self._connection(timeout)
        try:
            conn.request(method, self._path(path), body=data, headers=all_headers)
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise ClientError(self._unreachable(exc)) from None

    def _unreachable(self, exc: BaseException) -> str:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else None
        reason = reason or str(exc) or repr(exc)
        hint = "" if self.endpoint.url else f" (is runnerd running? --socket PATH or {SOCKET_ENV})"
        return f"cannot reach runnerd at {self.endpoint.describe()}: {reason}{hint}"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        ok: tuple[int, ...] = (200, 201, 204),
    ) -> Reply:
        """One request; its JSON answer. Raises ApiError for an error answer."""
        conn, response = self.open(method, path, body, headers)
        try:
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise ClientError(self._unreachable(exc)) from None
        finally:
            conn.close()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        reply = Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, parsed)
        if response.status not in ok:
            error = _api_error(response.status, parsed)
            error.headers = reply.headers
            raise error
        return reply

    def get(self, path: str) -> Any:
        return self.request("GET", path).body

    def get_json_post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body).body

    def sse(self, path: str) -> Iterator[tuple[int | None, str, Any]]:
        """Server-Sent Events from `path` as (id, event, data) until the stream ends."""
        conn, response = self.open("GET", path, timeout=None)
        try:
            if response.status != 200:
                raw = response.read()
                raise _api_error(response.status, _loads(raw))
            yield from _parse_sse(response)
        except (OSError, http.client.HTTPException) as exc:
            raise ClientError(f"lost the connection to runnerd: {exc}") from None
        finally:
            conn.close()


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def _api_error(status: int, body: Any) -> ApiError:
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return ApiError(status, str(body.get("error", "error")), body["message"], body)
    return ApiError(status, "error", f"unexpected answer {status}: {str(body)[:200]}", body)


def _parse_sse(response: http.client.HTTPResponse) -> Iterator[tuple[int | None, str, Any]]:
    event_id: int | None = None
    event, data = "message", list[str]()
    while True:
        line = response.readline()
        if not line:
            return
        text = line.decode(errors="replace").rstrip("\r\n")
        if text == "":
            if data:
                yield event_id, event, _loads("\n".join(data).encode())
            event_id, event, data = None, "message", []
            continue
        name, _, value = text.partition(":")
        value = value.removeprefix(" ")
        if name == "id" and value.isdigit():
            event_id = int(value)
        elif name == "event":
            event = value
        elif name == "data":
            data.append(value)


def default_image(api: Api) -> str:
    """The runner's default image, as its capabilities advertise it."""
    schema = api.get("/v1/capabilities")["config"]["schema"]
    image: str = schema["properties"]["image"]["default"]
    return image
