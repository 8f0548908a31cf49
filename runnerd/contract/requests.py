"""The `/v1` request bodies and their validation. Pure.

Every body a route reads is a msgspec `Struct` here (strict: no coercion;
unknown fields are ignored at every level, as the contract says), with the
literal types its fields take. `parse_body` decodes one, after the checks
before the schema (`runnerd.contract.json_checks`: nesting depth, text UTF-8
can carry), and turns a validation failure into one client-readable line
naming the field (`body.env.FOO must be a string`). `runnerd.contract`
re-exports every name here.

No IO here, and nothing that imports trio, httpx or quart.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal, TypeVar, get_args

import msgspec
from msgspec import Meta, Struct

from runnerd.contract.json_checks import MAX_JSON_DEPTH, JsonCheckError, check_tree
from runnerd.errors import RunnerdError

PullPolicy = Literal["missing", "always", "never"]
Protocol = Literal["tcp", "udp"]
SessionMode = Literal["run", "watch"]
IoMode = Literal["tty", "streams"]

NonEmptyStr = Annotated[str, Meta(min_length=1)]


# --------------------------------------------------------------------------
# Request bodies (validated)
# --------------------------------------------------------------------------


class Body(Struct, frozen=True, kw_only=True):
    """A request body. Decoded strictly (a number is not a string, "1" is not
    an int). Unknown fields are ignored, not refused: the upstream runner's
    validator strips them, and real clients send more than we read (the Telo
    editor sends its whole runner config, `registryUrl` included, to
    `/v1/probe`).

    msgspec rather than pydantic: the same strict validation and JSON Schema,
    for a fraction of the start-up time and resident memory of a daemon that
    validates three small bodies.
    """


class SessionConfig(Body, frozen=True):
    image: NonEmptyStr
    pullPolicy: PullPolicy
    # Absent and blank both mean unset (see admission); null is not a string.
    registryUrl: str = ""


class BundleFile(Body, frozen=True):
    relativePath: NonEmptyStr
    contents: str


class RunBundle(Body, frozen=True):
    entryRelativePath: NonEmptyStr
    files: list[BundleFile]


class PortMapping(Body, frozen=True):
    port: Annotated[int, Meta(ge=1, le=65535)]
    protocol: Protocol


class SessionAppSpec(Body, frozen=True):
    """One app of a watch session. `io` absent is `tty`; the name's rules
    beyond its length (a DNS label, not reserved, unique) are admission's."""

    name: Annotated[str, Meta(min_length=1, max_length=63)]
    entryRelativePath: NonEmptyStr
    ports: list[PortMapping] | None = None
    io: IoMode | None = None


class StartSessionRequest(Body, frozen=True):
    """`POST /v1/sessions`. `bundle`/`config` are schema-optional because an
    app session needs neither; the route enforces them for bundle sessions.
    `apps` and `agent` are a watch session's (`mode: "watch"`)."""

    env: dict[str, str]
    bundle: RunBundle | None = None
    config: SessionConfig | None = None
    app: NonEmptyStr | None = None
    ports: list[PortMapping] | None = None
    inspect: bool | None = None
    mode: SessionMode = "run"
    apps: Annotated[list[SessionAppSpec], Meta(min_length=1)] | None = None
    agent: str | None = None


class ReplaceAppsRequest(Body, frozen=True):
    """`PUT /v1/sessions/{id}/apps`: the watch session's new app set."""

    apps: Annotated[list[SessionAppSpec], Meta(min_length=1)]


class StartAppSessionRequest(Body, frozen=True):
    """`POST /v1/apps/{name}/sessions`: the app comes from the path."""

    env: dict[str, str] | None = None
    ports: list[PortMapping] | None = None
    inspect: bool | None = None


class ProbeRequest(Body, frozen=True):
    """`POST /v1/probe`: the same config object a session takes."""

    config: SessionConfig


M = TypeVar("M", bound=Body)


class RequestError(RunnerdError, ValueError):
    """A body that is not JSON or breaks the schema. `message` names the field."""

    status_hint = 400
    code = "invalid_request"


