"""The backend seam: what a backend is given, and what it promises.

Owns the `Backend` protocol and the data it exchanges with the session
machinery (`RunSpec` in, `Sink` and `WorkloadHandle` out). Each backend
(`runnerd.local`, later `runnerd.kube`) implements it; nothing above this
seam knows which one runs.

The shape (see docs/style.md): `run()` is started in the session's nursery
with `nursery.start(backend.run, spec, sink)`. It reports
`task_status.started(handle)` once the workload exists (so stdin and resizes
have somewhere to go), reports everything after that through the sink, and
returns the workload's `Outcome` when it ends on its own. Cancellation is the
only way to stop it: a DELETE, the session TTL and daemon shutdown all cancel
the session's scope, and `run()` must stop the workload before it lets the
`Cancelled` propagate (a stop during start takes the same path, so there is
no special race code). The session machinery, not the backend, turns the
outcome, a `StartError` or a cancellation into the terminal status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import trio

from runnerd.contract import (
    AvailabilityReport,
    PortMapping,
    PullPolicy,
    Reachability,
    RunnerEndpoint,
    RunPhase,
    RunStatus,
)


@dataclass(frozen=True)
class BundleSpec:
    """A bundle with every path already normalised (no `..`, no leading `/`)."""

    entry: str
    files: tuple[tuple[str, str], ...]  # (relative path, contents)


@dataclass(frozen=True)
class ImageSpec:
    image: str
    pull_policy: PullPolicy


@dataclass(frozen=True)
class Limits:
    """Effective (already clamped) resource limits, as Kubernetes quantities."""

    cpu: str
    memory: str
    ephemeral_storage: str
    ttl_s: float


@dataclass(frozen=True)
class RunSpec:
    """Everything a backend needs to run one session. Immutable, validated.

    `bundle` is None for an app session (`app` set): the catalog image runs its
    own entrypoint. `env` is final (catalog values merged, TELO_REGISTRY_URL
    added): the backend passes it on as is and adds only its own plumbing.
    """

    session_id: str
    image: ImageSpec
    # May hold catalog secrets: kept out of repr so no log line can print it.
    env: Mapping[str, str] = field(repr=False)
    limits: Limits
    bundle: BundleSpec | None = None
    app: str | None = None
    ports: tuple[PortMapping, ...] = ()
    inspect: bool = False


@dataclass(frozen=True)
class Exited:
    """The workload ended on its own with this exit code (signal N → 128+N)."""

    code: int


@dataclass(frozen=True)
class Failed:
    """The workload ended in a way that is not an exit code (e.g. pod evicted).

    `message` is client-safe: it becomes the terminal `failed` status as is.
    """

    message: str


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


class Sink(Protocol):
    """Where a running backend reports. Every method is synchronous, never
    blocks, never raises, and is a no-op once the session is terminal."""

    def status(self, status: RunStatus) -> None:
        """A later non-terminal status (e.g. `running` with new endpoints).
        The first `running` is the manager's to publish (from `Started`);
        terminal statuses are the manager's too: a backend returns an
        `Outcome`."""

    def progress(self, phase: RunPhase, message: str, done: bool | None = None) -> None: ...

    def output(self, data: bytes) -> None:
        """PTY bytes, in order. Split into ≤64 KiB chunks downstream."""

    def reachability(self, port: int, state: Reachability) -> None: ...

    def debug(self, frame: dict[str, Any]) -> None:
        """A kernel debug frame; non-event frames are dropped downstream."""


class WorkloadHandle(Protocol):
    """The live workload's terminal. Both methods never block and never raise;
    they are no-ops once the workload has ended."""

    def write(self, data: bytes) -> None: ...

    def resize(self, cols: int, rows: int) -> None: ...


class Backend(Protocol):
    name: str
    # What this backend cannot guarantee on this host (e.g. a weaker
    # containment), one sentence each: logged once at start-up by the
    # backend and appended to `/v1/capabilities`' description.
    notices: tuple[str, ...]

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

        Reports `task_status.started(Started(handle, endpoints, inspect_url))`
        once the workload exists, and never reports `running` itself before.

        Raises:
            StartError: before `started`, the workload could not be created.
            trio.Cancelled: stop requested; the workload is gone before this
                propagates (teardown runs shielded, bounded by a grace period).
        """
        ...


@dataclass(frozen=True)
class Started:
    """What `run()` reports with `task_status.started(...)`: the workload
    exists. The manager attaches `handle` and only then publishes `running`
    with these endpoints and debug URL, so a client that has seen `running`
    always has somewhere for its stdin to go."""

    handle: WorkloadHandle
    endpoints: tuple[RunnerEndpoint, ...] = ()
    inspect_url: str | None = None


class NullHandle:
    """A handle for a workload that has no terminal."""

    def write(self, data: bytes) -> None:
        return None

    def resize(self, cols: int, rows: int) -> None:
        return None
