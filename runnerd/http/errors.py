"""Error answers: every error response is `{"error": code, "message": text}`.

Owns the one translation of failures into the contract's JSON error body:
framework errors (unknown route, wrong method, oversized body), every
`runnerd.errors.RunnerdError` a route raises (a bad body, an admission check,
an unknown session, a full registry, a failed stop: one handler, reading the
error's own status hint) and unexpected exceptions. No route builds its own error answer
for these, and no framework default ever answers with HTML.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from quart import Response, has_request_context, request, websocket
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.routing import WebsocketMismatch

from runnerd.contract import error_body
from runnerd.errors import RunnerdError

log = logging.getLogger(__name__)

# Contract codes for the statuses the framework itself can produce.
_CODES = {
    400: ("invalid_request", "the request could not be understood"),
    404: ("not_found", "no such route"),
    405: ("method_not_allowed", "method not allowed on this route"),
    408: ("request_timeout", "the request body did not arrive in time"),
    413: ("payload_too_large", "the request body is too large"),
}


def error_response(status: int, code: str, message: str, **extra: Any) -> Response:
    """A JSON error response with the contract's body shape."""
    return Response(
        _dumps(error_body(code, message, **extra)),
        status=status,
        content_type="application/json",
    )


def json_response(body: Any, status: int = 200) -> Response:
    return Response(_dumps(body), status=status, content_type="application/json")


def _dumps(body: Any) -> str:
    return json.dumps(body, separators=(",", ":"))


async def read_body() -> bytes:
    """The request body (413 `payload_too_large` past MAX_CONTENT_LENGTH)."""
    return await request.get_data(cache=True, as_text=False, parse_form_data=False)


def close_if_body_unread(response: Response) -> Response:
    """Mark `response` `connection: close` when the request has a body that
    may be unread: on a reused connection the next request then hangs
    (observed with hypercorn 0.18 + quart 0.22). Closing the connection lets
    the client start clean. (A WebSocket handshake has no body.)"""
    if not has_request_context():
        return response
    if request.content_length or "transfer-encoding" in request.headers:
        response.headers["connection"] = "close"
    return response


def strip_bodyless(response: Response) -> Response:
    """A 204 or 304 has no body, so it carries no body headers (RFC 9110)."""
    if response.status_code in (204, 304):
        for name in ("content-type", "content-length"):
            response.headers.pop(name, None)
    return response


def register_error_handlers(app: QuartTrio, *, max_body_bytes: int) -> None:
    """Turn framework errors and runnerd's own exceptions into JSON bodies."""

    async def on_http_exception(exc: HTTPException) -> Response:
        return close_if_body_unread(build_http_error(exc, max_body_bytes))

    async def without_body_headers(response: Response) -> Response:
        return strip_bodyless(response)

    app.after_request(without_body_headers)
    app.register_error_handler(HTTPException, on_http_exception)
    app.register_error_handler(RunnerdError, on_runnerd_error)
    app.register_error_handler(Exception, on_exception)


def build_http_error(exc: HTTPException, max_body_bytes: int) -> Response:
    """The JSON answer for an error the framework raised (routing, limits)."""
    status = exc.code or 500
    code, message = _CODES.get(status, ("http_error", exc.description or "error"))
    method, path = (
        (request.method, request.path) if has_request_context() else ("GET", websocket.path)
    )
    if isinstance(exc, WebsocketMismatch) and not has_request_context():
        # A WebSocket upgrade of a plain route (it was a 500 and two tracebacks).
        return error_response(
            400,
            "invalid_request",
            f"{path} is not a WebSocket endpoint; send the request without 'Upgrade: websocket'",
        )
    if isinstance(exc, WebsocketMismatch):
        # A plain GET on the WebSocket route: say what is missing, not "bad request".
        response = error_response(
            426,
            "upgrade_required",
            f"{path} is a WebSocket endpoint; send the request with 'Upgrade: websocket'",
        )
        response.headers["upgrade"] = "websocket"
        return response
    if status == 404:
        message = f"no route for {method} {path}"
    elif status == 413:
        message = f"the request body exceeds the limit of {max_body_bytes} bytes"
    elif isinstance(exc, MethodNotAllowed):
        allowed = sorted(exc.valid_methods or ())
        message = f"method not allowed; allowed: {', '.join(allowed)}"
        response = error_response(status, code, message)
        response.headers["allow"] = ", ".join(allowed)
        return response
    return error_response(status, code, message)


async def on_runnerd_error(exc: RunnerdError) -> Response:
    """The one mapping of runnerd's errors to answers: the error's own status
    hint, code, message, extra body fields and headers."""
    if exc.log_as_error:
        log.error(
            "%s: answering %d %s",
            exc.message,
            exc.status_hint,
            exc.code,
            extra={"session_id": getattr(exc, "session_id", None)},
        )
    response = error_response(exc.status_hint, exc.code, exc.message, **exc.extra)
    response.headers.update(exc.headers)
    return response


async def on_exception(exc: Exception) -> Response:
    # A bug, not a client error: log it with its traceback, answer without
    # details (an exception text could carry a secret).
    log.error("unhandled error in request", exc_info=exc)
    return error_response(500, "internal_error", "internal error; see the runnerd log")
