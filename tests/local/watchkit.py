"""What the local backend's watch tests share: a test `AppSink`, spec
builders, a generation run in the test's nursery, and what a session left
behind (processes and files)."""

from __future__ import annotations

import itertools
import os
import socket
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from runnerd.backend import BundleSpec, CreationSpec, Exited, ImageSpec, SessionIdentity
from runnerd.backend.watch import (
    AppLaunch,
    AppStarted,
    OutputStream,
    WatchHost,
    WatchSpec,
)
from runnerd.contract import RunPhase
from tests.local.specs import LIMITS

_ids = itertools.count(1)


class Sink:
    """An `AppSink` that keeps what one process wrote, per stream."""

    def __init__(self) -> None:
        self.streams: dict[OutputStream, bytearray] = {s: bytearray() for s in OutputStream}
        self.chunks: list[tuple[OutputStream, bytes]] = []
        self.stopped_code: int | None = None  # `exited`: a stopped process's code
        self._changed = trio.Event()

    def output(self, data: bytes, stream: OutputStream = OutputStream.TTY) -> None:
        self.chunks.append((stream, data))
        self.streams[stream] += data
        self._changed.set()
        self._changed = trio.Event()

    def output_lost(self) -> None:
        raise AssertionError("no output may be lost here")

    def progress(self, phase: RunPhase, message: str, done: bool | None = None) -> None:
        pass

    async def drain(self, *steps: Callable[[], Awaitable[object]]) -> bool:
        for step in steps:
            await step()
        return True

    def exited(self, code: int) -> None:
        self.stopped_code = code

    def text(self, stream: OutputStream = OutputStream.TTY) -> str:
        return self.streams[stream].decode(errors="replace")

    async def wait_for(self, needle: str, stream: OutputStream = OutputStream.TTY) -> None:
        while needle not in self.text(stream):
            await self._changed.wait()


class Progress:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def progress(self, phase: RunPhase, message: str, done: bool | None = None) -> None:
        self.messages.append(message)


def watch_spec(
    files: dict[str, str],
    *,
    image: str = "python",
    env: dict[str, str] | None = None,
    checkpoint: object = None,
    inspect: bool = False,
) -> WatchSpec:
    bundle = BundleSpec(
        entry=next(iter(files)),
        files=tuple((path, textwrap.dedent(text)) for path, text in files.items()),
    )
    return WatchSpec(
        identity=SessionIdentity(
            session_id=f"watch{next(_ids):07d}", limits=LIMITS, inspect=inspect, created_at=0.0
        ),
        creation=CreationSpec(
            image=ImageSpec(image=image, pull_policy="missing"), env=env or {}, bundle=bundle
        ),
        checkpoint=checkpoint,  # type: ignore[arg-type]
    )


@asynccontextmanager
async def running(
    host: WatchHost, app: AppLaunch, sink: Sink
) -> AsyncIterator[tuple[AppStarted, trio.CancelScope, list[Exited]]]:
    """`app` running in a nursery of the test's; cancelled on leaving."""
    outcome: list[Exited] = []

    async def run(task_status: trio.TaskStatus[AppStarted]) -> None:
        result = await host.run_app(app, sink, task_status=task_status)
        assert isinstance(result, Exited)
        outcome.append(result)

    async with trio.open_nursery() as nursery:
        started = await nursery.start(run)
        yield started, nursery.cancel_scope, outcome
        nursery.cancel_scope.cancel()


def session_pids(workdir: Path, session_id: str) -> list[int]:
    """Every host process whose cwd is in the session's directory."""
    root = str(workdir / session_id)
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cwd = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                continue
            if cwd == root or cwd.startswith(root + "/"):
                found.append(int(entry))
    return found


def leftovers(workdir: Path) -> list[str]:
    """What is left in the workdir but the (empty) trash."""
    if not workdir.exists():
        return []
    left = [name for name in os.listdir(workdir) if name != ".trash"]
    trash = workdir / ".trash"
    if trash.exists():
        left += [f".trash/{name}" for name in os.listdir(trash)]
    return left


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
