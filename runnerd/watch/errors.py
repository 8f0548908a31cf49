"""`WatchError`: what the watch rules refuse, as the answer a client gets. Pure.

Each refusal carries its contract code and status (`RunnerdError`'s
`status_hint` and `code`), so a route lets it propagate and
`runnerd.http.errors` answers it; a refusal is raised before anything is
changed.
"""

from __future__ import annotations

from collections.abc import Mapping

from runnerd.errors import RunnerdError


class WatchError(RunnerdError):
    """A watch request refused: `status_hint` and `code` say how (e.g. 400
    `port_conflict`), `message` says what, naming the field."""

    def __init__(
        self, status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message, status_hint=status, code=code, headers=headers)


class WorkspacePathError(WatchError):
    """A workspace path the contract refuses: `400 invalid_path`."""

    def __init__(self, message: str) -> None:
        super().__init__(400, "invalid_path", message)