# msgspec's error text is "<problem> - at `$<path>`"; each problem it can
# report for these bodies is rephrased for the person who sent the request.
_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_FIELD = re.compile(r"^Object (?P<kind>missing required|contains unknown) field `(?P<name>[^`]+)`$")
_EXPECTED = re.compile(r"^Expected `(?P<type>[a-z]+)[^`]*`(?P<rest>.*)$")
_TYPE_WORDS = {
    "str": "a string",
    "int": "an integer",
    "bool": "a boolean",
    "object": "an object",
    "array": "an array",
}
# The literal-typed fields, by name: msgspec reports the bad value, not the choices.
_CHOICES: dict[str, tuple[str, ...]] = {
    "pullPolicy": get_args(PullPolicy),
    "protocol": get_args(Protocol),
    "mode": get_args(SessionMode),
    "io": get_args(IoMode),
    "encoding": ("utf8", "base64"),
}


def _name_dict_keys(path: str, data: Any) -> str:
    """msgspec writes a dict value's position as `[...]`; name the key instead
    (the first whose value is not a string: every dict in these bodies is
    `{str: str}`)."""
    out, node = "", data
    for token in re.findall(r"\.[^.\[]+|\[[^\]]*\]", path):
        if token == "[...]" and isinstance(node, dict):
            key = next((k for k, v in node.items() if not isinstance(v, str)), None)
            if key is None:
                return out + path[len(out) :]
            out, node = f"{out}.{key}", node[key]
        elif token.startswith("[") and isinstance(node, list):
            out, node = out + token, node[int(token[1:-1])]
        elif token.startswith(".") and isinstance(node, dict):
            out, node = out + token, node.get(token[1:])
        else:
            out += token
    return out


def describe_validation_error(message: str, data: Any) -> str:
    """msgspec's validation message for `data` as one line: `body.<path> <problem>`."""
    m = _AT.match(message)
    what, path = (m["what"], m["path"] or "") if m else (message, "")
    where = "body" + _name_dict_keys(path, data)
    if field := _FIELD.match(what):
        missing = field["kind"] == "missing required"
        problem = "is required" if missing else "is not an allowed field"
        return f"{where}.{field['name']} {problem}"
    if what.startswith("Invalid enum value"):
        choices = _CHOICES.get(where.rsplit(".", 1)[-1])
        if choices:
            quoted = [f"'{c}'" for c in choices]
            return f"{where} must be one of {', '.join(quoted[:-1])} or {quoted[-1]}"
    if expected := _EXPECTED.match(what):
        rest = expected["rest"].strip()
        if rest.startswith(">= ") and expected["type"] == "int":
            return f"{where} must be at least {rest[3:]}"
        if rest.startswith("<= ") and expected["type"] == "int":
            return f"{where} must be at most {rest[3:]}"
        if rest == "of length >= 1":
            return f"{where} must not be empty"
        if rest.startswith("of length <= ") and expected["type"] == "str":
            return f"{where} must be at most {rest[13:]} characters"
        if rest.startswith(", got") and expected["type"] in _TYPE_WORDS:
            return f"{where} must be {_TYPE_WORDS[expected['type']]}"
    return f"{where}: {what}"


def parse_body(model: type[M], raw: bytes) -> M:
    """Parse and validate a JSON request body.

    Raises:
        RequestError: not JSON, nested too deep, holds text that is not
            valid Unicode, not an object, or breaks `model`'s schema; the
            message names the offending field or the limit.
    """
    try:
        data = json.loads(raw) if raw.strip() else None
    except RecursionError:
        raise RequestError(f"body nests deeper than the limit of {MAX_JSON_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise RequestError("body must be a JSON object")
    try:
        check_tree(data)
    except JsonCheckError as exc:
        raise RequestError(str(exc)) from None
    try:
        return msgspec.convert(data, type=model, strict=True)
    except msgspec.ValidationError as exc:
        raise RequestError(describe_validation_error(str(exc), data)) from exc
