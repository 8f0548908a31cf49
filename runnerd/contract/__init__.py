"""The `/v1` wire contract: request bodies, run events, statuses. Pure.

Owns the shapes that cross the HTTP boundary and nothing else. Request bodies
are validated by msgspec (strict: no coercion; unknown fields are ignored at
every level, as the contract says), and a validation failure is turned into
one client-readable line naming the field (`body.env.FOO must be a string`).
Before the schema, a body must nest at most `MAX_JSON_DEPTH` levels and hold
only text UTF-8 can carry (no lone surrogates from `\ud800` escapes).
Events and statuses are plain JSON-ready dicts typed with `TypedDict`, so the
registry can size them by their JSON length and the SSE writer can dump them
as they are.

The package's `requests` holds the request bodies and `parse_body` (their
validation, its errors rephrased), `json_checks` the two checks before the
schema (depth and text); this module, the package, is the statuses, events
and probe answers, and re-exports every name of `requests`, so callers
import the contract from `runnerd.contract` alone.

No IO here, and nothing that imports trio, httpx or quart.
May import: `errors` only.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from runnerd.contract.json_checks import MAX_JSON_DEPTH as MAX_JSON_DEPTH
from runnerd.contract.requests import Body as Body
from runnerd.contract.requests import BundleFile as BundleFile
from runnerd.contract.requests import IoMode as IoMode
from runnerd.contract.requests import NonEmptyStr as NonEmptyStr
from runnerd.contract.requests import PortMapping as PortMapping
from runnerd.contract.requests import ProbeRequest as ProbeRequest
from runnerd.contract.requests import Protocol as Protocol
from runnerd.contract.requests import PullPolicy as PullPolicy
from runnerd.contract.requests import ReplaceAppsRequest as ReplaceAppsRequest
from runnerd.contract.requests import RequestError as RequestError
from runnerd.contract.requests import RunBundle as RunBundle
from runnerd.contract.requests import SessionAppSpec as SessionAppSpec
from runnerd.contract.requests import SessionConfig as SessionConfig
from runnerd.contract.requests import SessionMode as SessionMode
from runnerd.contract.requests import StartAppSessionRequest as StartAppSessionRequest
from runnerd.contract.requests import StartSessionRequest as StartSessionRequest
from runnerd.contract.requests import describe_validation_error as describe_validation_error
from runnerd.contract.requests import parse_body as parse_body

ACCEPTED_TERMS_HEADER = "x-telo-accepted-terms"
# A runnerd extension on the start POSTs: `COLSxROWS`, the client's terminal
# size, which the workload then has from its first byte (no first resize).
TERMINAL_SIZE_HEADER = "x-runnerd-terminal-size"

RunPhase = Literal["build", "provision", "boot"]
Reachability = Literal["checking", "reachable", "unreachable"]
# What started a watch session app's generation (the contract's "Runs and generations").
RunTrigger = Literal["initial", "watch", "manual", "resume"]
RouteState = Literal["pending", "programmed", "unprogrammed"]


# --------------------------------------------------------------------------
# Statuses and events (JSON-ready dicts)
# --------------------------------------------------------------------------


class RunnerEndpoint(TypedDict):
    host: str
    port: int
    protocol: Protocol
    url: NotRequired[str]
    token: NotRequired[str]  # a watch session's co-resident agent only (a secret of its client)


class StartingStatus(TypedDict):
    kind: Literal["starting"]


class RunningStatus(TypedDict):
    kind: Literal["running"]
    endpoints: NotRequired[list[RunnerEndpoint]]
    inspectUrl: NotRequired[str]
    agent: NotRequired[RunnerEndpoint]  # watch only: where the co-resident agent listens


class ExitedStatus(TypedDict):
    kind: Literal["exited"]
    code: int


class FailedStatus(TypedDict):
    kind: Literal["failed"]
    message: str


class StoppedStatus(TypedDict):
    kind: Literal["stopped"]


class SuspendedStatus(TypedDict):
    """A watch session put to sleep (idle suspend): NOT terminal. It keeps its
    id, events, output and workspace checkpoint; `POST .../resume` wakes it."""

    kind: Literal["suspended"]


RunStatus = (
    StartingStatus | RunningStatus | ExitedStatus | FailedStatus | StoppedStatus | SuspendedStatus
)

TERMINAL_KINDS = frozenset({"exited", "failed", "stopped"})


def is_terminal(status: RunStatus) -> bool:
    """`exited`, `failed` and `stopped` are terminal: the status never changes
    again. `suspended` is not (streams stay open over it; a resume follows)."""
    return status["kind"] in TERMINAL_KINDS


def starting() -> StartingStatus:
    return {"kind": "starting"}


def running(
    endpoints: list[RunnerEndpoint] | None = None,
    inspect_url: str | None = None,
    agent: RunnerEndpoint | None = None,
) -> RunningStatus:
    status: RunningStatus = {"kind": "running"}
    if endpoints:
        status["endpoints"] = endpoints
    if inspect_url:
        status["inspectUrl"] = inspect_url
    if agent is not None:
        status["agent"] = agent
    return status


def exited(code: int) -> ExitedStatus:
    return {"kind": "exited", "code": code}


def failed(message: str) -> FailedStatus:
    return {"kind": "failed", "message": message}


def stopped() -> StoppedStatus:
    return {"kind": "stopped"}


def suspended() -> SuspendedStatus:
    return {"kind": "suspended"}


class OutputEvent(TypedDict):
    type: Literal["stdout", "stderr"]
    chunk: str


class StatusEvent(TypedDict):
    type: Literal["status"]
    status: RunStatus


# `app` on progress, debug and reachability: a watch session's only, naming
# the app the event is about (absent on `progress` for a session-wide step);
# a run session's events never carry it, so their form is unchanged.


class ProgressEvent(TypedDict):
    type: Literal["progress"]
    phase: RunPhase
    message: str
    done: NotRequired[bool]
    app: NotRequired[str]


class DebugEvent(TypedDict):
    type: Literal["debug"]
    frame: dict[str, Any]
    app: NotRequired[str]


class ReachabilityEvent(TypedDict):
    type: Literal["reachability"]
    port: int
    state: Reachability
    app: NotRequired[str]


# A watch session app's generations (`runnerd.watch.runs` is their machine).


class RunStartedEvent(TypedDict):
    type: Literal["run"]
    app: str
    generation: int
    phase: Literal["started"]
    trigger: RunTrigger
    telo: NotRequired[str]  # the Telo kernel's version, when a self-watching kernel said it


class RunCompletedEvent(TypedDict):
    type: Literal["run"]
    app: str
    generation: int
    phase: Literal["completed"]
    code: int
    durationMs: int


class RunFailedEvent(TypedDict):
    type: Literal["run"]
    app: str
    generation: int
    phase: Literal["failed"]
    reason: str


AppRunEvent = RunStartedEvent | RunCompletedEvent | RunFailedEvent


class PortRejection(TypedDict):
    port: int
    reason: str


class EndpointsEvent(TypedDict):
    """A port set an app's runtime announced on a restart, as a diff; each
    list present only when non-empty."""

    type: Literal["endpoints"]
    app: str
    added: NotRequired[list[RunnerEndpoint]]
    removed: NotRequired[list[RunnerEndpoint]]
    rejected: NotRequired[list[PortRejection]]


class RouteEvent(TypedDict):
    """A Kubernetes routing verdict for one published host."""

    type: Literal["route"]
    app: NotRequired[str]
    host: str
    port: int
    state: RouteState
    reason: NotRequired[str]


RunEvent = (
    OutputEvent
    | StatusEvent
    | ProgressEvent
    | DebugEvent
    | ReachabilityEvent
    | RunStartedEvent
    | RunCompletedEvent
    | RunFailedEvent
    | EndpointsEvent
    | RouteEvent
)


def status_event(status: RunStatus) -> StatusEvent:
    return {"type": "status", "status": status}


def progress_event(
    phase: RunPhase, message: str, done: bool | None = None, *, app: str | None = None
) -> ProgressEvent:
    event: ProgressEvent = {"type": "progress", "phase": phase, "message": message}
    if done is not None:
        event["done"] = done
    if app is not None:
        event["app"] = app
    return event


def reachability_event(
    port: int, state: Reachability, *, app: str | None = None
) -> ReachabilityEvent:
    event: ReachabilityEvent = {"type": "reachability", "port": port, "state": state}
    if app is not None:
        event["app"] = app
    return event


def debug_event(frame: dict[str, Any], *, app: str | None = None) -> DebugEvent:
    event: DebugEvent = {"type": "debug", "frame": frame}
    if app is not None:
        event["app"] = app
    return event


def endpoints_event(
    app: str,
    added: list[RunnerEndpoint] | None = None,
    removed: list[RunnerEndpoint] | None = None,
    rejected: list[PortRejection] | None = None,
) -> EndpointsEvent:
    """The diff, each list only when non-empty (the contract's `?`)."""
    event: EndpointsEvent = {"type": "endpoints", "app": app}
    if added:
        event["added"] = added
    if removed:
        event["removed"] = removed
    if rejected:
        event["rejected"] = rejected
    return event


def route_event(
    host: str, port: int, state: RouteState, *, app: str | None = None, reason: str | None = None
) -> RouteEvent:
    event: RouteEvent = {"type": "route", "host": host, "port": port, "state": state}
    if app is not None:
        event["app"] = app
    if reason is not None:
        event["reason"] = reason
    return event


def is_event_frame(frame: object) -> bool:
    """Only kernel *event* debug frames are relayed (`kind` absent or "event");
    log frames are dropped, since the same bytes already arrive on the PTY."""
    return isinstance(frame, dict) and frame.get("kind", "event") == "event"


# --------------------------------------------------------------------------
# Probe answers
# --------------------------------------------------------------------------


class ReadyReport(TypedDict):
    status: Literal["ready"]


class SetupIssue(TypedDict):
    path: str
    message: str


class NeedsSetupReport(TypedDict):
    status: Literal["needs-setup"]
    issues: list[SetupIssue]


class UnavailableReport(TypedDict):
    status: Literal["unavailable"]
    message: str
    remediation: NotRequired[str]


AvailabilityReport = ReadyReport | NeedsSetupReport | UnavailableReport


def ready() -> ReadyReport:
    return {"status": "ready"}


def unavailable(message: str, remediation: str | None = None) -> UnavailableReport:
    report: UnavailableReport = {"status": "unavailable", "message": message}
    if remediation:
        report["remediation"] = remediation
    return report


# --------------------------------------------------------------------------
# Errors a route answers with
# --------------------------------------------------------------------------


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """`{"error": code, "message": message, ...extra}`: every error response."""
    return {"error": code, "message": message, **extra}
