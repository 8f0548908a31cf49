"""Taking over what a previous daemon left: the state directory and recovery.

Owns `open_state_dir` (`runner.state_dir`, for a backend whose workloads
outlive the daemon) and `recover_sessions`, the daemon's background task
that adopts what `Backend.recover()` finds, then the watch sessions the
state dir's watch records describe (`SessionManager.adopt_watches`), while
the listeners already serve (`runnerd.daemon.serving` starts it right
after them).
"""

from __future__ import annotations

import logging

from runnerd.backend import Backend
from runnerd.config import Config, ConfigError
from runnerd.daemon.runtime import Runtime
from runnerd.session.errors import ManagerClosed
from runnerd.session.statefile import StateDir

log = logging.getLogger("runnerd.daemon")


def open_state_dir(config: Config, backend: Backend) -> StateDir | None:
    """`runner.state_dir`, for a backend whose workloads can outlive the
    daemon (none for the local backend: nothing of it survives a restart).

    Raises:
        ConfigError: naming `runner.state_dir` when it cannot be created.
    """
    if not backend.detach_supported:
        return None
    try:
        return StateDir.open(config.runner.state_dir)
    except OSError as exc:
        raise ConfigError(
            "runner.state_dir",
            f"cannot use {str(config.runner.state_dir)!r}: {exc.strerror or exc}",
        ) from exc


async def recover_sessions(state: Runtime) -> None:
    """Adopt what a previous daemon left (`Backend.recover()`), while the
    listeners already serve. A failure is logged and adopts nothing (the
    workloads stay for the next start: nothing is removed on a guess)."""
    sessions, adopted = state.sessions, 0
    try:
        found = await state.backend.recover()
    except Exception:
        log.exception("recovery failed: sessions a previous runnerd left are not adopted")
        sessions.end_recovery(prune=False)
        return
    replays = await sessions.read_replays([r.identity.session_id for r in found])
    for recovered in found:
        try:
            sessions.adopt(recovered, replays.get(recovered.identity.session_id))
            adopted += 1
        except ManagerClosed:
            log.warning("shutting down: %d recovered sessions not adopted", len(found) - adopted)
            sessions.end_recovery(prune=False)
            return
        except ValueError as exc:
            log.warning("not adopted: %s", exc, extra={"session_id": recovered.identity.session_id})
    try:
        watch = await sessions.adopt_watches()  # their watch records (none on local)
    except ManagerClosed:
        log.warning("shutting down: recovered watch sessions not adopted")
        sessions.end_recovery(prune=False)
        return
    if watch:
        log.info("adopted %d watch sessions", watch)
    sessions.end_recovery(prune=True)
