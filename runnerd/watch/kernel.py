"""A self-watching app's generations, projected from its kernel's debug frames. Pure.

An app whose runtime restarts itself on a workspace change (`AppStarted.
self_watching`: `telo run --watch`) is started once and left running, so
the core cannot count its generations from process starts. The Telo kernel
says on its debug stream (the core's relay, `runnerd.workload.debug_relay`)
when a run begins and ends; this module reads those frames and nothing
else: no manifest is parsed here, and the kernel is asked for nothing.

Frames are the kernel's debug-wire objects: an event frame is
`{"kind": "event", "event": NAME, "payload": {...}, "timestamp": ...}`
(`kind` absent counts as an event, `contract.is_event_frame`); log frames and
every other event pass through untouched. Four names are read:

    event                  payload read               projection
    Kernel.Starting        telo?: str                 `run started` (trigger below;
                                                      `telo` carried when non-empty)
    Kernel.Stopped         exitCode: int              `run completed {code}`
    Kernel.RunFailed       code?: str, message?: str  `run started` if none is open,
                                                      then `run failed {reason}`
    Kernel.PortsResolved   ports: [{port, protocol?}] the app's declared port set

`Kernel.Started` is ignored on purpose: it and `Kernel.Starting` bracket one
transition, and the contract has one `started` per generation. A
`Kernel.Starting` while a generation is open is ignored too (the kernel
never starts twice without stopping; a repeat is a replayed frame). A load
failure emits no `Kernel.Starting`, hence `RunFailed` opening the
generation itself: a client sees the pair `started` + `failed`. Its reason
is the diagnostic code when the kernel gave one (`ERR_MANIFEST_VALIDATION_
FAILED`: what a program branches on), else the message, else `run failed`.
A payload of the wrong shape never raises: a missing or non-integer
`exitCode` reads as 0, a `telo` that is not a non-empty string is dropped,
a `ports` that is not a list announces nothing, an entry without an
integer port in 1..65535 is skipped, a protocol other than `udp` is `tcp`.

The API (the core holds one `KernelProjection` per self-watching app,
around that app's `runnerd.watch.runs.AppRuns`):

- `expect(trigger)`: the core started or restarted the process itself
  (`initial`, `manual`, `resume`): the NEXT generation is attributed to it.
  Consumed by that generation; every later one is `watch` (the kernel
  restarted on a change) until `expect` is called again.
- `feed(frame, now) -> KernelUpdate`: one relayed frame; `runs` are the
  `run` events to emit, in order; `declared` is the port set of a
  `Kernel.PortsResolved` (an empty tuple un-declares every port; None: the
  frame announced none).
- `KernelProjection(runs, skip=n)` after an adoption: the kernel replays
  its frames to a new debug client (the stand-in does; a real one may), so
  the first `n` lifecycle frames, those the previous daemon's projection
  consumed from this process (`consumed`, kept in the watch record), are
  dropped: no generation is projected twice, the open one stays open.
- `ended(code, now)`: the process exited under an open generation without
  its `Kernel.Stopped` (a crash, a kill): `completed {code}`, or None.
- A process that could not be spawned at all is the core's `AppRuns.
  start_failed`, as for any app; nothing here.

`diff_ports(app, declared, apps, agent)` turns a declared set into the
app's new set and its `endpoints` event: added (new, and owned by nobody
else), removed (no longer declared), rejected (owned by another app of the
session, or the co-resident agent's tcp port: a session's ports are one
namespace, so one of them cannot be routed to two owners); None when
nothing changed. A rejected port is not taken into the app's set, so a
kernel that keeps declaring it hears the rejection again on every restart.

`now` is a monotonic clock in seconds (`AppRuns`' durations).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from runnerd.contract import (
    AppRunEvent,
    EndpointsEvent,
    PortMapping,
    PortRejection,
    Protocol,
    RunnerEndpoint,
    RunTrigger,
    endpoints_event,
    is_event_frame,
)
from runnerd.watch.runs import AppRuns, RunPhase

STARTING = "Kernel.Starting"
STOPPED = "Kernel.Stopped"
RUN_FAILED = "Kernel.RunFailed"
PORTS_RESOLVED = "Kernel.PortsResolved"
# The frames that move the generations (a replayed `PortsResolved` is
# harmless: the same set again changes nothing).
LIFECYCLE = (STARTING, STOPPED, RUN_FAILED)
# The kernel writes these strings; an event carries them to every client, so
# a runaway one is cut rather than filling the event ring.
MAX_REASON_CHARS = 1000
MAX_VERSION_CHARS = 64


@dataclass(frozen=True)
class KernelUpdate:
    """What one frame changed: `run` events to emit (in order), and the port
    set a `Kernel.PortsResolved` declared (None: no announcement)."""

    runs: tuple[AppRunEvent, ...] = ()
    declared: tuple[PortMapping, ...] | None = None


NOTHING = KernelUpdate()


class KernelProjection:
    """One self-watching app's generations from its debug frames (module
    docstring). Never raises on a frame's content."""

    def __init__(self, runs: AppRuns, *, skip: int = 0) -> None:
        """`skip`: the lifecycle frames of this process a previous daemon's
        projection consumed (adoption): the kernel's replay of them to the
        new relay is dropped, not projected again."""
        self.runs = runs
        self._trigger: RunTrigger | None = None
        self._skip = skip
        # Lifecycle frames (Starting, Stopped, RunFailed) of this process
        # seen, the skipped included: what the watch record keeps.
        self.consumed = 0

    def expect(self, trigger: RunTrigger | None) -> None:
        """Attribute the next generation to `trigger` (the core's own start
        or in-place reload); None takes an expectation back (a reload that
        did not happen)."""
        self._trigger = trigger

    @property
    def expected(self) -> RunTrigger | None:
        """What the next generation will be attributed to, if the core's."""
        return self._trigger

    def feed(self, frame: Mapping[str, Any], now: float) -> KernelUpdate:
        """The `run` events and port set one debug frame means."""
        if not is_event_frame(frame):
            return NOTHING
        name, payload = frame.get("event"), frame.get("payload")
        body: Mapping[str, Any] = payload if isinstance(payload, Mapping) else {}
        if name in LIFECYCLE:
            self.consumed += 1
            if self.consumed <= self._skip:
                return NOTHING  # replayed: the previous daemon projected it
        if name == STARTING:
            started = self._begin(_version(body), now)
            return KernelUpdate(runs=(started,)) if started is not None else NOTHING
        if name == STOPPED:
            completed = self.runs.complete(_exit_code(body), now)
            return KernelUpdate(runs=(completed,)) if completed is not None else NOTHING
        if name == RUN_FAILED:
            return KernelUpdate(runs=self._run_failed(_reason(body), now))
        if name == PORTS_RESOLVED:
            declared = parse_ports(body)
            return KernelUpdate(declared=declared) if declared is not None else NOTHING
        return NOTHING

    def ended(self, code: int, now: float) -> AppRunEvent | None:
        """The process exited without a `Kernel.Stopped`: close the open
        generation as `completed {code}` (None when none is open)."""
        return self.runs.complete(code, now)

    def _begin(self, telo: str | None, now: float) -> AppRunEvent | None:
        """Open a generation unless one is open, consuming the expectation."""
        if self.runs.phase is RunPhase.OPEN:
            return None
        trigger, self._trigger = self._trigger or "watch", None
        started = self.runs.start(trigger, now)
        if telo is not None:
            started["telo"] = telo
        return started

    def _run_failed(self, reason: str, now: float) -> tuple[AppRunEvent, ...]:
        started = self._begin(None, now)
        failed = self.runs.fail(reason)
        assert failed is not None  # a generation is open: just opened, or already
        return (started, failed) if started is not None else (failed,)


