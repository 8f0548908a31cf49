"""Per-app generations and their `run` events: a state machine. Pure.

Owns `AppRuns` (one app's counter and its open generation), `SessionRuns`
(every app of a session, in order, kept across `PUT /apps`); the `run`
event shapes are the wire's (`runnerd.contract`, re-exported here). Each
app counts its runs 1, 2, … (never reused; kept across restarts,
suspend/resume and `PUT /apps`). A generation starts with
`started {trigger}` and ends with `completed {code, durationMs}` (its
process exited) or `failed {reason}` (it could not start).

The machine, per app (h11's way: the transitions are the table below, and
a call that is not in it is the caller's bug, `RunStateError`):

    phase   call                     event                 next phase
    IDLE    start(trigger, now)      started (gen N+1)     OPEN
    OPEN    complete(code, now)      completed (gen N)     IDLE
    OPEN    fail(reason, now)        failed (gen N)        IDLE
    OPEN    abandon()                none                  IDLE
    IDLE    complete / fail          none (returns None)   IDLE
    OPEN    start                    RunStateError         OPEN

so the contract's guarantees hold by construction: `run` events in
generation order; a generation's `started` before its `completed`; N ended
before N+1's event; and, with the IO side starting a process only after
`start` and calling `start` only in IDLE (after the previous process was
stopped and its `completed` taken), at most one process of an app at a
time. `abandon` is for a session that stops, fails or suspends: its open
generations may end without `completed`. A late exit after `abandon` (or a
double report) is a no-op rather than an error: the IO side reports what
it sees, and an exit racing a stop is normal.

`now` is a monotonic clock in seconds; `durationMs` is whole milliseconds,
never negative.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

# The event shapes are the wire's (`runnerd.contract`); re-exported here,
# where they were first defined, for the machine's callers.
from runnerd.contract import AppRunEvent as AppRunEvent
from runnerd.contract import RunCompletedEvent as RunCompletedEvent
from runnerd.contract import RunFailedEvent as RunFailedEvent
from runnerd.contract import RunStartedEvent as RunStartedEvent
from runnerd.contract import RunTrigger as RunTrigger

__all__ = [
    "AppRunEvent",
    "AppRuns",
    "RunCompletedEvent",
    "RunFailedEvent",
    "RunPhase",
    "RunStartedEvent",
    "RunStateError",
    "RunTrigger",
    "SessionRuns",
]


class RunPhase(enum.Enum):
    IDLE = "idle"  # no generation open: before the first, or after one ended
    OPEN = "open"  # generation `generation` started and has not ended


class RunStateError(RuntimeError):
    """A transition the table does not have (a second `start` while a
    generation is open): runnerd's bug, never a client's."""


class AppRuns:
    """One app's generations. `generation` is the latest (0 before the first)."""

    def __init__(self, app: str, generation: int = 0) -> None:
        self.app = app
        self.generation = generation
        self.phase = RunPhase.IDLE
        self._started_at: float | None = None

    def adopt(self, generation: int, open_: bool, now: float) -> None:
        """Continue where a previous daemon left this app: its counter, and
        its latest generation still open (`open_`: its process runs on;
        its duration counts from `now`). Only before anything else."""
        self.generation = generation
        self.phase, self._started_at = (RunPhase.OPEN, now) if open_ else (RunPhase.IDLE, None)

    def start(self, trigger: RunTrigger, now: float) -> RunStartedEvent:
        """Open generation N+1.

        Raises:
            RunStateError: a generation is open (end it first).
        """
        if self.phase is RunPhase.OPEN:
            raise RunStateError(
                f"app {self.app!r}: generation {self.generation} is still open; end it first"
            )
        self.generation += 1
        self.phase, self._started_at = RunPhase.OPEN, now
        return {
            "type": "run",
            "app": self.app,
            "generation": self.generation,
            "phase": "started",
            "trigger": trigger,
        }

    def complete(self, code: int, now: float) -> RunCompletedEvent | None:
        """The open generation's process exited with `code` (a signal N as
        128+N); None when none is open."""
        started_at = self._close()
        if started_at is None:
            return None
        return {
            "type": "run",
            "app": self.app,
            "generation": self.generation,
            "phase": "completed",
            "code": code,
            "durationMs": max(0, round((now - started_at) * 1000)),
        }

    def fail(self, reason: str) -> RunFailedEvent | None:
        """The open generation could not start (`reason` is client-safe);
        None when none is open."""
        if self._close() is None:
            return None
        return {
            "type": "run",
            "app": self.app,
            "generation": self.generation,
            "phase": "failed",
            "reason": reason,
        }

    def start_failed(
        self, trigger: RunTrigger, reason: str, now: float
    ) -> tuple[RunStartedEvent, RunFailedEvent]:
        """A generation that could not start: the pair `started`, `failed`.

        Raises:
            RunStateError: a generation is open.
        """
        started = self.start(trigger, now)
        failed = self.fail(reason)
        assert failed is not None  # just opened
        return started, failed

    def abandon(self) -> None:
        """End the open generation (if any) without an event: the session
        stopped, failed or suspended under it."""
        self._close()

    def _close(self) -> float | None:
        """IDLE again; the open generation's start time, None if none was open."""
        if self.phase is RunPhase.IDLE:
            return None
        started_at, self._started_at = self._started_at, None
        self.phase = RunPhase.IDLE
        return started_at


# How many dropped apps' counters a session remembers (a name given again
# continues from its last generation); past it, the longest-dropped are
# forgotten, so a client renaming apps forever cannot grow the session.
RETIRED_KEPT = 1024


class SessionRuns:
    """Every app's `AppRuns`, in the session's order, and the counters of
    apps dropped from it (`retired`), by name."""

    def __init__(self, names: Iterable[str]) -> None:
        self.apps: dict[str, AppRuns] = {name: AppRuns(name) for name in names}
        self.retired: dict[str, AppRuns] = {}

    def replace(self, names: Iterable[str]) -> list[AppRuns]:
        """`PUT /apps`: the set becomes `names`, in that order. Apps kept by
        name keep their counters, and so does a name dropped earlier and
        given again (generations are never reused per name); new names start
        from 0. Returns the apps dropped (the IO side stops their processes;
        their open generation, if any, is abandoned here)."""
        old, self.apps = self.apps, {}
        for name in names:
            kept = old.pop(name) if name in old else self.retired.pop(name, None)
            self.apps[name] = kept or AppRuns(name)
        for gone in old.values():
            gone.abandon()
            self.retired[gone.app] = gone
        while len(self.retired) > RETIRED_KEPT:
            del self.retired[next(iter(self.retired))]
        return list(old.values())

    def abandon_all(self) -> None:
        """The session stopped, failed or suspended: no generation is open."""
        for runs in self.apps.values():
            runs.abandon()
