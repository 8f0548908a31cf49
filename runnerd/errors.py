"""`RunnerdError`: the one base of every error runnerd answers a client with. Pure.

Each subclass carries what the HTTP edge needs to answer it, as data: the
status hint (as h11's `error_status_hint`), the contract's error `code`, a
client-safe `message` (never a secret; the cause travels as `__cause__` to
the log only), extra body fields and response headers. `runnerd.http.errors`
maps the base to a JSON error body in one place; no route builds its own.
A WebSocket route closes with `4000 + status_hint` (4404 for `NotFound`).

May import nothing of runnerd: every layer raises these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class RunnerdError(Exception):
    """An error with an answer for the client.

    `status_hint` and `code` are class defaults a subclass sets; an instance
    may override both (admission refuses with several). `log_as_error`: the
    edge logs it (a failure of runnerd's, not the client's).
    """

    status_hint: int = 500
    code: str = "internal_error"
    log_as_error: bool = False

    def __init__(
        self,
        message: str,
        *,
        status_hint: int | None = None,
        code: str | None = None,
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status_hint is not None:
            self.status_hint = status_hint
        if code is not None:
            self.code = code
        self.extra: dict[str, Any] = dict(extra or {})
        self.headers: dict[str, str] = dict(headers or {})


class NotFound(RunnerdError):
    """No such session (or other named thing)."""

    status_hint = 404
    code = "not_found"


class SessionNotFound(NotFound):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session with id '{session_id}'")
        self.session_id = session_id
