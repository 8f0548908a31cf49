"""`Sink.terminal_size`: the size a workload that does not exist yet starts with.

Timing under `MockClock` (autojump): the window counts from the session's
creation, a size known before the call ends it at once, one arriving during
it ends it then, and a stop during it ends the run before anything started.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from runnerd.backend import Exited, ImageSpec, Outcome, RunSpec, Sink, Started
from runnerd.contract import AvailabilityReport, ready

from .backends import NullHandle
from .test_manager import build_spec, open_manager, status_kinds, wait_terminal

WINDOW_S = 5.0


class SizeAskingBackend:
    """Asks for the first size before it "spawns", and records the answer."""

    name = "size-asking"
    notices: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.answers: list[tuple[float, tuple[int, int] | None]] = []

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        size = await sink.terminal_size(WINDOW_S)
        self.answers.append((trio.current_time(), size))
        task_status.started(Started(NullHandle()))
        return Exited(0)


async def test_a_size_given_before_the_spawn_is_had_at_once(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0
    backend = SizeAskingBackend()
    async with open_manager(backend) as manager:
        t0 = trio.current_time()
        session = manager.start(build_spec())
        session.resize(132, 43)  # as the POST's x-runnerd-terminal-size does
        await wait_terminal(session)
    assert backend.answers == [(t0, (132, 43))]


async def test_without_a_size_the_window_ends_the_wait_with_none(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0
    backend = SizeAskingBackend()
    async with open_manager(backend) as manager:
        t0 = trio.current_time()
        session = manager.start(build_spec())
        await wait_terminal(session)
    [(at, size)] = backend.answers
    assert size is None
    assert t0 + WINDOW_S - 0.5 <= at <= t0 + WINDOW_S  # from creation (a wall-clock instant)
    assert status_kinds(session) == ["starting", "running", "exited"]


async def test_a_resize_during_the_wait_ends_it_then(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = 0
    backend = SizeAskingBackend()
    async with open_manager(backend) as manager:
        t0 = trio.current_time()
        session = manager.start(build_spec())
        await trio.sleep(1)
        assert session.status == {"kind": "starting"}  # truthful while it waits
        session.resize(100, 30)
        await wait_terminal(session)
    assert backend.answers == [(t0 + 1, (100, 30))]


async def test_a_stop_during_the_wait_ends_the_run_before_it_started(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0
    backend = SizeAskingBackend()
    async with open_manager(backend) as manager:
        session = manager.start(build_spec())
        await trio.sleep(1)
        await manager.stop(session.id)
        await wait_terminal(session)
    assert backend.answers == []
    assert status_kinds(session) == ["starting", "stopped"]
