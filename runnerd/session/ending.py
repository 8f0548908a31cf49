"""How a session's run ended, as exactly one terminal status.

Owns the table in `runnerd.session.manager`'s docstring: `classify` reads
what the run gathered (`WorkloadRun`) and decides the one terminal status;
no flags are scattered across callers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from runnerd.backend import Exited, Failed, Outcome, StartError
from runnerd.contract import RunStatus, exited, failed, stopped
from runnerd.session.session import Session

log = logging.getLogger("runnerd.sessions")


def format_ttl_failure(ttl_s: float) -> str:
    return f"ttl: session exceeded its time limit of {ttl_s:g} s"


def leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    """Every exception in `group`, nested groups flattened, in order."""
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


@dataclass
class WorkloadRun:
    """How one session's workload run ended, gathered for `classify`."""

    outcome: Outcome | None = None
    start_error: StartError | None = None
    internal: BaseExceptionGroup[Exception] | None = None
    ttl_expired: bool = False


def classify(session: Session, run: WorkloadRun) -> RunStatus:
    """The one terminal status for how the run ended (module docstring table)."""
    extra = {"session_id": session.id}
    if run.internal is not None:
        log.error("session runner failed", exc_info=run.internal, extra=extra)
    if run.outcome is not None:
        return _outcome_status(session, run.outcome)
    if session.user_stopped:
        return stopped()
    if run.ttl_expired:
        return failed(format_ttl_failure(session.spec.limits.ttl_s))
    if run.start_error is not None:
        error = run.start_error
        log.info("start failed: %s", error, exc_info=error.__cause__, extra=extra)
        return failed(f"{error.stage}: {error.message}")
    return failed("internal: the session runner failed unexpectedly")


def _outcome_status(session: Session, outcome: Outcome) -> RunStatus:
    if isinstance(outcome, Exited):
        return exited(outcome.code)
    if isinstance(outcome, Failed):
        return failed(outcome.message)
    log.error(
        "backend returned %r, not an Outcome",
        type(outcome).__name__,
        extra={"session_id": session.id},
    )
    return failed("internal: the backend returned no outcome")
