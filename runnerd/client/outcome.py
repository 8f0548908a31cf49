"""A session's terminal status as a shell exit code, as `docker run` does.

Pure. `exited N` → N; `failed` → 125 with the message on stderr; `stopped`
→ 130 (128 + SIGINT, what a shell shows for an interrupted command).
"""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_ERROR = 1  # the CLI itself failed: no daemon, no such session, a refusal
EXIT_USAGE = 2  # a bad argument: argparse's exit code for a usage error, kept for ours
EXIT_FAILED = 125
EXIT_STOPPED = 130


def exit_code(status: Any) -> tuple[int, str | None]:
    """(exit code, message for stderr or None) for a `RunStatus` dict."""
    kind = status.get("kind") if isinstance(status, dict) else None
    if kind == "exited":
        code = status.get("code")
        return (code if isinstance(code, int) and 0 <= code <= 255 else EXIT_ERROR), None
    if kind == "failed":
        return EXIT_FAILED, f"failed: {status.get('message', '')}"
    if kind == "stopped":
        return EXIT_STOPPED, "stopped"
    return EXIT_ERROR, f"still {kind or 'unknown'}"
