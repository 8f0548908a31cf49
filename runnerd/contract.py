"""The `/v1` wire contract: request bodies, run events, statuses. Pure.

Owns the shapes that cross the HTTP boundary and nothing else. Request bodies
are validated by pydantic (strict: no coercion, no unknown fields), and a
validation failure is turned into one client-readable line naming the field
(`body.env.FOO must be a string`). Events and statuses are plain JSON-ready
dicts typed with `TypedDict`, so the registry can size them by their JSON
length and the SSE writer can dump them as they are.

No IO here, and nothing that imports trio, httpx or quart.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, NotRequired, TypedDict, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

ACCEPTED_TERMS_HEADER = "x-telo-accepted-terms"

M = TypeVar("M", bound="BaseModel")

PullPolicy = Literal["missing", "always", "never"]
Protocol = Literal["tcp", "udp"]
RunPhase = Literal["build", "provision", "boot"]
Reachability = Literal["checking", "reachable", "unreachable"]


# --------------------------------------------------------------------------
# Request bodies (validated)
# --------------------------------------------------------------------------


class _Body(BaseModel):
    # strict: a number is not a string, "1" is not an int. forbid: a typo'd
    # field is an error, never silently ignored.
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class SessionConfig(_Body):
    image: Annotated[str, Field(min_length=1)]
    pullPolicy: PullPolicy
    # Absent and blank both mean unset (see admission); null is not a string.
    registryUrl: str = ""


class BundleFile(_Body):
    relativePath: Annotated[str, Field(min_length=1)]
    contents: str


class RunBundle(_Body):
    entryRelativePath: Annotated[str, Field(min_length=1)]
    files: list[BundleFile]


class PortMapping(_Body):
    port: Annotated[int, Field(ge=1, le=65535)]
    protocol: Protocol


class StartSessionRequest(_Body):
    """`POST /v1/sessions`. `bundle`/`config` are schema-optional because an
    app session needs neither; the route enforces them for bundle sessions."""

    env: dict[str, str]
    bundle: RunBundle | None = None
    config: SessionConfig | None = None
    app: Annotated[str, Field(min_length=1)] | None = None
    ports: list[PortMapping] | None = None
    inspect: bool | None = None


class StartAppSessionRequest(_Body):
    """`POST /v1/apps/{name}/sessions`: the app comes from the path."""

    env: dict[str, str] | None = None
    ports: list[PortMapping] | None = None
    inspect: bool | None = None


class ProbeConfig(_Body):
    image: Annotated[str, Field(min_length=1)]
    pullPolicy: PullPolicy


class ProbeRequest(_Body):
    config: ProbeConfig


class RequestError(ValueError):
    """A body that is not JSON or breaks the schema. `message` names the field."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


_TYPE_WORDS = {
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "bool_type": "must be a boolean",
    "dict_type": "must be an object",
    "list_type": "must be an array",
    "model_type": "must be an object",
    "missing": "is required",
    "extra_forbidden": "is not an allowed field",
    "string_too_short": "must not be empty",
    "literal_error": "must be one of",
    "greater_than_equal": "must be at least",
    "less_than_equal": "must be at most",
}


def describe_validation_error(exc: ValidationError) -> str:
    """The first error of `exc` as one line: `body.<path> <problem>`."""
    err = exc.errors(include_url=False)[0]
    path = "body" + "".join(
        f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]
    )
    kind = err["type"]
    words = _TYPE_WORDS.get(kind)
    if words is None:
        return f"{path}: {err['msg']}"
    ctx = err.get("ctx") or {}
    if kind == "literal_error":
        return f"{path} {words} {ctx.get('expected', '')}".rstrip()
    if kind in ("greater_than_equal", "less_than_equal"):
        bound = ctx.get("ge", ctx.get("le", ""))
        return f"{path} {words} {bound}"
    return f"{path} {words}"


def parse_body(model: type[M], raw: bytes) -> M:
    """Parse and validate a JSON request body.

    Raises:
        RequestError: not JSON, not an object, or breaks `model`'s schema; the
            message names the offending field.
    """
    try:
        data = json.loads(raw) if raw.strip() else None
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise RequestError("body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestError(describe_validation_error(exc)) from exc


# --------------------------------------------------------------------------
# Statuses and events (JSON-ready dicts)
# --------------------------------------------------------------------------


class RunnerEndpoint(TypedDict):
    host: str
    port: int
    protocol: Protocol
    url: NotRequired[str]


class StartingStatus(TypedDict):
    kind: Literal["starting"]


class RunningStatus(TypedDict):
    kind: Literal["running"]
    endpoints: NotRequired[list[RunnerEndpoint]]
    inspectUrl: NotRequired[str]


class ExitedStatus(TypedDict):
    kind: Literal["exited"]
    code: int


class FailedStatus(TypedDict):
    kind: Literal["failed"]
    message: str


class StoppedStatus(TypedDict):
    kind: Literal["stopped"]


RunStatus = StartingStatus | RunningStatus | ExitedStatus | FailedStatus | StoppedStatus

TERMINAL_KINDS = frozenset({"exited", "failed", "stopped"})


def is_terminal(status: RunStatus) -> bool:
    """`exited`, `failed` and `stopped` are terminal: the status never changes again."""
    return status["kind"] in TERMINAL_KINDS


def starting() -> StartingStatus:
    return {"kind": "starting"}


def running(
    endpoints: list[RunnerEndpoint] | None = None, inspect_url: str | None = None
) -> RunningStatus:
    status: RunningStatus = {"kind": "running"}
    if endpoints:
        status["endpoints"] = endpoints
    if inspect_url:
        status["inspectUrl"] = inspect_url
    return status


def exited(code: int) -> ExitedStatus:
    return {"kind": "exited", "code": code}


def failed(message: str) -> FailedStatus:
    return {"kind": "failed", "message": message}


def stopped() -> StoppedStatus:
    return {"kind": "stopped"}


class OutputEvent(TypedDict):
    type: Literal["stdout", "stderr"]
    chunk: str


class StatusEvent(TypedDict):
    type: Literal["status"]
    status: RunStatus


class ProgressEvent(TypedDict):
    type: Literal["progress"]
    phase: RunPhase
    message: str
    done: NotRequired[bool]


class DebugEvent(TypedDict):
    type: Literal["debug"]
    frame: dict[str, Any]


class ReachabilityEvent(TypedDict):
    type: Literal["reachability"]
    port: int
    state: Reachability


RunEvent = OutputEvent | StatusEvent | ProgressEvent | DebugEvent | ReachabilityEvent


def status_event(status: RunStatus) -> StatusEvent:
    return {"type": "status", "status": status}


def progress_event(phase: RunPhase, message: str, done: bool | None = None) -> ProgressEvent:
    event: ProgressEvent = {"type": "progress", "phase": phase, "message": message}
    if done is not None:
        event["done"] = done
    return event


def reachability_event(port: int, state: Reachability) -> ReachabilityEvent:
    return {"type": "reachability", "port": port, "state": state}


def debug_event(frame: dict[str, Any]) -> DebugEvent:
    return {"type": "debug", "frame": frame}


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
