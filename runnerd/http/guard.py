"""The browser guard: no web page can drive runnerd unless the operator says so.

CORS only hides a response from a page; it never stops the request. A page
can POST a "simple" request (`content-type: text/plain`) without a preflight,
and DNS rebinding (a page whose name resolves to 127.0.0.1) makes the
browser treat runnerd as that page's own origin. So before any route runs:

1. On a TCP listener, the `Host` header must name a loopback address,
   `localhost`, the listener's own address, or a name in
   `server.allowed_hosts` (else `403 forbidden_host`): a rebound name is
   none of these. An absolute-form target (`GET http://name/v1/...`) names
   the host in its authority (RFC 9112 §3.2.2: it replaces `Host`), so that
   authority is what is judged; before, `Host: 127.0.0.1` let any such
   target through. UNIX sockets are out of a browser's reach and skip this.
2. A request that carries an `Origin` not allowed by `server.cors_origins`
   is refused with `403 forbidden_origin`, GETs included (replays carry
   terminal output). A request without `Origin` is not from a browser page
   (browsers send it on every cross-origin and every state-changing
   request), and anything that is not a browser can send any header anyway.
3. A `POST` or a `DELETE` that carries a body must be
   `content-type: application/json` (else `415`): a cross-origin JSON body
   always needs a preflight, which step 2 answers only for allowed origins.
   One with no body (`POST .../reload`, `.../resume`, as `curl -X POST`
   sends them) passes: it has no type to judge, and a page cannot send it
   without an `Origin`, which step 2 judges.
   A method no route takes is `405` (with `allow`) and an unknown path
   `404` instead: no route runs, so no body is read.

The WebSocket route applies 1 and 2 itself (closing with 4403), since a
browser cannot read a refused handshake's status.

`HostSyntaxGuard` wraps the whole app: a `Host` that is no valid host name
(`a..b`, a label over 63 characters) makes werkzeug raise while quart builds
the request context, before any hook runs, which hypercorn answered with a
500 and a logged traceback (found by the fuzz suite). It is a `400` here, as
is a request with two `Host` or two `Origin` headers (quart reads the first,
a proxy in front may read the last). The metrics listener, which has no
quart hooks, gets steps 1 and 2 from the same wrapper.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from quart import Response, request
from quart_trio import QuartTrio

from runnerd.config import Config
from runnerd.config.server import is_loopback_host
from runnerd.contract import error_body
from runnerd.http.cors import origin_permitted
from runnerd.http.errors import close_if_body_unread, error_response

# Methods whose body, when they carry one, must be JSON (step 3).
_BODY_METHODS = frozenset({"POST", "DELETE"})


def host_name(host_header: str) -> str:
    """The name part of a `Host` header: no port, no IPv6 brackets, lowercase."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    name, sep, port = value.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        value = name
    return value.rstrip(".")


def _same_address(name: str, server: tuple[str, int]) -> bool:
    try:
        return ipaddress.ip_address(name) == ipaddress.ip_address(server[0])
    except ValueError:
        return False


def host_refusal(
    host_header: str | None, server: tuple[str, int] | None, allowed_hosts: tuple[str, ...]
) -> str | None:
    """Why this `Host` is refused on this listener, or None to let it pass.

    `server` is the listener's (address, port), None on a UNIX socket.
    """
    if server is None:
        return None
    if not host_header:
        return "a request over TCP must name its host (a Host header, or an absolute-form target)"
    name = host_name(host_header)
    if is_loopback_host(name) or _same_address(name, server) or name in allowed_hosts:
        return None
    return (
        f"Host {name!r} is not this runner's; allowed: loopback addresses, localhost"
        + (f", {', '.join(allowed_hosts)}" if allowed_hosts else "")
        + " (server.allowed_hosts)"
    )


def request_host(scope: Mapping[str, Any], host_header: str | None) -> str | None:
    """The host a request names: the authority of a target that is not
    origin-form (`http://name:port/path`: RFC 9112 §3.2.2 makes it the host,
    whatever `Host` says; none for `*` or a bare word), else `host_header`."""
    target = str(scope.get("path", "/"))
    if target.startswith("/"):
        return host_header
    return urlsplit(target).netloc or None


