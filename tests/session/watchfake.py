"""An in-process watch backend for the session core's tests: apps are trio tasks.

`FakeWatchBackend.open_watch` makes a `FakeWatchHost` whose workspace is a
dict (seeded from the bundle, or restored from a `FakeCheckpoint`), and
whose apps are tasks running their entry file, a tiny script:

    echo TEXT      one line of output (stdout on a streams app, the tty otherwise)
    warn TEXT      one line of stderr (a streams app; the tty otherwise)
    exit N         end with code N
    serve          echo each stdin line back, until stopped
    selfwatch      (first line) report the process self-watching, then go on

A missing entry is that generation's `StartError("boot", ...)`, raised before
`started`, as the seam says. The host keeps what a test checks from outside:
every process started (`starts`), how many of one app run at once
(`peak`), resizes, checkpoints taken and discarded, whether the host was
left. `checkpoint_fails` makes every checkpoint fail.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

import trio

from runnerd.backend import Exited, Failed, StartError
from runnerd.backend.watch import (
    AgentLaunch,
    AppLaunch,
    AppSink,
    AppStarted,
    ChangeSet,
    CheckpointFailed,
    OutputStream,
    PlaceGone,
    ProgressReport,
    Published,
    WatchSpec,
    WorkspaceFile,
)
from runnerd.contract import IoMode, PortMapping, RunnerEndpoint
from runnerd.errors import RunnerdError
from runnerd.watch.errors import WatchError


@dataclass
class FakeCheckpoint:
    """A copy of the workspace; `discarded` once the core let go of it."""

    snapshot: dict[str, bytes]
    discarded: bool = False
    key: str | None = None  # set where checkpoints outlive the daemon (`watch_adopt`)

    @property
    def files(self) -> int:
        return len(self.snapshot)

    @property
    def size_bytes(self) -> int:
        return sum(len(data) for data in self.snapshot.values())

    async def discard(self) -> None:
        self.discarded = True
        await trio.lowlevel.checkpoint()

    def saved(self) -> dict[str, object] | None:
        return None if self.key is None else {"fake_checkpoint": self.key}


class FakeHandle:
    def __init__(self) -> None:
        self.send, self.receive = trio.open_memory_channel[bytes](math.inf)
        self.sizes: list[tuple[int, int]] = []

    def write(self, data: bytes) -> None:
        self.send.send_nowait(data)

    def resize(self, cols: int, rows: int) -> None:
        self.sizes.append((cols, rows))


@dataclass
class FakeWatchHost:
    files: dict[str, bytes]
    starts: list[str] = field(default_factory=list)
    running: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)
    handles: dict[str, FakeHandle] = field(default_factory=dict)
    checkpoints: list[FakeCheckpoint] = field(default_factory=list)
    agent_env: dict[str, str] | None = None
    agent_running: bool = False
    left: bool = False
    checkpoint_fails: bool = False
    start_delay_s: float = 0.0  # how long a process takes to start
    published: list[tuple[PortMapping, ...]] = field(default_factory=list)
    reject: dict[int, str] = field(default_factory=dict)  # what `publish` refuses
    route_domain: str = ""  # "": published as the local backend does (host "")
    publish_fails: RunnerdError | None = None
    fixed: tuple[AppLaunch, ...] | None = None  # a fixed app set: the only ones it runs
    kept: dict[str, FakeCheckpoint] | None = None  # the backend's, where they outlive it
    offer_reload: bool = False  # a selfwatch app's AppStarted.reload (each call in `reloads`)
    reloads: list[str] = field(default_factory=list)
    reload_fails: RunnerdError | None = None

    async def list_files(self) -> list[WorkspaceFile]:
        await trio.lowlevel.checkpoint()
        return [
            WorkspaceFile(p, hashlib.sha256(d).hexdigest()) for p, d in sorted(self.files.items())
        ]

    async def read_file(self, path: str) -> bytes:
        await trio.lowlevel.checkpoint()
        if path not in self.files:
            raise WatchError(404, "file_not_found", f"{path!r} is not a file in the workspace")
        return self.files[path]

    async def apply(self, changes: ChangeSet) -> tuple[int, int]:
        await trio.lowlevel.checkpoint()
        for write in changes.writes:
            self.files[write.path] = write.data
        deleted = 0
        for path in changes.deletes:
            deleted += self.files.pop(path, None) is not None
        return len(changes.writes), deleted

    async def checkpoint(self) -> FakeCheckpoint:
        await trio.lowlevel.checkpoint()
        if self.checkpoint_fails:
            raise CheckpointFailed("the workspace is too large to checkpoint")
        checkpoint = FakeCheckpoint(dict(self.files))
        if self.kept is not None:  # findable again after a restart
            checkpoint.key = f"cp-{len(self.kept)}"
            self.kept[checkpoint.key] = checkpoint
        self.checkpoints.append(checkpoint)
        return checkpoint

    async def publish(self, ports: tuple[PortMapping, ...]) -> Published:
        """Every port published (host "", or `<port>.<route_domain>` with
        one), but those in `reject` (port → why); each call kept in
        `published`."""
        await trio.lowlevel.checkpoint()
        self.published.append(ports)
        if self.publish_fails is not None:
            raise self.publish_fails
        endpoints: tuple[RunnerEndpoint, ...] = tuple(
            {"host": self._route_host(p.port), "port": p.port, "protocol": p.protocol}
            for p in ports
            if p.port not in self.reject
        )
        rejected = tuple((p.port, self.reject[p.port]) for p in ports if p.port in self.reject)
        return Published(endpoints, rejected)

    async def _reload(self, name: str) -> None:
        await trio.lowlevel.checkpoint()
        if self.reload_fails is not None:
            raise self.reload_fails
        self.reloads.append(name)

    def _route_host(self, port: int) -> str:
        return f"{port}.{self.route_domain}" if self.route_domain else ""

    async def run_app(
        self,
        app: AppLaunch,
        sink: AppSink,
        *,
        task_status: trio.TaskStatus[AppStarted] = trio.TASK_STATUS_IGNORED,
    ) -> Exited | Failed:
        script = self.files.get(app.entry)
        await trio.sleep(self.start_delay_s)
        if self.fixed is not None and app not in self.fixed:
            # A place with a fixed app set runs exactly what it was opened with.
            raise StartError("boot", f"app {app!r} is not in the place's app set")
        if script is None:
            raise StartError("boot", f"entry {app.entry!r} is not a file in the workspace")
        handle = FakeHandle()
        self.handles[app.name] = handle
        self.starts.append(app.name)
        self.running[app.name] = self.running.get(app.name, 0) + 1
        self.peak[app.name] = max(self.peak.get(app.name, 0), self.running[app.name])
        try:
            self_watching = script.startswith(b"selfwatch")
            reload = (
                partial(self._reload, app.name) if self_watching and self.offer_reload else None
            )
            task_status.started(AppStarted(handle, self_watching=self_watching, reload=reload))
            return await _run_script(script.decode(), app.io, sink, handle)
        finally:
            self.running[app.name] -= 1

    async def run_agent(
        self,
        agent: AgentLaunch,
        sink: AppSink,
        *,
        task_status: trio.TaskStatus[AppStarted] = trio.TASK_STATUS_IGNORED,
    ) -> Exited | Failed:
        await trio.lowlevel.checkpoint()
        self.agent_env = dict(agent.env)
        self.agent_running = True
        try:
            task_status.started(AppStarted(FakeHandle()))
            await trio.sleep_forever()
        finally:
            self.agent_running = False
        raise AssertionError("unreachable")  # pragma: no cover


async def _run_script(script: str, io: IoMode, sink: AppSink, handle: FakeHandle) -> Exited:
    out = OutputStream.STDOUT if io == "streams" else OutputStream.TTY
    err = OutputStream.STDERR if io == "streams" else OutputStream.TTY
    for line in script.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "echo":
            sink.output(rest.encode() + b"\n", out)
        elif word == "warn":
            sink.output(rest.encode() + b"\n", err)
        elif word == "exit":
            return Exited(int(rest or "0"))
        elif word == "serve":
            async for data in handle.receive:
                sink.output(data, out)
        await trio.lowlevel.checkpoint()
    return Exited(0)


class FakeWatchBackend:
    """The `Backend` watch half over `FakeWatchHost`s; `hosts` in open order."""

    name = "fake-watch"
    notices: tuple[str, ...] = ()
    detach_supported = False
    watch_io: tuple[IoMode, ...] = ("tty", "streams")
    watch_fixed_apps = False  # True: a host runs exactly `spec.apps` (set per test)
    watch_adopt = False  # True: places left on a detach, adopted by the next manager

    def __init__(self) -> None:
        self.hosts: list[FakeWatchHost] = []
        self.specs: list[WatchSpec] = []
        self.checkpoint_fails = False
        self.open_fails: StartError | None = None
        self.open_delay_s = 0.0  # how long entering a place takes
        # What each new host's `publish` does (see FakeWatchHost).
        self.reject: dict[int, str] = {}
        self.route_domain = ""
        self.publish_fails: RunnerdError | None = None
        self.offer_reload = False
        # Adoption: the places a detach left (by session id), the specs
        # `adopt_watch` was given, the checkpoints that outlive a manager.
        self.places: dict[str, FakeWatchHost] = {}
        self.adopted: list[WatchSpec] = []
        self.kept: dict[str, FakeCheckpoint] = {}

    @asynccontextmanager
    async def open_watch(
        self, spec: WatchSpec, progress: ProgressReport
    ) -> AsyncIterator[FakeWatchHost]:
        await trio.sleep(self.open_delay_s)
        if self.open_fails is not None:
            raise self.open_fails
        self.specs.append(spec)
        if spec.checkpoint is not None:
            assert isinstance(spec.checkpoint, FakeCheckpoint)
            files = dict(spec.checkpoint.snapshot)
        else:
            bundle = spec.creation.bundle
            assert bundle is not None
            files = {path: text.encode() for path, text in bundle.files}
        progress.progress("provision", "workspace ready", True)
        host = FakeWatchHost(
            files,
            checkpoint_fails=self.checkpoint_fails,
            reject=dict(self.reject),
            route_domain=self.route_domain,
            publish_fails=self.publish_fails,
            fixed=spec.apps if self.watch_fixed_apps else None,
            offer_reload=self.offer_reload,
            kept=self.kept if self.watch_adopt else None,
        )
        self.hosts.append(host)
        async with self._entered(spec, host, progress):
            yield host

    @asynccontextmanager
    async def _entered(
        self, spec: WatchSpec, host: FakeWatchHost, progress: ProgressReport
    ) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if self.watch_adopt and progress.detaching():
                self.places[spec.session_id] = host  # left for a successor
            else:
                host.left = True

    @asynccontextmanager
    async def adopt_watch(
        self, spec: WatchSpec, progress: ProgressReport
    ) -> AsyncIterator[FakeWatchHost]:
        await trio.lowlevel.checkpoint()
        host = self.places.pop(spec.session_id, None)
        if host is None:
            raise PlaceGone(f"no place for session {spec.session_id}")
        self.adopted.append(spec)
        async with self._entered(spec, host, progress):
            yield host

    def load_checkpoint(self, saved: dict[str, object]) -> FakeCheckpoint | None:
        found = self.kept.get(str(saved.get("fake_checkpoint")))
        return None if found is None or found.discarded else found

    async def recover(self) -> list[object]:
        await trio.lowlevel.checkpoint()
        return []
