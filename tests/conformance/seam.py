"""A transparent wrapper at the backend seam that records what crosses it.

Owns `ObservedBackend`: the session manager drives it exactly as it drives
the backend inside (every call forwarded as is), while each `run()` is
logged (`RunLog`: the order of `started`, output and statuses, the handle
reported, how the run ended) and checked against the seam's promises as it
happens: nothing reaches the sink before `started`, `started` once, and a
`StartError` only before it (`RunLog.broken` lists what was not kept).

The one `Sink` this suite builds is `observe_sink`'s: what it does not log it
forwards by name, so it follows the `Sink` protocol as that changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import trio

from runnerd.backend import (
    Backend,
    ImageSpec,
    Outcome,
    Recovered,
    RunSpec,
    Sink,
    Started,
    StartError,
    WorkloadHandle,
)
from runnerd.contract import AvailabilityReport, RunStatus


@dataclass
class RunLog:
    """One `run()` as the seam saw it."""

    spec: RunSpec
    # What crossed, in order: "started", "output", "status:<kind>".
    calls: list[str] = field(default_factory=list)
    output: bytearray = field(default_factory=bytearray)
    handle: WorkloadHandle | None = None
    outcome: Outcome | None = None
    raised: BaseException | None = None
    broken: list[str] = field(default_factory=list)
    # Set when the backend asks for the terminal's first size: its workload
    # is being created (the local backend asks once all but the spawn is done).
    asked_size: trio.Event = field(default_factory=trio.Event)

    @property
    def started(self) -> bool:
        return "started" in self.calls

    def note(self, call: str) -> None:
        if call != "started" and not self.started:
            self.broken.append(f"{call} before started")
        if call == "started" and self.started:
            self.broken.append("started twice")
        self.calls.append(call)


class _ObservedSink:
    """The manager's sink, with what the backend reports through it logged."""

    def __init__(self, sink: Sink, log: RunLog) -> None:
        self._sink = sink
        self._log = log

    def status(self, status: RunStatus) -> None:
        self._log.note(f"status:{status['kind']}")
        self._sink.status(status)

    def output(self, data: bytes) -> None:
        self._log.note("output")
        self._log.output += data
        self._sink.output(data)

    async def terminal_size(self, wait_s: float) -> tuple[int, int] | None:
        self._log.asked_size.set()
        return await self._sink.terminal_size(wait_s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sink, name)


def observe_sink(sink: Sink, log: RunLog) -> Sink:
    """`sink` with its status and output calls logged in `log`."""
    return cast(Sink, _ObservedSink(sink, log))


class _ObservedStatus:
    """The manager's `task_status`, with `started` logged before it is passed on."""

    def __init__(self, task_status: Any, log: RunLog) -> None:
        self._task_status = task_status
        self._log = log

    def started(self, value: Started | None = None) -> None:
        self._log.note("started")
        if isinstance(value, Started):
            self._log.handle = value.handle
        self._task_status.started(value)


class ObservedBackend:
    """`backend`, with each run logged in `runs` (by session id, latest run)."""

    def __init__(self, backend: Backend) -> None:
        self.inner = backend
        self.runs: dict[str, RunLog] = {}
        self.name = backend.name
        self.notices = backend.notices
        self.detach_supported = backend.detach_supported
        self._run_began = trio.Event()

    async def recover(self) -> list[Recovered]:
        return await self.inner.recover()

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return await self.inner.probe(image)

    async def run(
        self, spec: RunSpec, sink: Sink, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> Outcome:
        log = self.runs[spec.session_id] = RunLog(spec)
        self._run_began.set()
        self._run_began = trio.Event()
        try:
            outcome = await self.inner.run(
                spec, observe_sink(sink, log), task_status=_ObservedStatus(task_status, log)
            )
        except BaseException as exc:
            log.raised = exc
            if start_error(exc) is not None and log.started:
                log.broken.append("StartError after started")
            raise
        log.outcome = outcome
        return outcome

    async def wait_run(self, session_id: str) -> RunLog:
        """The run of `session_id` once the manager has called `run()`."""
        while session_id not in self.runs:
            await self._run_began.wait()
        return self.runs[session_id]


def start_error(exc: BaseException | None) -> StartError | None:
    """The `StartError` `exc` is, or the first in its groups (a backend's
    nursery wraps what it raises; the manager looks inside)."""
    if isinstance(exc, BaseExceptionGroup):
        matched, _ = exc.split(StartError)
        first: BaseException | None = matched
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        return first if isinstance(first, StartError) else None
    return exc if isinstance(exc, StartError) else None


def is_cancellation(exc: BaseException | None) -> bool:
    """`trio.Cancelled`, alone or in groups of nothing else (trio's nurseries)."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)