def _version(payload: Mapping[str, Any]) -> str | None:
    telo = payload.get("telo")
    return telo[:MAX_VERSION_CHARS] if isinstance(telo, str) and telo else None


def _exit_code(payload: Mapping[str, Any]) -> int:
    code = payload.get("exitCode")
    # bool is an int to Python, never an exit code to the kernel.
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


def _reason(payload: Mapping[str, Any]) -> str:
    for key in ("code", "message"):
        value = payload.get(key)
        if isinstance(value, str) and value:
            return value[:MAX_REASON_CHARS]
    return "run failed"


def parse_ports(payload: Mapping[str, Any]) -> tuple[PortMapping, ...] | None:
    """A `Kernel.PortsResolved` payload's port set (each pair once, in the
    kernel's order); None when `ports` is not a list."""
    raw = payload.get("ports")
    if not isinstance(raw, list):
        return None
    found: dict[tuple[Protocol, int], PortMapping] = {}
    for entry in raw:
        port = entry.get("port") if isinstance(entry, Mapping) else None
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            continue
        protocol: Protocol = "udp" if entry.get("protocol") == "udp" else "tcp"
        found.setdefault((protocol, port), PortMapping(port=port, protocol=protocol))
    return tuple(found.values())


# --------------------------------------------------------------------------
# Announced port sets → the app's new set and its `endpoints` event
# --------------------------------------------------------------------------


