"""CORS for the HTTP routes (WebSocket origins are checked in `io`).

Owns the one rule of the contract: `access-control-allow-origin` is `*` when
the operator allows every origin, or the request's Origin (with
`vary: Origin`) when it is in the configured allowlist; nothing otherwise.
It applies to every answer, errors and preflights included. The allowlist is
read from the live config on each request, so a reload takes effect at once.

A request from an origin outside the list never gets here: `runnerd.http.guard`
refuses it first. So a preflight answered here is an allowed origin's, and
it may also grant Chrome's Private Network Access
(`Access-Control-Request-Private-Network: true`), which a page on a public
origin (a hosted editor) needs before it may reach a loopback runnerd.
"""

from __future__ import annotations

from collections.abc import Callable

from quart import Response, request
from quart_trio import QuartTrio

from runnerd.config import Config
from runnerd.contract import ACCEPTED_TERMS_HEADER, TERMINAL_SIZE_HEADER

# What a browser client of the contract sends beyond the CORS-safelisted set.
_ALLOW_HEADERS = f"content-type, {ACCEPTED_TERMS_HEADER}, {TERMINAL_SIZE_HEADER}, last-event-id"
_ALLOW_METHODS = "GET, POST, DELETE, OPTIONS"
_MAX_AGE_S = 600


def allowed_origin(cors_origins: str | tuple[str, ...], origin: str | None) -> str | None:
    """The value for `access-control-allow-origin`, or None to send nothing."""
    if cors_origins == "*":
        return "*"
    if origin is not None and origin in cors_origins:
        return origin
    return None


def origin_permitted(cors_origins: str | tuple[str, ...], origin: str) -> bool:
    """May a page of `origin` use the API? (A request without Origin is no page's.)"""
    return cors_origins == "*" or origin in cors_origins


def apply_cors(response: Response, cors_origins: str | tuple[str, ...]) -> Response:
    value = allowed_origin(cors_origins, request.headers.get("origin"))
    if cors_origins != "*":
        # The answer depends on the Origin even when it grants nothing:
        # caches must not reuse it for another origin.
        response.vary.add("Origin")
    if value is not None:
        response.headers["access-control-allow-origin"] = value
    return response


def register_cors(app: QuartTrio, config: Callable[[], Config]) -> None:
    """Answer preflights and stamp CORS headers on every HTTP response."""

    async def preflight() -> Response | None:
        if request.method != "OPTIONS" or "access-control-request-method" not in request.headers:
            return None
        if request.url_rule is None:
            return None  # unknown route: the 404 answers it
        response = Response("", status=204)
        response.headers["access-control-allow-methods"] = _ALLOW_METHODS
        response.headers["access-control-allow-headers"] = _ALLOW_HEADERS
        response.headers["access-control-max-age"] = str(_MAX_AGE_S)
        if request.headers.get("access-control-request-private-network", "").lower() == "true":
            response.headers["access-control-allow-private-network"] = "true"
        return response

    async def stamp(response: Response) -> Response:
        return apply_cors(response, config().server.cors_origins)

    app.before_request(preflight)
    app.after_request(stamp)
