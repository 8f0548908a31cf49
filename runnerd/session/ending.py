"""How a session's run ended: one value, and the one table to the wire.

Owns `Ending`, what `runnerd.session.running.drive` returns for every
session it runs: the workload's own `Outcome` (`Exited`, `Failed`) or one of
the core's endings below. `decide` picks it from what the run produced and
why it was cancelled (a precedence, written once); `wire_status` turns it
into the contract's terminal `RunStatus` (the table in
`runnerd.session.manager`'s docstring; None for `Detached`, which has none);
`failed_stage` is the stage the start-failure metric counts. Pure: no IO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from runnerd.backend import EndIntent, Exited, Failed
from runnerd.contract import RunStatus, exited, failed, stopped

# Why `Internal` ended a session, as the client reads it after `internal: `.
UNEXPECTED = "the session runner failed unexpectedly"
NO_OUTCOME = "the backend returned no outcome"


@dataclass(frozen=True)
class Stopped:
    """A stop was asked (a DELETE, shutdown) before the workload ended on its own."""


@dataclass(frozen=True)
class TtlExpired:
    """The session ran `ttl_s` from its creation."""

    ttl_s: float


@dataclass(frozen=True)
class StartFailed:
    """The backend raised `StartError(stage, message)`: the workload was never started."""

    stage: str
    message: str


@dataclass(frozen=True)
class Internal:
    """A bug (in a backend or the core): `reason` is client-safe, the
    traceback went to the log."""

    reason: str = UNEXPECTED


@dataclass(frozen=True)
class Detached:
    """Left running for a successor daemon (SIGUSR2), which reports how it ends."""


Ending = Exited | Failed | Stopped | TtlExpired | StartFailed | Internal | Detached
# What the run itself produced, before any cancellation is considered: the
# workload's outcome, or what the backend raised.
Produced = Exited | Failed | StartFailed | Internal


def format_ttl_failure(ttl_s: float) -> str:
    return f"ttl: session exceeded its time limit of {ttl_s:g} s"


def wire_status(ending: Ending) -> RunStatus | None:
    """The terminal status a client sees for `ending` (None: detached, no
    status is recorded here)."""
    match ending:
        case Exited(code):
            return exited(code)
        case Failed(message):
            return failed(message)
        case Stopped():
            return stopped()
        case TtlExpired(ttl_s):
            return failed(format_ttl_failure(ttl_s))
        case StartFailed(stage, message):
            return failed(f"{stage}: {message}")
        case Internal(reason):
            return failed(f"internal: {reason}")
        case Detached():
            return None
        case _:
            assert_never(ending)


def decide(
    produced: Produced | None, end: EndIntent | None, *, ttl_expired: bool, ttl_s: float
) -> Ending:
    """The one ending of a run: the first of these that holds.

        the workload's own outcome    -> it (an end asked too late changes nothing)
        a detach was asked            -> Detached (even of a start that failed)
        a stop was asked              -> Stopped, never failed
        the TTL expired               -> TtlExpired
        the backend raised            -> StartFailed / Internal, as produced
        nothing (cancelled, no cause) -> Internal

    `produced`: what the run returned or raised (None: it was cancelled
    first); `end`: the end asked of the session (None: none).
    """
    if isinstance(produced, Exited | Failed):
        return produced
    if end is EndIntent.DETACH:
        return Detached()
    if end is EndIntent.STOP:
        return Stopped()
    if ttl_expired:
        return TtlExpired(ttl_s)
    return produced if produced is not None else Internal()


def failed_stage(ending: Ending) -> str | None:
    """The stage a start that ended this way failed at, for the
    start-failure metric (None: not a failure). A workload that failed on
    its own is not a start stage, so it counts as `unknown`."""
    match ending:
        case StartFailed(stage, _):
            return stage
        case TtlExpired():
            return "ttl"
        case Internal():
            return "internal"
        case Failed():
            return "unknown"
        case _:
            return None
