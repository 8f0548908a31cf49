"""Ending sessions on request: one user stop, or every live one at shutdown.

The `SessionManager`'s stop side (`runnerd.session.manager`): it finds the
session and decides whether a shutdown may begin; this module asks each
session to end and waits for it, within the manager's `stop_timeout_s`. A
stop only cancels the session's run (`Session.request_stop`): the session's
own task decides its terminal status, so a stop during start takes the same
path as any other.
"""

from __future__ import annotations

import logging

import trio

from runnerd.backend import EndIntent, StopRefused
from runnerd.session.errors import StopFailed
from runnerd.session.session import Session

log = logging.getLogger("runnerd.sessions")


def request_stop(session: Session, intent: EndIntent) -> None:
    if not session.is_terminal:
        log.info("stop requested", extra={"session_id": session.id})
        session.request_stop(intent)


async def stop_session(session: Session, intent: EndIntent, timeout_s: float) -> None:
    """`SessionManager.stop` once the session is found: the backend's own
    stop first (STOP only), then cancel the run and wait for it to be terminal.

    Raises:
        StopFailed: the backend refused the stop (the session runs on), or
            the session was not terminal within `timeout_s`.
    """
    if intent is EndIntent.STOP:  # the backend's own stop, while RUNNING only
        await _stop_workload(session, timeout_s)
    request_stop(session, intent)
    await _wait_stopped(session, timeout_s)


async def _stop_workload(session: Session, timeout_s: float) -> None:
    """`session.stop_workload()` within `timeout_s`, its refusal a `StopFailed`."""
    with trio.move_on_after(timeout_s):
        try:
            await session.stop_workload()
        except StopRefused as exc:
            log.warning("stop refused: %s", exc, extra={"session_id": session.id})
            raise StopFailed(session.id, timeout_s, str(exc)) from exc
        return
    raise StopFailed(session.id, timeout_s)


async def _wait_stopped(session: Session, timeout_s: float) -> None:
    """Raises StopFailed: not terminal within `timeout_s`."""
    with trio.move_on_after(timeout_s):
        await session.wait_terminal()
        return
    raise StopFailed(session.id, timeout_s)


async def stop_every(live: list[Session], intent: EndIntent, timeout_s: float) -> list[str]:
    """End every session of `live` with `intent`, concurrently; return the
    ids not terminal within `timeout_s` (logged; their tasks still run)."""
    stuck: list[str] = []

    # Not `stop_session`: a shutdown ends every session whatever its
    # backend's stop says (a pod whose delete is refused is left on the
    # backend's list of undeleted pods for the next daemon).
    async def wait_one(session: Session) -> None:
        try:
            await _wait_stopped(session, timeout_s)
        except StopFailed as exc:
            extra = {"session_id": session.id}
            log.error("did not stop within %g s", exc.timeout_s, extra=extra)
            stuck.append(session.id)

    # Every stop is requested in one pass, before any waiting: a task per
    # session first would delay the last one's by all the others' starts.
    for session in live:
        request_stop(session, intent)
    async with trio.open_nursery() as nursery:
        for session in live:
            nursery.start_soon(wait_one, session)
    return stuck
