"""The watch half of the backend seam: one watch session's place on a backend.

A watch session (the contract's "Watch sessions") is a workspace with one
or more apps over it. The core (`runnerd.session`) owns everything a
client sees of it: apps and their generations, `run` events, the restart
debounce, the reload budget, idle suspend, checkpoints kept, resume. A
backend owns only the places and the processes:

- `WatchBackend.open_watch(spec, progress)` is an async context manager:
  entering it makes the session's workspace (seeded from the bundle, or
  restored from `spec.checkpoint` on a resume) and its sandbox, and yields
  the `WatchHost`; leaving it stops every process still running in it and
  removes the workspace and the sandbox (after a suspend, the checkpoint is
  what is left). Entering raises `StartError` when the session cannot come
  up (the session then ends `failed "<stage>: <message>"`).
- `WatchHost.run_app(app, sink)` runs ONE generation of one app: it is
  started in a nursery of the core's (`nursery.start`), reports
  `task_status.started(AppStarted(...))` once the process exists, and
  returns `Exited(code)` when the process exits on its own (after its
  output is through: `AppSink.drain`). Cancellation stops it the way a
  DELETE stops a run session (SIGTERM, then SIGKILL after the backend's
  stop grace) and reports its exit code (`AppSink.exited`) before
  `Cancelled` propagates. A generation that cannot start
  (the entry is not a file in the workspace, the runtime cannot be spawned)
  raises `StartError` before `started`: the core reports it as the pair
  `run started` + `run failed {reason: message}`; the session goes on.
  At most one `run_app` per app name runs at a time (the core's rule); apps
  of one session run concurrently, sharing the session's sandbox (its
  namespaces, as containers share a pod), each with the workspace as cwd.
- An app whose runtime watches the workspace by itself (`AppStarted.
  self_watching`, e.g. `telo run --watch`) is started once and left running
  across changes; the core writes the files and projects its generations
  from its debug stream (`Kernel.*` frames) instead of restarting it.
- `WatchHost.run_agent(agent, sink)` is the same for the co-resident agent
  (the catalog image's own command, `WORKSPACE_DIR` and its token in env).
- The workspace operations (`list_files`, `read_file`, `apply`,
  `checkpoint`) run on the live workspace; refusals are `WatchError`s with
  their contract answer (`404 file_not_found`, `413 file_too_large`,
  `413 payload_too_large`, `409 path_conflict`), IO failures a
  `RunnerdError` with a client-safe message.

Paths given to a host are already normal (`runnerd.watch.paths`); a change
set is already normalised (`runnerd.watch.changes.normalise_change_set`,
which builds the `ChangeSet` defined here).

May import what `runnerd.backend` may (`contract`, `errors`, `watch`'s pure
modules for their data types).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from runnerd.backend.spec import CreationSpec, ImageSpec, SessionIdentity
from runnerd.contract import IoMode, PortMapping, RunPhase

if TYPE_CHECKING:
    import trio

    from runnerd.backend.workload import Exited, Failed, WorkloadAddress, WorkloadHandle

__all__ = [
    "AgentLaunch",
    "AppLaunch",
    "AppSink",
    "AppStarted",
    "ChangeSet",
    "Checkpoint",
    "CheckpointFailed",
    "OutputStream",
    "ProgressReport",
    "WatchBackend",
    "WatchHost",
    "WatchSpec",
    "Write",
    "WorkspaceFile",
]


class OutputStream(enum.IntEnum):
    """Which stream a chunk of an app's output came from: the stream byte of
    a watch session's `/io` frame. TTY for a `tty` app's PTY; STDOUT and
    STDERR for a `streams` app's pipes (a chunk never mixes them)."""

    TTY = 0
    STDOUT = 1
    STDERR = 2


@dataclass(frozen=True)
class WorkspaceFile:
    """One listed file of `GET /workspace`: its normal path and the
    lowercase hex SHA-256 of its bytes."""

    path: str
    hash: str


@dataclass(frozen=True)
class AppLaunch:
    """One app as one generation runs it.

    `entry`: its entry file, a normal workspace path (it need not exist: a
    missing entry is that generation's `StartError`). `slot`: a small
    number, unique among the session's apps that run at the same time and
    stable for an app while it stays in the set, for what must differ per
    app in a shared sandbox (its inspect port, say: 9230 + slot)."""

    name: str
    entry: str
    io: IoMode = "tty"
    ports: tuple[PortMapping, ...] = ()
    slot: int = 0


@dataclass(frozen=True)
class AgentLaunch:
    """The co-resident agent: catalog entry `name`'s image, run with its
    own command. `env` is the entry's operator env plus its token under
    `token_env` (secrets: never logged, never stored); the backend adds
    `WORKSPACE_DIR`. `port`: the tcp port it listens on."""

    name: str
    image: ImageSpec
    port: int
    env: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class WatchSpec:
    """What opening a watch session's place needs.

    `identity`: id, created_at (set), limits (the `limits.app` tier's, with
    `watch.max_ttl_seconds` as `ttl_s`), `inspect` True; its `ports` are
    unused (each app has its own, `AppLaunch.ports`). `creation`: the
    session image, the env every app gets (secrets possible; a client
    `TELO_CACHE_DIR` already dropped), the bundle (always set). `checkpoint`:
    on a resume, what the workspace is restored from instead of the bundle."""

    identity: SessionIdentity
    creation: CreationSpec
    checkpoint: Checkpoint | None = None

    @property
    def session_id(self) -> str:
        return self.identity.session_id


