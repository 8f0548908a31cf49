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
  up (the session then ends `failed "<stage>: <message>"`); once entered,
  a place that ends on its own raises `PlaceEnded` out of it (the session
  ends `failed "<message>"`).
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

- The app set (`WatchSpec.apps`, `WatchSpec.agent`) is given on every
  entry. On a backend whose places hold a fixed app set
  (`WatchBackend.watch_fixed_apps`: a pod's containers) the core changes it
  (`PUT /apps`) by reopening: it stops every app, checkpoints, leaves the
  host and enters `open_watch` again with the new set and that checkpoint
  (the session's status unchanged; its workspace routes wait for the new
  host). A backend with live app sets (local) runs any app on any host.
- `WatchHost.publish(ports)` is told the session's whole port set (every
  app's, in app order, de-duplicated) once before `running` and again on
  every change while the session serves; it returns each port's endpoint
  (`host` filled when the backend routes it publicly, "" otherwise) and the
  ports it could not publish. Route health goes to `ProgressReport.route`.
- A self-watching app may offer `AppStarted.reload`: a way to start a new
  run without stopping its process (its kernel reloads; the next
  `Kernel.Starting` is the new generation). The core uses it, when
  offered, for a restart of a self-watching app whose process is up
  (`manual`, `resume` within a live host) instead of cancelling the
  generation (a pod's container cannot be stopped on its own).
- Places that outlive the daemon (`WatchBackend.watch_adopt`: pods): a
  checkpoint that says how to find it again (`Checkpoint.saved()`, JSON for
  the core's watch record in the state dir) is brought back with
  `load_checkpoint`, and a live place a previous daemon left is re-entered
  with `adopt_watch` (no seeding: the workspace is as it was), which raises
  `PlaceGone` when there is none.

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
from runnerd.contract import IoMode, PortMapping, RouteState, RunnerEndpoint, RunPhase

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
    "PlaceEnded",
    "PlaceGone",
    "ProgressReport",
    "Published",
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
    on a resume (or a reopen for a new app set), what the workspace is
    restored from instead of the bundle. `apps`/`agent`: the app set."""

    identity: SessionIdentity
    creation: CreationSpec
    checkpoint: Checkpoint | None = None
    # The app set this place is opened for (declaration order, each with its
    # slot) and the co-resident agent (None: none, or an app's port keeps it
    # from running). Always set by the core; a backend with live app sets
    # may ignore them (it is handed each app again by `run_app`).
    apps: tuple[AppLaunch, ...] = ()
    agent: AgentLaunch | None = None

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

    def saved(self) -> dict[str, object] | None:
        """What finds it again after a daemon restart (JSON-able, no secret:
        a path in the daemon's state dir, its counts), for the core's watch
        record; None when it does not outlive the daemon."""


class PlaceEnded(Exception):
    """Raised out of an entered `open_watch`/`adopt_watch` when the live
    place ended on its own (a pod that reached `Failed`, one deleted by
    someone else): the session ends `failed "<str()>"`, no stage prefix
    (it started; nothing of its start failed). `str()` is client-safe."""


class PlaceGone(Exception):
    """`adopt_watch`: the previous daemon's place for this session is not
    there (or not live) any more; `str()` is client-safe."""


@dataclass(frozen=True)
class Published:
    """What `WatchHost.publish` made of a port set: one endpoint per
    published port (`host` "" when not publicly routed), and the ports it
    could not publish with why (client-safe)."""

    endpoints: tuple[RunnerEndpoint, ...] = ()
    rejected: tuple[tuple[int, str], ...] = ()


class CheckpointFailed(Exception):
    """A checkpoint could not be taken (too large, an IO failure); `str()`
    is client-safe. The session keeps running."""


class ProgressReport(Protocol):
    """Where `open_watch` reports session-wide steps (`progress` without an
    `app`): provisioning the sandbox, seeding the workspace."""

    def progress(self, phase: RunPhase, message: str, done: bool | None = None) -> None: ...

    def route(self, host: str, port: int, state: RouteState, reason: str | None = None) -> None:
        """A public route's health (`route` events; the core adds the app
        that owns `port`). Synchronous, never raises."""

    def detaching(self) -> bool:
        """Read when the place is left: True when the daemon restarts and
        leaves the session to a successor (`EndIntent.DETACH`, as
        `Sink.end_intent` for a run), so the place must stay for its
        `adopt_watch`; False: remove it. Synchronous, never raises."""
        ...


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
    generations from the debug stream). `reload`: see the module docstring."""

    handle: WorkloadHandle
    address: WorkloadAddress | None = None
    self_watching: bool = False
    # A self-watching app's in-place restart (see the module docstring):
    # awaited by the core, raises RunnerdError (client-safe) when it could not.
    reload: Callable[[], Awaitable[None]] | None = None


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

    async def publish(self, ports: tuple[PortMapping, ...]) -> Published:
        """Publish the session's port set (see the module docstring); never
        raises for the cluster's refusal (those ports are `rejected`)."""

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
    # A host runs exactly `spec.apps`: a new app set is a reopen (above).
    watch_fixed_apps: bool
    # Places outlive the daemon: `adopt_watch` and `load_checkpoint` work.
    watch_adopt: bool

    def open_watch(
        self, spec: WatchSpec, progress: ProgressReport
    ) -> AbstractAsyncContextManager[WatchHost]:
        """The session's place, for as long as it is entered (see above)."""
        ...

    def adopt_watch(
        self, spec: WatchSpec, progress: ProgressReport
    ) -> AbstractAsyncContextManager[WatchHost]:
        """The live place a previous daemon left for `spec` (its id, apps and
        agent as that daemon ran them), re-entered without seeding; leaving
        it is as leaving `open_watch`'s. Entering raises `PlaceGone` when
        there is none (a backend without `watch_adopt`: always)."""
        ...

    def load_checkpoint(self, saved: dict[str, object]) -> Checkpoint | None:
        """A checkpoint a previous daemon's `Checkpoint.saved()` described,
        or None when it is gone or unreadable (logged)."""
        ...
