"""Fault injection and accounting: what tests switch on, and what the apiserver counts.

`Faults` is the test-facing switchboard (every method is synchronous unless it must
touch the network); the apiserver consults it on each request. `Stats` counts what
clients did; `snapshot()` is also served as JSON at `/_kubesim/stats`.
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from tests.kubesim import status
from tests.kubesim.store import Store
from tests.kubesim.validation import default_quota


@dataclass
class _Failure:
    remaining: int
    code: int
    retry_after_s: int | None
    verb: str | None


@dataclass
class _Delay:
    remaining: int
    delay_s: float
    verb: str | None


@dataclass
class Stats:
    """Counters since start (a restart keeps them); README "Accounting" defines each.

    `requests` and `responses` cover the Kubernetes API only (never `/_kubesim/*`): a
    request counts when it arrives (also one a silent server never answers), its
    response when the status line is sent, so a watch, log stream or upgrade counts
    as it starts. Streams are also counted on their own (`watches_*`, `attaches_*`).
    """

    requests: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    watches_open: int = 0
    watches_total: int = 0
    connections_accepted: int = 0
    # Connections reset at once while the server was down (`restart(down_s)`).
    connections_refused: int = 0
    tls_handshakes: int = 0
    # Keep-alive connections the client closed while idle between requests.
    connections_closed_idle: int = 0
    attaches_open: int = 0
    attaches_total: int = 0
    # Which subprotocol each attach/exec WebSocket agreed on: proves a client spoke v5.
    attaches_by_protocol: collections.Counter[str] = field(default_factory=collections.Counter)
    responses: collections.Counter[int] = field(default_factory=collections.Counter)
    _changed: trio.lowlevel.ParkingLot = field(default_factory=trio.lowlevel.ParkingLot)

    def note(self) -> None:
        """Wake `wait_until` callers: a request arrived, a stream opened or closed, or
        a response went out."""
        self._changed.unpark_all()

    async def wait_until(self, predicate: Callable[[Stats], bool]) -> None:
        """Return once `predicate(self)` holds (checked at every request, every
        open/close of a stream and every response)."""
        while not predicate(self):
            await self._changed.park()

    def count(self, verb: str, pattern: str) -> int:
        return self.requests[(verb, pattern)]

    def count_response(self, code: int) -> None:
        self.responses[code] += 1
        self.note()

    def snapshot(self) -> dict[str, Any]:
        by_verb: collections.Counter[str] = collections.Counter()
        for (verb, _), n in self.requests.items():
            by_verb[verb] += n
        return {
            "requests": [
                {"verb": v, "path": p, "count": n} for (v, p), n in sorted(self.requests.items())
            ],
            "requestsByVerb": dict(sorted(by_verb.items())),
            "responses": {str(k): v for k, v in sorted(self.responses.items())},
            "watches": {"open": self.watches_open, "total": self.watches_total},
            "connections": {
                "accepted": self.connections_accepted,
                "tls": self.tls_handshakes,
                "closedIdle": self.connections_closed_idle,
            },
            "attaches": {
                "open": self.attaches_open,
                "total": self.attaches_total,
                "byProtocol": dict(sorted(self.attaches_by_protocol.items())),
            },
        }


class Faults:
    """Switch failures on and off; the apiserver and server read these on every request."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._failures: list[_Failure] = []
        self._delays: list[_Delay] = []
        self._expire_watches = 0
        self._denied: set[tuple[str, str, str | None]] = set()
        self._silent = trio.Event()
        self._silent.set()  # set = answering; cleared while silent
        self._silent_handshakes = False
        self.watch_cuts: set[Callable[[bool], None]] = set()
        self.attaches: set[Any] = set()  # open WebSocketConn objects
        self.restart_hook: Callable[..., Awaitable[None]] | None = None
        # The kubelet joins a container's streams this long after an attach's
        # upgrade: the window a real kubelet has between its 101 and the CRI
        # attach, in which output reaches the log but not that attach.
        self.attach_lag_s = 0.0

    # ---- watches -------------------------------------------------------------

    def cut_watches(self, *, abrupt: bool = False) -> int:
        """End every open watch stream now: cleanly (final chunk) or by closing TCP."""
        cuts = list(self.watch_cuts)
        for cut in cuts:
            cut(abrupt)
        return len(cuts)

    def expire_next_watch(self, count: int = 1) -> None:
        """The next `count` watches that resume from an RV get 200 + ERROR 410 Expired."""
        self._expire_watches += count

    def take_watch_expiry(self) -> bool:
        if self._expire_watches:
            self._expire_watches -= 1
            return True
        return False

    # ---- request failures ----------------------------------------------------

    def fail_next(
        self, count: int, code: int = 429, *, retry_after_s: int | None = 1, verb: str | None = None
    ) -> None:
        """Answer the next `count` requests (optionally only of `verb`) with 429/500/503.

        429 is the plain-text max-inflight answer with Retry-After; 500/503 are Status
        bodies, with Retry-After only when `retry_after_s` is given.
        """
        if code not in (429, 500, 503):
            raise ValueError(f"fail_next: code must be 429, 500 or 503, not {code}")
        self._failures.append(_Failure(count, code, retry_after_s, verb))

    def slow_next(self, count: int, delay_s: float, *, verb: str | None = None) -> None:
        """Delay the next `count` requests (optionally only of `verb`) by `delay_s`."""
        self._delays.append(_Delay(count, delay_s, verb))

    def take_delay(self, verb: str) -> float:
        for delay in self._delays:
            if delay.remaining and delay.verb in (None, verb):
                delay.remaining -= 1
                self._delays = [d for d in self._delays if d.remaining]
                return delay.delay_s
        return 0.0

    def take_failure(self, verb: str) -> status.ApiError | None:
        for failure in self._failures:
            if failure.remaining and failure.verb in (None, verb):
                failure.remaining -= 1
                self._failures = [f for f in self._failures if f.remaining]
                retry = failure.retry_after_s
                if failure.code == 429:
                    return status.too_many_requests(retry or 1)
                if failure.code == 500:
                    return status.internal_error("injected failure", retry_after_s=retry)
                return status.service_unavailable("injected failure", retry_after_s=retry)
        return None

    # ---- RBAC ------------------------------------------------------------------

    def deny(self, verb: str, resource: str, *, namespace: str | None = None) -> None:
        """RBAC: the token may no longer `verb` `resource` (e.g. "pods/attach")."""
        self._denied.add((verb, resource, namespace))

    def allow(self, verb: str, resource: str, *, namespace: str | None = None) -> None:
        self._denied.discard((verb, resource, namespace))

    def is_denied(self, verb: str, resource: str, namespace: str | None) -> bool:
        return (verb, resource, None) in self._denied or (verb, resource, namespace) in self._denied

    # ---- quota -----------------------------------------------------------------

    async def set_quota(self, namespace: str, name: str, hard: dict[str, str]) -> None:
        """Create or replace ResourceQuota `name` (enforced at pod create)."""
        quota = default_quota({"metadata": {"name": name}, "spec": {"hard": dict(hard)}})
        if self._store.get("resourcequotas", namespace, name) is None:
            await self._store.create("resourcequotas", namespace, quota)
        else:

            def replace(q: dict[str, Any]) -> None:
                q["spec"]["hard"] = dict(hard)

            await self._store.update("resourcequotas", namespace, name, replace)

    # ---- silence, restart, attaches ---------------------------------------------

    def go_silent(self, *, handshakes: bool = False) -> None:
        """Accept connections and requests, never answer (until `resume`).

        With `handshakes`, new connections also stall before the TLS handshake (a
        frozen process: the kernel accepts, nothing more), so clients see a connect
        timeout rather than a read timeout.
        """
        if self._silent.is_set():
            self._silent = trio.Event()
        self._silent_handshakes = handshakes

    def resume(self) -> None:
        self._silent.set()
        self._silent_handshakes = False

    @property
    def silent(self) -> bool:
        return not self._silent.is_set()

    async def wait_handshake_allowed(self) -> None:
        if self._silent_handshakes:
            await self._silent.wait()

    async def wait_answering(self) -> None:
        await self._silent.wait()

    async def restart(self, down_s: float = 0.0, *, graceful: bool = False) -> None:
        """Stop listening (closing every connection), wait `down_s`, listen on the same port.

        `graceful` ends watches cleanly first (an apiserver shutdown), else they are cut.
        """
        if self.restart_hook is None:
            raise RuntimeError("restart: the server is not running")
        await self.restart_hook(down_s, graceful=graceful)

    async def drop_attaches(self) -> int:
        """Cut every open attach/exec WebSocket without a close frame."""
        conns = list(self.attaches)
        for conn in conns:
            await conn.drop()
        return len(conns)
