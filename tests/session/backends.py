"""Test backends for the SessionManager tests, where the real local backend
cannot show the behaviour under test.

- `HeldStartBackend` spawns a real process and then never finishes starting
  (never calls `started`) until cancelled, when it kills the process group:
  a DELETE that lands while the workload is being created.
- `InProcessBackend` is a coroutine workload with a recording handle, for
  fake-time tests (resize coalescing, exit-TTL expiry), sink filtering and
  the core's watchers of the address it reports.
- `FailingStartBackend`, `CrashingBackend`, `UnstoppableBackend` misbehave on
  purpose, to show that a failing backend stays inside its own session.
- `RoutingBackend` lets sessions of different kinds share one manager.
"""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.lowlevel

from runnerd.backend import (
    ImageSpec,
    Outcome,
    RunSpec,
    Sink,
    Started,
    StartError,
    WorkloadAddress,
)
from runnerd.contract import AvailabilityReport, ready


class NullHandle:
    """A handle for a workload that has no terminal: both calls do nothing."""

    def write(self, data: bytes) -> None:
        return None

    def resize(self, cols: int, rows: int) -> None:
        return None


@dataclass
class PipeHandle:
    """Stdin into a memory channel (a handle must never block); resizes recorded
    with the trio time they arrived."""

    stdin: trio.MemorySendChannel[bytes]
    resizes: list[tuple[float, int, int]] = field(default_factory=list)
    resized: trio.Event = field(default_factory=trio.Event)

    def write(self, data: bytes) -> None:
        try:
            self.stdin.send_nowait(data)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    def resize(self, cols: int, rows: int) -> None:
        self.resizes.append((trio.current_time(), cols, rows))
        self.resized.set()
        self.resized = trio.Event()

    async def wait_for_resizes(self, count: int) -> None:
        while len(self.resizes) < count:
            await self.resized.wait()


class HeldStartBackend:
    """Spawns `sh -c <entry contents>` in its own process group, then blocks
    before `started` until cancelled; teardown kills the group and reaps it."""

    name = "held-start"
    notices: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.procs: list[trio.Process] = []
        self.spawned = trio.Event()

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        assert spec.bundle is not None
        script = dict(spec.bundle.files)[spec.bundle.entry]
        proc = await trio.lowlevel.open_process(
            ["/bin/sh", "-c", script], env={"PATH": "/usr/bin:/bin"}, start_new_session=True
        )
        self.procs.append(proc)
        self.spawned.set()
        try:
            await trio.sleep_forever()
        finally:
            with trio.move_on_after(5) as cleanup:
                cleanup.shield = True
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                await proc.wait()
        raise AssertionError("unreachable")


class FailingStartBackend:
    """Cannot create the workload: raises StartError before `started`."""

    name = "failing-start"
    notices: tuple[str, ...] = ()

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        await trio.lowlevel.checkpoint()
        try:
            raise OSError("registry.internal:5000 refused the connection")
        except OSError as exc:
            raise StartError("provision", "image telorun/nope could not be pulled") from exc


class CrashingBackend:
    """A buggy backend: reports running, then raises a group from its own nursery."""

    name = "crashing"
    notices: tuple[str, ...] = ()

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        task_status.started(Started(NullHandle()))

        async def crash() -> None:
            await trio.lowlevel.checkpoint()
            raise KeyError("pod.status.containerStatuses")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(crash)
            await trio.sleep_forever()
        raise AssertionError("unreachable")


class InProcessBackend:
    """A workload that is a coroutine, not a process: `body(sink)` runs after
    `running` and `started`; its return is the outcome (None: run until
    cancelled). For timing under MockClock, for the sink's filtering, and
    (with `address`: where it says it listens) for the core's watchers."""

    name = "in-process"
    notices: tuple[str, ...] = ()

    def __init__(
        self,
        body: Callable[[Sink], Awaitable[Outcome | None]] | None = None,
        *,
        address: WorkloadAddress | None = None,
    ) -> None:
        self.body = body
        self.address = address
        self.handle = PipeHandle(trio.open_memory_channel[bytes](math.inf)[0])

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        task_status.started(Started(self.handle, address=self.address))
        outcome = await self.body(sink) if self.body is not None else None
        if outcome is None:
            await trio.sleep_forever()
            raise AssertionError("unreachable")
        return outcome


class UnstoppableBackend:
    """Ignores cancellation until the test releases it (a stuck teardown)."""

    name = "unstoppable"
    notices: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.release = trio.CancelScope()

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        task_status.started(Started(NullHandle()))
        try:
            await trio.sleep_forever()
        finally:
            with self.release:
                self.release.shield = True
                await trio.sleep_forever()
        raise AssertionError("unreachable")


class RoutingBackend:
    """Picks a backend by `spec.image.image`, so unlike sessions share one manager."""

    name = "routing"
    notices: tuple[str, ...] = ()

    def __init__(self, **by_image: Any) -> None:
        self.by_image = by_image

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        backend = self.by_image[spec.image.image]
        result: Outcome = await backend.run(spec, sink, task_status=task_status)
        return result


class BrokenTeardownBackend:
    """Runs until cancelled, then fails in its own teardown (a backend bug)."""

    name = "broken-teardown"
    notices: tuple[str, ...] = ()

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        task_status.started(Started(NullHandle()))
        try:
            await trio.sleep_forever()
        finally:
            raise RuntimeError("teardown could not delete the pod")
        raise AssertionError("unreachable")
