"""metav1.Status error bodies, byte-for-byte as the real apiserver writes them (pure).

Field order is Go struct order (`metav1.Status`): kind, apiVersion,
metadata, status, message, reason, details, code; details: name, group, kind,
uid, causes, retryAfterSeconds, each omitted when empty. `details.kind` is the
resource (`pods`) except in Invalid, where it is the Kind (`Pod`).

`ApiError` carries one such body plus its HTTP code and extra headers; the
apiserver raises it anywhere and renders it once, at the edge.
"""

from __future__ import annotations

import json
from typing import Any

Obj = dict[str, Any]


class ApiError(Exception):
    """An HTTP error answer: `code`, a Status `body` (or raw bytes), extra headers."""

    def __init__(
        self,
        code: int,
        body: Obj | bytes,
        *,
        headers: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> None:
        super().__init__(body.get("message") if isinstance(body, dict) else body)
        self.code = code
        self.body = body
        self.headers = headers or []
        self.content_type = content_type

    def render(self) -> bytes:
        return encode(self.body) if isinstance(self.body, dict) else self.body


_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def encode(obj: Any) -> bytes:
    """Go encoding/json style: compact, HTML-escaped, with the Encoder's trailing newline.

    The characters escaped only ever occur inside JSON strings, so translating the
    whole text is safe.
    """
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return text.translate(_GO_ESCAPES).encode() + b"\n"


def build_status(
    code: int,
    reason: str,
    message: str,
    *,
    name: str | None = None,
    group: str | None = None,
    kind: str | None = None,
    causes: list[Obj] | None = None,
    retry_after_s: int | None = None,
) -> Obj:
    details: Obj = {}
    for key, value in (
        ("name", name),
        ("group", group),
        ("kind", kind),
        ("causes", causes),
        ("retryAfterSeconds", retry_after_s),
    ):
        if value:
            details[key] = value
    status: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details:
        status["details"] = details
    status["code"] = code
    return status


def _qualified(resource: str, group: str) -> str:
    """GroupResource.String(): `pods`, `ingresses.networking.k8s.io`."""
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    msg = f"{_qualified(resource, group)} {json.dumps(name)} not found"
    return ApiError(404, build_status(404, "NotFound", msg, name=name, group=group, kind=resource))


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    msg = f"{_qualified(resource, group)} {json.dumps(name)} already exists"
    body = build_status(409, "AlreadyExists", msg, name=name, group=group, kind=resource)
    return ApiError(409, body)


def invalid(kind: str, name: str, errors: list[tuple[str, str, str]], group: str = "") -> ApiError:
    """422: `errors` are (cause reason, field path, ErrorBody) per field error."""
    rendered = [f"{path}: {body}" for _, path, body in errors]
    agg = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    group_kind = f"{kind}.{group}" if group else kind
    msg = f"{group_kind} {json.dumps(name)} is invalid: {agg}"
    causes = [{"reason": r, "message": body, "field": path} for r, path, body in errors]
    body = build_status(422, "Invalid", msg, name=name, group=group, kind=kind, causes=causes)
    return ApiError(422, body)


def forbidden(resource: str, name: str | None, inner: str, group: str = "") -> ApiError:
    """403: `%s is forbidden: …` or `%s %q is forbidden: …` when a name is known."""
    who = _qualified(resource, group)
    head = f"{who} {json.dumps(name)}" if name else who
    body = build_status(
        403, "Forbidden", f"{head} is forbidden: {inner}", name=name, group=group, kind=resource
    )
    return ApiError(403, body)


def rbac_inner(user: str, verb: str, resource: str, group: str, ns: str | None) -> str:
    scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
    return (
        f"User {json.dumps(user)} cannot {verb} resource {json.dumps(resource)} "
        f"in API group {json.dumps(group)} {scope}"
    )


def conflict(resource: str, name: str, group: str = "") -> ApiError:
    msg = (
        f"Operation cannot be fulfilled on {_qualified(resource, group)} {json.dumps(name)}: "
        "the object has been modified; please apply your changes to the latest version and "
        "try again"
    )
    return ApiError(409, build_status(409, "Conflict", msg, name=name, group=group, kind=resource))


def unsupported_media_type(accepted: tuple[str, ...]) -> ApiError:
    """A body in a format this endpoint does not decode (`negotiation.errUnsupportedMediaType`)."""
    msg = (
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted)
    )
    return ApiError(415, build_status(415, "UnsupportedMediaType", msg))


def bad_request(message: str) -> ApiError:
    return ApiError(400, build_status(400, "BadRequest", message))


def unauthorized() -> ApiError:
    return ApiError(401, build_status(401, "Unauthorized", "Unauthorized"))


def expired(message: str) -> Obj:
    return build_status(410, "Expired", message)


def too_many_requests(retry_after_s: int = 1) -> ApiError:
    """The max-inflight / APF 429: plain text, not a Status (§3.2)."""
    return ApiError(
        429,
        b"Too many requests, please try again later.\n",
        headers=[("Retry-After", str(retry_after_s))],
        content_type="text/plain; charset=utf-8",
    )


def internal_error(message: str, *, retry_after_s: int | None = None) -> ApiError:
    body = build_status(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        causes=[{"message": message}],
        retry_after_s=retry_after_s,
    )
    return ApiError(500, body, headers=_retry_header(retry_after_s))


def service_unavailable(message: str, *, retry_after_s: int | None = None) -> ApiError:
    body = build_status(503, "ServiceUnavailable", message, retry_after_s=retry_after_s)
    return ApiError(503, body, headers=_retry_header(retry_after_s))


def method_not_allowed() -> ApiError:
    msg = "the server does not allow this method on the requested resource"
    return ApiError(405, _with_empty_details(build_status(405, "MethodNotAllowed", msg)))


def _retry_header(retry_after_s: int | None) -> list[tuple[str, str]]:
    return [("Retry-After", str(retry_after_s))] if retry_after_s else []


def path_not_found() -> ApiError:
    """Unknown path or resource: the generic NotFound, whose details is `{}` (not omitted)."""
    body = build_status(404, "NotFound", "the server could not find the requested resource")
    return ApiError(404, _with_empty_details(body))


def _with_empty_details(body: Obj) -> Obj:
    """Generic server responses carry `details: {}` (a non-nil empty pointer in Go)."""
    code = body.pop("code")
    return body | {"details": {}, "code": code}
