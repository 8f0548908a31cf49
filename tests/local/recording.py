"""A Sink that records what a backend reports, and a way to run a backend.

The Sink is the seam the session machinery implements; recording calls on it
is how these tests watch the backend from the outside. It is also the
`Report` the core's watchers of the workload's address write to
(`runnerd.workload.supervision`), which `start_session` starts as the
manager does, so reachability and the debug relay are seen as a client
would see them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from runnerd.backend import Backend, Outcome, RunSpec, Started
from runnerd.contract import running
from runnerd.session.sink import DRAIN_TIMEOUT_S
from runnerd.workload.supervision import supervise, tcp_ports


class RecordingSink:
    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []
        self.progress_calls: list[tuple[str, str, bool | None]] = []
        self.out = bytearray()
        self.output_calls = 0
        self.largest_output = 0
        self.reachability_calls: list[tuple[int, str]] = []
        self.frames: list[dict[str, Any]] = []
        self.size: tuple[int, int] | None = None  # what `terminal_size` answers
        self._lot = trio.lowlevel.ParkingLot()

    def _changed(self) -> None:
        self._lot.unpark_all()

    def status(self, status: Any) -> None:
        self.statuses.append(dict(status))
        self._changed()

    def progress(self, phase: Any, message: str, done: bool | None = None) -> None:
        self.progress_calls.append((phase, message, done))
        self._changed()

    def output(self, data: bytes) -> None:
        assert isinstance(data, bytes) and data
        self.out += data
        self.output_calls += 1
        self.largest_output = max(self.largest_output, len(data))
        self._changed()

    def output_lost(self) -> None:
        self.out += b"<lost>"  # where it was reported, among the bytes
        self._changed()

    def reachability(self, port: int, state: Any) -> None:
        self.reachability_calls.append((port, state))
        self._changed()

    def debug(self, frame: dict[str, Any]) -> None:
        self.frames.append(frame)
        self._changed()

    async def terminal_size(self, wait_s: float) -> tuple[int, int] | None:
        await trio.lowlevel.checkpoint()
        return self.size  # at once: None is the backend's default size

    async def drain(self, *steps: Callable[[], Awaitable[object]]) -> bool:
        # The core's budget, as the manager's sink applies it.
        with trio.move_on_after(DRAIN_TIMEOUT_S):
            for step in steps:
                await step()
            return True
        return False

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        """Return once `condition()` holds (re-checked after every report)."""
        while not condition():
            await self._lot.park()

    async def wait_output(self, needle: bytes) -> None:
        await self.wait_for(lambda: needle in self.out)


@dataclass
class RunningSession:
    scope: trio.CancelScope
    handle: Any = None
    done: trio.Event = field(default_factory=trio.Event)
    outcome: Outcome | None = None

    async def result(self) -> Outcome | None:
        await self.done.wait()
        return self.outcome


async def start_session(
    nursery: trio.Nursery, backend: Backend, spec: RunSpec, sink: RecordingSink
) -> RunningSession:
    """Start `backend.run` the way the session machinery does (in its own
    cancel scope); return once the workload exists. StartError propagates."""

    async def runner(*, task_status: trio.TaskStatus[RunningSession]) -> None:
        session = RunningSession(scope=trio.CancelScope())

        async def inner(*, task_status: trio.TaskStatus[Started]) -> None:
            with session.scope:
                session.outcome = await backend.run(spec, sink, task_status=task_status)
            inner_nursery.cancel_scope.cancel()  # the watchers end with the run

        try:
            async with trio.open_nursery() as inner_nursery:
                started: Started = await inner_nursery.start(inner)
                session.handle = started.handle
                # As the manager does: `running` once the handle is in place,
                # then the core's watchers of its address, in the run's nursery.
                sink.status(running(list(started.endpoints), started.inspect_url))
                if started.address is not None:
                    ports = tcp_ports(spec.ports)
                    inner_nursery.start_soon(supervise, started.address, ports, sink)
                task_status.started(session)
        finally:
            session.done.set()

    result: RunningSession = await nursery.start(runner)
    return result
