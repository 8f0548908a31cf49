"""Apiserver errors, classified for the person who asked for a session. Pure.

Owns `classify` (an HTTP status plus the answer's body → one typed
`KubeError`), the typed errors themselves, and `start_error` (a `KubeError` as
the seam's `StartError`).

What a client may read, and why: the operation that was refused, the HTTP
status, and the `Status` object's one-word `reason` (`Forbidden`, `NotFound`).
Never the `Status` message, the body or the response headers: those name the
runner's service account, carry audit ids and flow-schema uids, none of which
an end user can act on. The message is READ here (a quota 403 and an RBAC 403
are both `403 Forbidden`, and only the admission message tells them apart) and
never echoed. The raw answer rides along as the error's `__cause__`
(`ApiAnswer`), so the detail moves to the log; it is not swallowed.

No IO here: no trio, no httpx.
"""

from __future__ import annotations

import json
import re
from enum import Enum
from typing import Any

from runnerd.backend import StartError

UNREACHABLE = "the Kubernetes API could not be reached"

# A quota admission refusal: `exceeded quota: NAME, …` or `… is forbidden:
# failed quota: NAME: must specify …`.
_QUOTA = re.compile(r"exceeded quota|forbidden: failed quota", re.I)
# An authorizer's refusal: `… is forbidden: User "…" cannot create resource …`.
_RBAC = re.compile(r"\bis forbidden: User\b|\bcannot \w+ resource\b", re.I)


class Refusal(Enum):
    """Which of the things a 401/403 means, and so who can act on it."""

    QUOTA = "quota"  # the namespace is full: wait, or the operator raises the quota
    RBAC = "rbac"  # the runner's identity may not do this: the operator fixes RBAC
    OTHER = "other"  # anything else: the neutral wording rather than a guess


class ApiAnswer(Exception):
    """The apiserver's raw answer, for the log only (chained as `__cause__`).

    Holds the body text (which may name cluster identities), never the headers
    (audit ids, flow-schema uids): nothing reads those, so nothing keeps them.
    """

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:2000]}")
        self.status = status
        self.body = body


class KubeError(Exception):
    """A Kubernetes API call that failed. `str(err)` is client-safe.

    `operation` is the client-facing phrase of what was attempted ("could not
    create the session pod"); `status` the HTTP status (None when no answer
    came back); `reason` the Status `reason` word, if any.
    """

    def __init__(
        self,
        operation: str,
        status: int | None = None,
        reason: str | None = None,
        refusal: Refusal | None = None,
    ) -> None:
        self.operation = operation
        self.status = status
        self.reason = reason
        self.refusal = refusal
        super().__init__(f"{operation}: {describe(status, reason, refusal)}")


class Unreachable(KubeError):
    """No HTTP answer at all: refused, reset, timed out, TLS failure."""


class NoCredentials(KubeError):
    """The runner's own credentials could not be obtained (an unreadable token
    file, a failing exec plugin): nothing was sent. The detail is chained."""

    def __init__(self, operation: str) -> None:
        super().__init__(operation)
        self.args = (
            f"{operation}: the runner's Kubernetes credentials are not usable. "
            "The cluster operator must check its kubeconfig.",
        )

    def __str__(self) -> str:
        return str(self.args[0])


class Unauthorized(KubeError):
    """401: the credentials were refused."""


class Forbidden(KubeError):
    """403: RBAC or admission (quota) said no; `refusal` says which."""


class NotFound(KubeError):
    """404."""


class AlreadyExists(KubeError):
    """409 with reason AlreadyExists (a create of a name that exists)."""


class Conflict(KubeError):
    """409 otherwise (a stale resourceVersion)."""


class Gone(KubeError):
    """410: a resourceVersion or continue token too old; re-list."""


class Invalid(KubeError):
    """422: the object was rejected by validation."""


class TooManyRequests(KubeError):
    """429."""


class ServerError(KubeError):
    """5xx."""


def describe(status: int | None, reason: str | None, refusal: Refusal | None) -> str:
    """The client-safe phrase for an answer (or for no answer)."""
    if status is None:
        return UNREACHABLE
    detail = f"{reason}, HTTP {status}" if reason else f"HTTP {status}"
    if refusal is Refusal.QUOTA:
        return f"the session namespace's resource quota is exhausted ({detail})"
    if refusal is Refusal.RBAC:
        return (
            f"the runner is not permitted to do this ({detail}). "
            "The cluster operator must check the runner's RBAC."
        )
    return f"the Kubernetes API rejected the request ({detail})"


def parse_status(body: bytes | str | None) -> dict[str, Any] | None:
    """The body as a JSON object (a `Status`), or None (plain text, empty, garbage)."""
    if body is None:
        return None
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return parsed if isinstance(parsed, dict) else None


def refusal_of(status: int, body: dict[str, Any] | None) -> Refusal | None:
    """For a 401/403, what refused; None for every other status.

    A quota message wins; a message that reads like an authorizer's (or no
    message at all: nothing else answers 401/403 without one) is RBAC; any
    other message is `OTHER`.
    """
    if status not in (401, 403):
        return None
    message = body.get("message") if body else None
    if isinstance(message, str) and _QUOTA.search(message):
        return Refusal.QUOTA
    if not isinstance(message, str) or _RBAC.search(message):
        return Refusal.RBAC
    return Refusal.OTHER


def _reason_of(body: dict[str, Any] | None) -> str | None:
    reason = body.get("reason") if body else None
    if isinstance(reason, str) and reason.strip():
        # One word by contract; anything else is not passed on.
        word = reason.strip()
        return word if re.fullmatch(r"[A-Za-z]{1,64}", word) else None
    return None


def _error_type(status: int, reason: str | None) -> type[KubeError]:
    if status == 409:
        return AlreadyExists if reason == "AlreadyExists" else Conflict
    if status >= 500:
        return ServerError
    return _BY_STATUS.get(status, KubeError)


_BY_STATUS: dict[int, type[KubeError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def classify(operation: str, status: int | None, body: bytes | str | None = None) -> KubeError:
    """One typed, client-safe error for an apiserver answer.

    `status` None means no HTTP answer came back (`Unreachable`). A status
    outside 100–599 is not an HTTP status and is treated the same way. The
    caller raises the result `from` the original (an `ApiAnswer` for a
    response, the transport error otherwise) so the log keeps the detail.
    """
    if status is None or not 100 <= status <= 599:
        return Unreachable(operation)
    parsed = parse_status(body)
    reason = _reason_of(parsed)
    return _error_type(status, reason)(operation, status, reason, refusal_of(status, parsed))


def classify_answer(operation: str, status: int, body: bytes) -> KubeError:
    """`classify` with the raw answer chained as `__cause__` (for the log)."""
    error = classify(operation, status, body)
    error.__cause__ = ApiAnswer(status, body.decode("utf-8", "replace"))
    return error


def error_class(error: KubeError | None) -> str:
    """The metrics label for an answer: `ok` (None: a 2xx), the refusal's
    blame for a 401/403 that has one (`quota`, `rbac`), else the error type
    in snake case (`not_found`, `unreachable`, `server_error`, ...), `other`
    for a status with no type of its own (a 400)."""
    if error is None:
        return "ok"
    if type(error) is KubeError:
        return "other"
    if error.refusal is Refusal.QUOTA or error.refusal is Refusal.RBAC:
        return str(error.refusal.value)
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(error).__name__).lower()


def start_error(error: KubeError, stage: str) -> StartError:
    """A `KubeError` as the seam's `StartError`, the Kubernetes detail chained."""
    start = StartError(stage, str(error))
    start.__cause__ = error
    return start
