"""Logging setup: one line per event on stderr, shaped for journald and grep.

Owns the log line format and the root logger's configuration:

    LEVEL logger [session-id] message key=value key=value

Callers log with lazy `%s` arguments and pass structure through `extra=`:
`session_id` becomes the bracketed id (omitted when absent), every other
extra key becomes a `key=value` field (values with spaces or quotes are
JSON-quoted). A field whose key looks secret (`env`, `token`, `secret`,
`password`, `authorization`) is printed as `***`: secrets must never reach a
log line even when a caller passes one by mistake.

`server.log_level` is runnerd's own level (the `runnerd` logger and its
children). Every other logger, the libraries', stays at INFO however low it
is set: at DEBUG, trio-websocket logs every frame of every attach and hpack
every header, which would drown runnerd's own debug lines. hypercorn's access
log is off (one line per request would drown the events that matter); its
error log, quart's request errors and the HTTP clients go through the same
format at WARNING and up.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, TextIO

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_RECORD_ATTRS = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)
_SECRET_MARKERS = ("env", "token", "secret", "password", "authorization")


def format_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if not text or any(c in text for c in ' "=\n\t'):
        return json.dumps(text)
    return text


def is_secret_key(key: str) -> bool:
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


class LineFormatter(logging.Formatter):
    """`LEVEL logger [session-id] message key=value ...`, one line always."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [record.levelname, record.name]
        session_id = getattr(record, "session_id", None)
        if session_id:
            parts.append(f"[{session_id}]")
        parts.append(record.getMessage().replace("\n", "\\n"))
        for key, value in record.__dict__.items():
            if key in _RECORD_ATTRS or key == "session_id" or key.startswith("_"):
                continue
            shown = "***" if is_secret_key(key) else format_value(value)
            parts.append(f"{key}={shown}")
        if record.exc_info:
            # Tracebacks stay on one line too, so one event is one journal entry.
            parts.append("exc=" + json.dumps(self.formatException(record.exc_info)))
        return " ".join(parts)


def setup_logging(level: str, *, stream: TextIO | None = None) -> None:
    """Route every logger to `stream` (stderr) at `level` ("info", ...).

    Idempotent: a second call replaces the handler, never doubles a line.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(LineFormatter())
    logging.getLogger().handlers = [handler]
    set_log_level(level)


OWN_LOGGER = "runnerd"
# The most a library logs: its INFO lines are rare and can matter; its DEBUG
# is per frame or per header (module docstring).
LIBRARY_FLOOR = logging.INFO
# Library chatter: hypercorn's access log is disabled in its config; its
# error log and quart's request errors still come through at WARNING+.
WARNING_ONLY = ("hypercorn.error", "hypercorn.access", "quart.serving", "httpx", "httpcore")


def set_log_level(level: str) -> None:
    """Apply `level` to runnerd's loggers, and at most INFO to the libraries'
    (module docstring); also on SIGHUP."""
    own = logging.getLevelName(level.upper())
    logging.getLogger(OWN_LOGGER).setLevel(own)
    root = logging.getLogger()
    root.setLevel(max(own, LIBRARY_FLOOR))
    for noisy in WARNING_ONLY:
        logging.getLogger(noisy).setLevel(max(logging.WARNING, own))