class AgentPort(NamedTuple):
    """The co-resident agent as a port owner: its catalog name, its tcp port."""

    name: str
    port: int


def bare_endpoint(mapping: PortMapping) -> RunnerEndpoint:
    """A port as the local backend reports it (no host of its own)."""
    return {"host": "", "port": mapping.port, "protocol": mapping.protocol}


@dataclass(frozen=True)
class PortsDiff:
    """An app's port set after an announcement, and what changed."""

    app: str
    ports: tuple[PortMapping, ...]  # the app's set from now on
    added: tuple[PortMapping, ...]
    removed: tuple[PortMapping, ...]
    rejected: tuple[PortRejection, ...]

    def event(
        self, endpoint_of: Callable[[PortMapping], RunnerEndpoint] = bare_endpoint
    ) -> EndpointsEvent:
        """The `endpoints` event (each list present only when non-empty)."""
        return endpoints_event(
            self.app,
            added=[endpoint_of(p) for p in self.added],
            removed=[endpoint_of(p) for p in self.removed],
            rejected=list(self.rejected),
        )


def _owners(
    app: str, apps: Mapping[str, Sequence[PortMapping]], agent: AgentPort | None
) -> dict[tuple[Protocol, int], str]:
    """Each port someone other than `app` holds → why `app` may not have it."""
    owners: dict[tuple[Protocol, int], str] = {}
    for name, ports in apps.items():
        if name != app:
            for p in ports:
                owners.setdefault(
                    (p.protocol, p.port), f"app '{name}' declares {p.protocol} port {p.port}"
                )
    if agent is not None:
        owners[("tcp", agent.port)] = (
            f"co-resident agent '{agent.name}' listens on tcp port {agent.port}"
        )
    return owners


def diff_ports(
    app: str,
    declared: Sequence[PortMapping],
    apps: Mapping[str, Sequence[PortMapping]],
    agent: AgentPort | None = None,
) -> PortsDiff | None:
    """`app`'s new port set after it declared `declared`; `apps` maps every
    app of the session to its current set (`app`'s own included). None when
    the announcement changes nothing and rejects nothing."""
    current = tuple(apps.get(app, ()))
    before = {(p.protocol, p.port) for p in current}
    after = {(p.protocol, p.port) for p in declared}
    owners = _owners(app, apps, agent)
    fresh = [p for p in declared if (p.protocol, p.port) not in before]
    added = tuple(p for p in fresh if (p.protocol, p.port) not in owners)
    rejected = tuple(
        PortRejection(port=p.port, reason=owners[(p.protocol, p.port)])
        for p in fresh
        if (p.protocol, p.port) in owners
    )
    removed = tuple(p for p in current if (p.protocol, p.port) not in after)
    if not (added or removed or rejected):
        return None
    kept = tuple(p for p in current if (p.protocol, p.port) in after)
    return PortsDiff(app, kept + added, added, removed, rejected)
