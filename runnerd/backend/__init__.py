"""The backend seam: what a backend is given, and what it promises.

Owns the `Backend` protocol and the data it exchanges with the session
machinery (`RunSpec` in, from `runnerd.backend.spec` and re-exported here
with the rest of it; `Sink` and `Started` out). Each backend (`runnerd.local`,
`runnerd.kube`) implements it; nothing above this seam knows which one runs.
What the core asks of a backend *package* (config check, offered images,
stop timeout, `open_backend`) is `runnerd.backends.Provider`.

The guarantees, member by member:

- Lifetime: a backend is opened once for the daemon's lifetime (an async
  context manager entered in the root nursery before the session manager
  runs, left after every session has ended), so it may own long-lived tasks
  (a shared watch, an endpoint, an orphan sweep). What the daemon hands it
  besides the config is one `BackendContext`, fixed for that lifetime.
- `run(spec, sink, task_status=...)` is started in the session's nursery. It
  reports `task_status.started(Started(handle, endpoints, address, stop))`
  once the workload exists; the manager attaches the handle and publishes
  `running` inside that call, so `running` is the first event after
  `starting` and stdin sent on seeing it always has somewhere to go. It
  reports everything after that through the sink (status, progress, output)
  and returns the workload's `Outcome` when it ends on its own, once the
  rest of its output is through: it awaits that with `Sink.drain`, whose
  budget is the core's, so no backend keeps a session past it.
- Supervision is the core's, not the backend's: `Started.address` says where
  the workload is (`WorkloadAddress`: a host, a way to dial it, its debug
  server's port), and the session machinery probes each declared tcp port
  and relays the debug stream from there (`runnerd.workload.supervision`),
  in the run's nursery, so neither outlives `run()`. The client's
  `running.inspectUrl` is built from the address, the same for every backend.
- Cancellation is the only way to end it. `sink.end_intent()` says why: STOP
  (a DELETE, the TTL, shutdown: the workload is gone before `Cancelled`
  propagates; a stop during start takes the same path, so there is no special
  race code) or DETACH (leave it running for a successor daemon; asked only
  of a backend with `detach_supported`).
- The TTL is a deadline from `identity.created_at`, not a timer restarted
  when a daemon takes the session over.
- `recover()` lists the workloads a previous daemon left; the manager's
  `adopt()` admits each with its original id, creation time and status, past
  the capacity check, and runs `run()` with `spec.creation` None to re-attach
  (a terminal one is only registered, for replay). Its replay continues from
  the previous daemon's state file (`runnerd.session.statefile`).
- `RunSpec` is `identity` (id, created_at, limits, ports, inspect, app: never
  a secret, what a backend may store and rebuild) plus `creation` (image,
  env with secrets, bundle: needed once, never stored).
- Watch sessions (`runnerd.backend.watch`): `watch_io` says which app `io`
  modes the backend offers (none: no watch sessions, and `open_watch`
  raises `StartError`); `open_watch` is the session's place.
- The session machinery, not the backend, turns the outcome, a `StartError`
  or a cancellation into the session's one ending and its terminal status
  (`runnerd.session.ending`).

May import: `contract`, `errors`, `metrics`, and no IO library (pure, `trio`
for types only). Never `config`, `session`, a backend package or anything
above: every backend and the core import it.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    import trio

    from runnerd.backend.watch import Checkpoint, ProgressReport, WatchHost, WatchSpec

from runnerd.backend.spec import (
    BundleSpec,
    CreationSpec,
    ImageSpec,
    Limits,
    Recovered,
    RunSpec,
    SessionIdentity,
)
from runnerd.backend.workload import Dial, Exited, Failed, WorkloadAddress, WorkloadHandle
from runnerd.contract import (
    AvailabilityReport,
    IoMode,
    RouteState,
    RunnerEndpoint,
    RunPhase,
    RunStatus,
)
from runnerd.metrics import NULL_METRICS, Metrics

__all__ = [
    "Backend",
    "BackendContext",
    "BundleSpec",
    "CreationSpec",
    "Dial",
    "EndIntent",
    "Exited",
    "Failed",
    "ImageSpec",
    "Limits",
    "Outcome",
    "Recovered",
    "RunSpec",
    "SessionIdentity",
    "Sink",
    "StartError",
    "Started",
    "StopRefused",
    "WorkloadAddress",
    "WorkloadHandle",
]


class EndIntent(enum.Enum):
    """Why a session's run is being cancelled, as `Sink.end_intent()` says.

    STOP: the workload must be gone before `run()` returns (DELETE, TTL,
    shutdown). DETACH: leave the workload running for a successor daemon to
    `recover()`; only asked of a backend whose `detach_supported` is True.
    """

    STOP = "stop"
    DETACH = "detach"


Outcome = Exited | Failed


class StartError(Exception):
    """The workload could not be started. Terminal status: `failed "<stage>: <message>"`.

    `message` is client-safe (never a secret, never a cluster identity); the
    raw cause travels as `__cause__` to the log only.
    """

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.message = message


class StopRefused(Exception):
    """`Started.stop` could not stop the workload: it is still running (and a
    later stop may succeed). `str()` is client-safe: the classified cause,
    never a cluster identity; the raw cause travels as `__cause__`."""


class Sink(Protocol):
    """Where a running backend reports. Every method but `terminal_size` is
    synchronous, never blocks, never raises, and is a no-op once the session
    is terminal."""

    def status(self, status: RunStatus) -> None:
        """A later non-terminal status (e.g. `running` with new endpoints).
        The first `running` is the manager's to publish (from `Started`);
        terminal statuses are the manager's too: a backend returns an
        `Outcome`."""

    def progress(self, phase: RunPhase, message: str, done: bool | None = None) -> None: ...

    def route(self, host: str, port: int, state: RouteState, reason: str | None = None) -> None:
        """A public route's health: a `route` event (`pending`, then
        `programmed` or `unprogrammed` with `reason`)."""

    def output(self, data: bytes) -> None:
        """PTY bytes, in order. Split into ≤64 KiB chunks downstream."""

    def output_lost(self) -> None:
        """Output the workload wrote after the last `output` may be missing
        (the backend could not deliver or recover it): `/io` readers get a
        `{"type":"gap","reason":"output_lost"}` frame at this place."""

    def end_intent(self) -> EndIntent:
        """Why the run is being cancelled; read it in teardown. STOP unless
        the daemon asked to detach (and only from a backend that can)."""

    async def drain(self, *steps: Callable[[], Awaitable[object]]) -> bool:
        """After the workload has ended, the rest of its output: await each
        of `steps` in order (a PTY read to its end, an attach delivering its
        last bytes, a port forward's last replies) within the core's drain
        budget. True when every step finished, False when the budget ran out
        first; the backend returns its outcome either way. Cancelled with
        the run."""

    async def terminal_size(self, wait_s: float) -> tuple[int, int] | None:
        """The (cols, rows) the workload's terminal should start with, for a
        backend that creates it before any client could resize it: the latest
        size a client asked for (the POST's `x-runnerd-terminal-size`, an
        `/io` resize), at once when there is one; otherwise the first to
        arrive until `wait_s` after the session's creation; None when none
        did (the backend's default size then). Never raises; cancelled with
        the run (a stop during the wait ends it as any stop does)."""


class Backend(Protocol):
    """A backend, open for the daemon's lifetime (its package's
    `open_backend`, see `runnerd.backends.Provider`): it may own long-lived
    tasks and endpoints shared by every session until it is closed, which
    happens after every session has ended."""

    name: str
    # What this backend cannot guarantee on this host (e.g. a weaker
    # containment), one sentence each: logged once at start-up by the
    # backend and appended to `/v1/capabilities`' description.
    notices: tuple[str, ...]
    # Whether `run()` can leave its workload running on `EndIntent.DETACH`
    # (for a successor daemon to `recover()`). The manager refuses a detach
    # from a backend without it rather than leave workloads unowned.
    detach_supported: bool
    # The `io` modes a watch session's apps may have here
    # (`runnerd.backend.watch.WatchBackend`); () on a backend without watch
    # sessions, whose `open_watch` then always raises `StartError`.
    watch_io: tuple[IoMode, ...]
    # `runnerd.backend.watch.WatchBackend`: a host runs a fixed app set (a
    # new one is a reopen); places outlive the daemon (adoption).
    watch_fixed_apps: bool
    watch_adopt: bool

    def open_watch(
        self, spec: WatchSpec, progress: ProgressReport
    ) -> AbstractAsyncContextManager[WatchHost]:
        """A watch session's place (`runnerd.backend.watch`)."""
        ...

    def adopt_watch(
        self, spec: WatchSpec, progress: ProgressReport
    ) -> AbstractAsyncContextManager[WatchHost]:
        """A previous daemon's live place for `spec` (`runnerd.backend.watch`)."""
        ...

    def load_checkpoint(self, saved: dict[str, object]) -> Checkpoint | None:
        """A checkpoint a previous daemon saved (`runnerd.backend.watch`)."""
        ...

    async def recover(self) -> list[Recovered]:
        """The workloads a previous daemon left for this one to adopt, each
        with the identity it stored: live ones, and ones that ended meanwhile
        (terminal status; the backend removes their workload). Called once,
        in the background while the daemon already serves (new sessions may
        start meanwhile). Never raises for one bad workload (it is removed or
        skipped, and logged); raises only when the backend itself cannot
        answer."""

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        """Could a session with this image start right now? Never raises."""

    async def run(
        self,
        spec: RunSpec,
        sink: Sink,
        *,
        task_status: trio.TaskStatus[Started] = ...,
    ) -> Outcome:
        """Run the workload to its end.

        Reports `task_status.started(Started(handle, endpoints, address, stop))`
        once the workload exists, and never reports `running` itself before.
        `spec.creation` None: the workload was adopted (`recover()`);
        re-attach to it instead of creating one.

        Raises:
            StartError: before `started`, the workload could not be created.
            trio.Cancelled: the run was ended; with `sink.end_intent()` STOP
                the workload is gone before this propagates (teardown runs
                shielded, bounded by a grace period); with DETACH it is left
                running.
        """
        ...


@dataclass(frozen=True)
class Started:
    """What `run()` reports with `task_status.started(...)`: the workload
    exists. The manager attaches `handle` and only then publishes `running`
    with these endpoints and the debug URL, so a client that has seen
    `running` always has somewhere for its stdin to go; then it starts its
    watchers of `address` in the run's nursery (None: nothing to watch yet,
    e.g. a pod with no IP, or one that has ended), which end with the run."""

    handle: WorkloadHandle
    endpoints: tuple[RunnerEndpoint, ...] = ()
    address: WorkloadAddress | None = None
    # The backend's own first step of a user stop, for a workload whose stop
    # can be refused (a pod delete the apiserver denies): awaited before the
    # run is cancelled; raising `StopRefused` leaves the session running and
    # the stop answered `stop_failed`. None: cancelling the run stops it.
    stop: Callable[[], Awaitable[None]] | None = None

    @property
    def inspect_url(self) -> str | None:
        """`running.inspectUrl`: the address's debug server, if any."""
        return None if self.address is None else self.address.inspect_url


@dataclass(frozen=True)
class BackendContext:
    """What the daemon hands a backend it opens (`runnerd.backends.Provider.open_backend`),
    besides the config; fixed for the backend's lifetime.

    `hidden_paths`: what no session may see (the config file's directory,
    the directory of every unix socket runnerd serves), absolute. A backend
    whose sessions share this host's file system covers them in every
    session (the local one, with a mount namespace); the others have
    nothing to hide. `metrics`: where a backend that counts (apiserver
    requests) registers its series and counts. `ahead`: what the
    provider's `probe_ahead` started before the daemon's imports (its own
    type, for its own backend to take; None when nothing was).
    """

    hidden_paths: tuple[Path, ...] = ()
    metrics: Metrics = NULL_METRICS
    ahead: object = None