@dataclass(frozen=True)
class Write:
    """One write: the file at `path` gets exactly `data`."""

    path: str
    data: bytes


@dataclass(frozen=True)
class ChangeSet:
    """Writes (applied in order), then deletes. Paths as the client gave
    them until `normalise_change_set` returns the set with normal paths."""

    writes: tuple[Write, ...] = ()
    deletes: tuple[str, ...] = ()

    @property
    def touches_nothing(self) -> bool:
        """No write and no delete: `200 {written: 0, deleted: 0}`, no restart."""
        return not self.writes and not self.deletes


class Checkpoint(Protocol):
    """A workspace checkpoint a host took: what `GET /workspace` listed, byte
    for byte. Owned by the backend that made it (a file in a daemon-private
    directory, say); the core keeps the latest and discards the ones it
    replaces and the last one when the session is gone."""

    @property
    def files(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    async def discard(self) -> None:
        """Remove what it holds; idempotent, never raises."""


class CheckpointFailed(Exception):
    """A checkpoint could not be taken (too large, an IO failure); `str()`
    is client-safe. The session keeps running."""


class ProgressReport(Protocol):
    """Where `open_watch` reports session-wide steps (`progress` without an
    `app`): provisioning the sandbox, seeding the workspace."""

    def progress(self, phase: RunPhase, message: str, done: bool | None = None) -> None: ...


class AppSink(Protocol):
    """Where one app's generation (or the agent) reports. Every method but
    `drain` is synchronous, never blocks, never raises."""

    def output(self, data: bytes, stream: OutputStream = OutputStream.TTY) -> None:
        """Bytes the process wrote, in order per stream."""

    def output_lost(self) -> None:
        """Output after the last `output` may be missing."""

    def progress(self, phase: RunPhase, message: str, done: bool | None = None) -> None:
        """A step of this app's start (carries `app` on the wire)."""

    async def drain(self, *steps: Callable[[], Awaitable[object]]) -> bool:
        """As `runnerd.backend.Sink.drain`: after the process ended, await
        the rest of its output within the core's drain budget."""

    def exited(self, code: int) -> None:
        """The exit code (signal N: 128+N) of a process `run_app` stopped
        on its way out by an exception, its cancellation mostly (a restart,
        a suspend, the app leaving the set, the session ending), so it
        returns no `Exited`: the backend's teardown calls it once the
        process is reaped, before the exception propagates; never when
        `run_app` returns. The core
        completes the stopped generation with it: 137 for one that ignored
        the SIGTERM and was SIGKILLed after the stop grace. A backend that
        reports none (or could not reap the process) gets the SIGTERM's
        143."""


@dataclass(frozen=True)
class AppStarted:
    """What `run_app`/`run_agent` report once the process exists.

    `handle`: its stdin and (for a `tty` app) its terminal size. `address`:
    where the core probes its declared tcp ports and relays its debug
    stream (None: nothing to watch). `self_watching`: its runtime restarts
    it on a workspace change by itself, so the core must not (and reads its
    generations from the debug stream)."""

    handle: WorkloadHandle
    address: WorkloadAddress | None = None
    self_watching: bool = False


class WatchHost(Protocol):
    """One watch session's live place: its workspace and its processes."""

    async def list_files(self) -> list[WorkspaceFile]:
        """Every listed file, sorted by path bytes (`runnerd.watch.paths`)."""

    async def read_file(self, path: str) -> bytes:
        """The bytes of a regular file of the workspace (WatchError 404/413)."""

    async def apply(self, changes: ChangeSet) -> tuple[int, int]:
        """Apply a normalised change set; (written, deleted). Visible to
        `list_files`/`read_file` when this returns. WatchError 409/413."""

    async def checkpoint(self) -> Checkpoint:
        """Take a checkpoint of the workspace now (CheckpointFailed)."""

    async def run_app(
        self,
        app: AppLaunch,
        sink: AppSink,
        *,
        task_status: trio.TaskStatus[AppStarted] = ...,
    ) -> Exited | Failed:
        """Run one generation of `app` (see the module docstring)."""
        ...

    async def run_agent(
        self,
        agent: AgentLaunch,
        sink: AppSink,
        *,
        task_status: trio.TaskStatus[AppStarted] = ...,
    ) -> Exited | Failed:
        """Run the co-resident agent until it exits or is cancelled."""
        ...


class WatchBackend(Protocol):
    """What a backend that runs watch sessions adds to `runnerd.backend.Backend`.

    `watch_io`: the `io` modes its apps may have (`features.io`); a backend
    without watch sessions has none (the config check refuses `[watch]
    enabled` on it)."""

    watch_io: tuple[IoMode, ...]

    def open_watch(
        self, spec: WatchSpec, progress: ProgressReport
    ) -> AbstractAsyncContextManager[WatchHost]:
        """The session's place, for as long as it is entered (see above)."""
        ...
