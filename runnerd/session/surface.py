"""What every session offers the routes of watch sessions, with a run
session's answers.

Owns `WatchSurface`, a base of `runnerd.session.session.Session`: the
routes (`runnerd.http`) get a `Session` from the manager and read `mode`
before they use the rest, so a run session needs answers too: no apps, no
agent, and `409 not_a_watch_session` from every watch-only operation. The
watch session (`runnerd.session.watchsession.WatchSession`) overrides them.
`subscribed()` is every session's: each open SSE stream and `/io` socket
holds it, and a watch session's idle suspend counts the holders.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import trio

from runnerd.contract import SessionMode
from runnerd.watch.errors import WatchError

if TYPE_CHECKING:
    from runnerd.backend.watch import ChangeSet, WorkspaceFile
    from runnerd.session.apps import AppChannel
    from runnerd.watch.apps import AppSpec


def not_a_watch_session() -> WatchError:
    return WatchError(
        409, "not_a_watch_session", "this is a run session; only a watch session has this route"
    )


class WatchSurface:
    """A session's watch-facing members (see the module docstring)."""

    mode: SessionMode = "run"

    def __init__(self) -> None:
        self._subscribers = 0
        self._subscribers_changed = trio.Event()

    @property
    def agent_name(self) -> str | None:
        """The co-resident agent's catalog name while the session has one."""
        return None

    def app_channels(self) -> list[AppChannel]:
        """The apps, in declaration order ([] on a run session)."""
        return []

    def app_channel(self, name: str | None) -> AppChannel | None:
        """The named app, or with None the only app of a one-app watch
        session; None when there is no such app (a run session has none)."""
        return None

    # -- subscribers ---------------------------------------------------------

    @property
    def subscriber_count(self) -> int:
        """Open SSE streams and `/io` sockets on the session now."""
        return self._subscribers

    @contextmanager
    def subscribed(self) -> Iterator[None]:
        """Held by every open SSE stream and `/io` socket for its lifetime."""
        self._subscribers += 1
        self._subscribers_touched()
        try:
            yield
        finally:
            self._subscribers -= 1
            self._subscribers_touched()

    def _subscribers_touched(self) -> None:
        self._subscribers_changed.set()
        self._subscribers_changed = trio.Event()

    async def wait_subscribers_changed(self) -> None:
        """Return after the next subscriber arrives or leaves."""
        await self._subscribers_changed.wait()

    # -- watch-only operations (WatchError with the contract's answer) ------

    def require_running(self) -> None:
        """409 not_running unless the workspace is live (watch only)."""
        raise not_a_watch_session()

    @contextmanager
    def reload_budget(self) -> Iterator[None]:
        """One admission of the reload budget for the block: 429
        reload_rate_limited on entry once it is spent; given back when the
        block refuses the request (a `RunnerdError`), kept otherwise."""
        raise not_a_watch_session()
        yield  # pragma: no cover - a generator, for the decorator

    async def list_workspace(self) -> list[WorkspaceFile]:
        raise not_a_watch_session()

    async def read_workspace_file(self, path: str) -> bytes:
        raise not_a_watch_session()

    async def apply_changes(self, changes: ChangeSet) -> tuple[int, int]:
        raise not_a_watch_session()

    def reload(self, app: str | None) -> list[str]:
        raise not_a_watch_session()

    async def replace_apps(self, apps: tuple[AppSpec, ...]) -> list[str]:
        raise not_a_watch_session()
