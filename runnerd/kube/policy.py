"""When an apiserver call is retried, how long it waits, what verb it is. Pure.

Owns `Policy` (timeouts, backoff, the pool's size: each default justified)
and the decisions `exchange.Exchange`'s retry loop takes from it, so they are
tested as plain functions.

Retry policy, by `Retry` class:
- `READ` (GET, list, opening a watch): 429, 5xx and connection errors, with
  capped exponential backoff plus jitter, or the server's `Retry-After`.
- `WRITE` (create): only an answer that carried `Retry-After` (the server
  asks us to come back). Such a retry may find its own earlier attempt
  landed (a 504 after the write reached etcd): pods have fixed names, so a
  409 AlreadyExists is checked by label and taken as success
  (`client.KubeClient.create_pod`).
- `IDEMPOTENT` (delete by name): retried as `READ` is; a repeat that finds
  the pod gone gets 404, which is "done". A teardown delete lost to one reset
  connection would leak a pod until its deadline.
A 401 re-reads the credentials and is retried once, whatever the class (the
loop's own rule).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

RETRYABLE = frozenset({429, 500, 502, 503, 504})


class Retry(Enum):
    READ = "read"
    WRITE = "write"
    IDEMPOTENT = "idempotent"


@dataclass(frozen=True)
class Policy:
    """Timeouts and backoff. Defaults suit a daemon: short enough that a
    dead apiserver is reported within half a minute, long enough to ride out
    an apiserver restart (a few seconds) without failing a session."""

    connect_timeout_s: float = 5.0
    read_timeout_s: float = 15.0
    deadline_s: float = 30.0
    backoff_base_s: float = 0.2
    backoff_cap_s: float = 5.0
    # Honour a server's Retry-After up to this; beyond it, the deadline decides.
    retry_after_cap_s: float = 10.0
    # A watch that sends nothing (not even a bookmark) for this long is dead:
    # the server-side timeout we ask for is shorter, so a live stream ends first.
    watch_idle_s: float = 120.0
    # Pooled connections: one per open watch plus a handful for requests.
    max_connections: int = 16
    # An idle pooled connection is kept this long (client-go's IdleConnTimeout),
    # not httpx's 5 s: sessions end and start seconds apart, and each request
    # after a pause would otherwise pay a new TCP connection and TLS handshake.
    keepalive_expiry_s: float = 90.0


def backoff_s(attempt: int, policy: Policy, retry_after_s: float | None) -> float:
    """The wait before retry number `attempt` (0-based): the server's
    Retry-After when it sent one, else full-range jittered exponential backoff
    (half to all of `base * 2**attempt`, capped), so a herd of clients spreads."""
    if retry_after_s is not None:
        return min(retry_after_s, policy.retry_after_cap_s)
    ceiling = min(policy.backoff_cap_s, policy.backoff_base_s * 2**attempt)
    return random.uniform(ceiling / 2, ceiling)


def parse_retry_after(value: str | None) -> float | None:
    """A `Retry-After` header's seconds (None: absent or not a number)."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP-date: rare from an apiserver; fall back to backoff


def should_retry(retry: Retry, status: int | None, retry_after: float | None) -> bool:
    """Whether a call of class `retry` tries again after an answer `status`
    (None: no answer, a connection error or a read timeout)."""
    if status is None:
        return retry is not Retry.WRITE
    if status not in RETRYABLE:
        return False
    return retry is not Retry.WRITE or retry_after is not None


# Verbs by method for what is not a GET (a GET is `get`, `list` or `watch`).
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def kube_verb(method: str, path: str, params: Mapping[str, str] | None) -> str:
    """The Kubernetes verb of a request: a GET of a collection (`.../pods`,
    one segment past the namespace or the group version) is `list`, of a
    named object or its subresource (`.../pods/NAME/log`) `get`, with
    `watch=1` `watch`."""
    if method != "GET":
        return _VERBS.get(method, method.lower())
    if params and params.get("watch") in ("1", "true"):
        return "watch"
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    scope = parts.index("namespaces") + 2 if "namespaces" in parts else len(parts)
    if scope < len(parts):  # .../namespaces/NS/RESOURCE...
        rest = parts[scope:]
    else:  # cluster-scoped: /api/v1/RESOURCE... or /apis/GROUP/VERSION/RESOURCE...
        rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    return "list" if len(rest) <= 1 else "get"
