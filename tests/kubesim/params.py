"""Reading a request the way the apiserver does: verb, integers, object and DeleteOptions bodies.

Pure; each bad input becomes the `status.ApiError` the apiserver would answer with.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from tests.kubesim import protobuf, status
from tests.kubesim.discovery import Kind
from tests.kubesim.protobuf import ProtobufError
from tests.kubesim.wire import Request

Obj = dict[str, Any]


def verb_of(req: Request, named: bool, sub: str | None) -> str:
    """The authorization verb, as the apiserver's RequestInfo derives it."""
    method = req.method
    if sub in ("attach", "exec"):
        return "create" if method == "POST" else "get"
    if method == "GET":
        if req.flag("watch"):
            return "watch"
        return "get" if named else "list"
    return {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }.get(method, method.lower())


def int_param(req: Request, name: str) -> int | None:
    raw = req.param(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise status.bad_request(f"invalid value for {name}: {raw!r}: not an integer") from exc


BODY_TYPES = ("application/json", "application/yaml")
PROTOBUF = "application/vnd.kubernetes.protobuf"


def _media_type(req: Request) -> str:
    return req.headers.get("content-type", "").split(";")[0].strip().lower()


def parse_body(req: Request) -> Any:
    """A JSON or YAML body by its Content-Type (none = JSON, as NegotiateInputSerializer does).

    Any other type → 415 naming the accepted ones (the real Status).
    """
    media = _media_type(req)
    if media not in ("", *BODY_TYPES):
        raise status.unsupported_media_type(BODY_TYPES)
    try:
        if media == "application/yaml":
            return yaml.safe_load(req.body or b"null")
        return json.loads(req.body or b"null")
    except (ValueError, yaml.YAMLError) as exc:
        raise status.bad_request(f"couldn't get version/kind; json parse error: {exc}") from exc


def parse_object(req: Request, kind: Kind) -> Obj:
    """The object of a create or PUT: JSON, YAML, or protobuf for the kinds protobuf.py knows."""
    if _media_type(req) == PROTOBUF and kind.kind in protobuf.KINDS:
        try:
            obj: Any = protobuf.decode_object(req.body)[2]
        except ProtobufError as exc:
            raise status.bad_request(str(exc)) from exc
    elif _media_type(req) == PROTOBUF:
        raise status.unsupported_media_type(BODY_TYPES)
    else:
        obj = parse_body(req)
    if not isinstance(obj, dict):
        raise status.bad_request("the body of the request was in an unknown format")
    if obj.get("kind") not in (None, kind.kind) or obj.get("apiVersion") not in (
        None,
        kind.api_version,
    ):
        raise status.bad_request(
            f"the API version in the data ({obj.get('apiVersion')}) does not match the expected "
            f"API version ({kind.api_version})"
            if obj.get("apiVersion") not in (None, kind.api_version)
            else f"the kind in the data ({obj.get('kind')}) does not match the expected kind "
            f"({kind.kind})"
        )
    return obj


PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")


def delete_options(req: Request) -> tuple[int | None, str]:
    """gracePeriodSeconds/propagationPolicy from a DeleteOptions body, else the query."""
    if req.body.strip():
        opts = parse_body(req)
        if not isinstance(opts, dict):
            raise status.bad_request("the body of the request was in an unknown format")
        grace, policy = opts.get("gracePeriodSeconds"), opts.get("propagationPolicy")
    else:
        grace, policy = int_param(req, "gracePeriodSeconds"), req.param("propagationPolicy")
    if policy is not None and policy not in PROPAGATION_POLICIES:
        supported = ", ".join(f'"{p}"' for p in PROPAGATION_POLICIES) + ', "nil"'
        raise status.invalid(
            "DeleteOptions",
            "",
            [
                (
                    "FieldValueNotSupported",
                    "propagationPolicy",
                    f'Unsupported value: "{policy}": supported values: {supported}',
                )
            ],
            group="meta.k8s.io",
        )
    if grace is not None and not isinstance(grace, int):
        raise status.bad_request(f"invalid gracePeriodSeconds: {grace!r}")
    return grace, policy or "Background"