def edge_refusal(
    host: str | None, origin: str | None, server: tuple[str, int] | None, config: Config
) -> tuple[str, str] | None:
    """`(code, message)` for a request the guard refuses (steps 1 and 2), or None."""
    problem = host_refusal(host, server, config.server.allowed_hosts)
    if problem is not None:
        return "forbidden_host", problem
    if origin is not None and not origin_permitted(config.server.cors_origins, origin):
        return "forbidden_origin", (
            f"origin {origin!r} may not use this runner (server.cors_origins)"
        )
    return None


def _has_body() -> bool:
    return bool(request.content_length) or "transfer-encoding" in request.headers


def server_address(scope: Mapping[str, Any]) -> tuple[str, int] | None:
    server = scope.get("server")
    return (str(server[0]), int(server[1])) if server else None


def header_problem(scope: Mapping[str, Any]) -> str | None:
    """Why this request's Host/Origin headers cannot be judged, or None.

    More than one `Host` or `Origin` is refused outright: the guard and
    whatever sits in front of runnerd could each read a different one (an
    allowed Origin first, a hostile one second). A `Host` werkzeug cannot
    IDNA-encode made it raise while building the request context.
    """
    seen: set[bytes] = set()
    for raw_name, value in scope.get("headers", ()):
        name = raw_name.lower()
        if name not in (b"host", b"origin"):
            continue
        if name in seen:
            return f"the request carries more than one {name.decode().capitalize()} header"
        seen.add(name)
        if name == b"host":
            try:
                value.decode("latin-1").encode("idna")
            except UnicodeError:
                return "the Host header is not a valid host name"
    return None


def _header(scope: Mapping[str, Any], wanted: bytes) -> str | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == wanted:
            return str(value.decode("latin-1"))
    return None


async def send_error(scope: Any, send: Any, status: int, code: str, message: str) -> None:
    """Answer an ASGI http/websocket scope with a JSON error and close."""
    body = json.dumps(error_body(code, message), separators=(",", ":")).encode()
    prefix = "websocket.http." if scope["type"] == "websocket" else "http."
    headers = [(b"content-type", b"application/json"), (b"connection", b"close"),
               (b"content-length", str(len(body)).encode())]  # fmt: skip
    await send({"type": prefix + "response.start", "status": status, "headers": headers})
    await send({"type": prefix + "response.body", "body": body})


class HostSyntaxGuard:
    """ASGI wrapper: a request with an unparsable or repeated Host, or a
    repeated Origin, is a JSON 400 (`header_problem`). With `config`, it also
    applies the guard's steps 1 and 2 (403), for an app without quart's
    hooks: the metrics listener."""

    def __init__(self, app: Any, config: Callable[[], Config] | None = None) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        problem = header_problem(scope)
        if problem is not None:
            await send_error(scope, send, 400, "invalid_request", problem)
            return
        if self.config is not None:
            refusal = edge_refusal(
                request_host(scope, _header(scope, b"host")), _header(scope, b"origin"),
                server_address(scope), self.config(),
            )  # fmt: skip
            if refusal is not None:
                await send_error(scope, send, 403, *refusal)
                return
        await self.app(scope, receive, send)


def register_guard(app: QuartTrio, config: Callable[[], Config]) -> None:
    """Refuse drive-by requests before anything else runs (registered first)."""

    async def guard() -> Response | None:
        refusal = edge_refusal(
            request_host(request.scope, request.headers.get("host")),
            request.headers.get("origin"),
            server_address(request.scope),
            config(),
        )
        if refusal is not None:
            return close_if_body_unread(error_response(403, *refusal))
        if request.routing_exception is not None:
            # No route takes this method (405 with `allow`) or path (404):
            # that is the answer, whatever the body's type.
            return None
        if request.method in _BODY_METHODS and _has_body():
            if request.mimetype != "application/json":
                got = request.headers.get("content-type") or "none"
                return close_if_body_unread(
                    error_response(
                        415,
                        "unsupported_media_type",
                        f"{request.method} {request.path} needs content-type: application/json "
                        f"(got {got})",
                    )
                )
        return None

    app.before_request(guard)
