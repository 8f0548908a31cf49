"""One pod run's lifecycle as data: its phases, their transitions, its teardown. Pure.

`podrun.PodRun` walks these phases (h11's `_state.py` is the model: the
transitions are a table, a move the table does not hold is a bug, raised):

    CREATING ──> PENDING ──> RUNNING ──> ENDING ──> ENDED
    ADOPTING ─────────────────┘
    (and from every phase straight to ENDED: a failed start, a pod that
    ended before it was seen running, a cancellation)

- CREATING: the bundle staged and the pod created (a stop during the create
  gives it CREATE_GRACE_S, then leaves the pod to the sweep).
- ADOPTING: a pod a previous process left (`recover()` saw it running):
  its endpoints re-published.
- PENDING: created; `progress` while it starts, until it runs or the start fails.
- RUNNING: `Started` reported; its terminal, reachability and debug stream
  followed. A user stop here reads the log first if no attach came up
  (`stop_reads_log`): the only place that output is.
- ENDING: its end seen; the rest of its output drained from the attach, or
  caught up from the log (a stop still reads the log first).
- ENDED: the outcome is known; what remains is the teardown (`Teardown`).

The teardown is chosen by `plan_teardown` from how the run ended.
"""

from __future__ import annotations

from enum import Enum


class Phase(Enum):
    CREATING = "creating"
    ADOPTING = "adopting"
    PENDING = "pending"
    RUNNING = "running"
    ENDING = "ending"
    ENDED = "ended"


TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.CREATING: frozenset({Phase.PENDING, Phase.ENDED}),
    Phase.ADOPTING: frozenset({Phase.RUNNING, Phase.ENDED}),
    Phase.PENDING: frozenset({Phase.RUNNING, Phase.ENDED}),
    Phase.RUNNING: frozenset({Phase.ENDING, Phase.ENDED}),
    Phase.ENDING: frozenset({Phase.ENDED}),
    Phase.ENDED: frozenset(),
}


class PhaseError(Exception):
    """A move the table does not hold: a bug in the pod run, never the cluster's doing."""


def advance(current: Phase, to: Phase) -> Phase:
    """`to`, if the table lets `current` move there.

    Raises:
        PhaseError: it does not.
    """
    if to not in TRANSITIONS[current]:
        raise PhaseError(f"pod run: no move from {current.value} to {to.value}")
    return to


def stop_reads_log(phase: Phase, output_released: bool) -> bool:
    """Whether a user stop reads the pod's log before its delete: while the
    terminal is followed and no attach has released the output yet (the
    pod's log is then the only place what it wrote is; after the delete it
    is gone). Elsewhere the run reads the log itself, or there is no output."""
    return phase in (Phase.RUNNING, Phase.ENDING) and not output_released


class Teardown(Enum):
    """What a run's end does with its pod."""

    # A detach (SIGUSR2): the pod runs on for a successor daemon to adopt.
    LEAVE = "leave"
    # Cancelled after a user stop's delete was accepted: only wait until it is gone.
    AWAIT_GONE = "await_gone"
    # A user stop's delete was accepted and the run ended first: nothing left.
    NOTHING = "nothing"
    # Cancelled otherwise (DELETE, TTL, shutdown): delete with the stop's
    # grace, then wait until it is gone.
    DELETE_AND_WAIT = "delete_and_wait"
    # It ended, or never started: delete at once, nothing in it to finish.
    DELETE_NOW = "delete_now"


def plan_teardown(*, cancelled: bool, detach: bool, stop_accepted: bool) -> Teardown:
    """The teardown of a run that was `cancelled` (a stop, a TTL, a shutdown
    or a detach) or ended on its own; `detach` is the end intent, read only
    when cancelled; `stop_accepted` per the ledger."""
    if cancelled and detach:
        return Teardown.LEAVE
    if stop_accepted:
        return Teardown.AWAIT_GONE if cancelled else Teardown.NOTHING
    return Teardown.DELETE_AND_WAIT if cancelled else Teardown.DELETE_NOW
