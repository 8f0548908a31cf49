"""Backends for the SessionManager tests.

`ShellBackend` is a real (if small) backend: it runs the bundle's entry file
with `/bin/sh` as a real subprocess in its own process group, pipes its output
to the sink, feeds stdin from the handle, and kills the whole group when
cancelled. The others misbehave on purpose, to show that a failing backend
stays inside its own session.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.lowlevel

from runnerd.backend import (
    Exited,
    ImageSpec,
    NullHandle,
    Outcome,
    RunSpec,
    Sink,
    StartError,
    WorkloadHandle,
)
from runnerd.contract import AvailabilityReport, ready, running


@dataclass
class PipeHandle:
    """Stdin through a memory channel (the handle must never block); resizes recorded."""

    stdin: trio.MemorySendChannel[bytes]
    resizes: list[tuple[float, int, int]] = field(default_factory=list)

    def write(self, data: bytes) -> None:
        try:
            self.stdin.send_nowait(data)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    resized: trio.Event = field(default_factory=trio.Event)

    def resize(self, cols: int, rows: int) -> None:
        self.resizes.append((trio.current_time(), cols, rows))
        self.resized.set()
        self.resized = trio.Event()

    async def wait_for_resizes(self, count: int) -> None:
        while len(self.resizes) < count:
            await self.resized.wait()


class ShellBackend:
    """Runs `sh <entry>`; `hold_start=True` blocks before `started` until cancelled."""

    name = "shell"

    def __init__(self, *, hold_start: bool = False) -> None:
        self.hold_start = hold_start
        self.procs: list[trio.Process] = []
        self.handles: list[PipeHandle] = []
        self.spawned = trio.Event()

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(
        self,
        spec: RunSpec,
        sink: Sink,
        *,
        task_status: trio.TaskStatus[WorkloadHandle] = trio.TASK_STATUS_IGNORED,
    ) -> Outcome:
        assert spec.bundle is not None
        script = dict(spec.bundle.files)[spec.bundle.entry]
        sink.progress("boot", "spawning sh")
        proc = await trio.lowlevel.open_process(
            ["/bin/sh", "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={"PATH": "/usr/bin:/bin", **spec.env},
            start_new_session=True,
        )
        self.procs.append(proc)
        self.spawned.set()
        try:
            if self.hold_start:
                await trio.sleep_forever()
            send, receive = trio.open_memory_channel[bytes](math.inf)
            handle = PipeHandle(send)
            self.handles.append(handle)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pump_stdin, proc, receive)
                sink.status(running())
                task_status.started(handle)
                assert proc.stdout is not None
                while chunk := await proc.stdout.receive_some(65536):
                    sink.output(chunk)
                code = await proc.wait()
                nursery.cancel_scope.cancel()
            return Exited(code if code >= 0 else 128 - code)
        finally:
            with trio.move_on_after(5) as cleanup:
                cleanup.shield = True
                if proc.returncode is None:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                await proc.wait()
                for stream in (proc.stdin, proc.stdout):
                    if stream is not None:
                        await stream.aclose()


async def _pump_stdin(proc: trio.Process, receive: trio.MemoryReceiveChannel[bytes]) -> None:
    assert proc.stdin is not None
    async with receive:
        async for data in receive:
            try:
                await proc.stdin.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return


class FailingStartBackend:
    """Cannot create the workload: raises StartError before `started`."""

    name = "failing-start"

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

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        sink.status(running())
        task_status.started(NullHandle())

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
    cancelled). For timing under MockClock and for the sink's filtering."""

    name = "in-process"

    def __init__(
        self, body: Callable[[Sink], Awaitable[Outcome | None]] | None = None
    ) -> None:
        self.body = body
        self.handle = PipeHandle(trio.open_memory_channel[bytes](math.inf)[0])

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        sink.status(running())
        task_status.started(self.handle)
        outcome = await self.body(sink) if self.body is not None else None
        if outcome is None:
            await trio.sleep_forever()
            raise AssertionError("unreachable")
        return outcome


class UnstoppableBackend:
    """Ignores cancellation until the test releases it (a stuck teardown)."""

    name = "unstoppable"

    def __init__(self) -> None:
        self.release = trio.CancelScope()

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        task_status.started(NullHandle())
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

    def __init__(self, **by_image: Any) -> None:
        self.by_image = by_image

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        backend = self.by_image[spec.image.image]
        result: Outcome = await backend.run(spec, sink, task_status=task_status)
        return result
