"""One shared pod watch for every session, fanned out by pod name.

Owns `Reflector`, client-go's list-then-watch loop over a small
`ListerWatcher` protocol (`ClientListerWatcher` is the apiserver's, through
`client.KubeClient`; tests pass a fake), writing into a `podcache.PodCache`
(the store and the fan-out, with its consistency contract); and
`PodInformer`, the three put together for the backend: `subscribe`, `pods`,
`synced`, `refused` and `run`.

The reflector loop (client-go's `tools/cache/reflector.go`): list; watch
the namespace from the list's resourceVersion with bookmarks, remembering the
RV of every event (bookmarks included); a stream that ends is re-opened from
that RV; an `ERROR` 410 (the RV was compacted away) or an HTTP 410 re-lists;
any other failure backs off (capped, jittered) and re-lists; and every
`relist_interval_s` the watch is dropped and the namespace re-listed anyway,
which heals a stream that went silently stale. One watch stream to the
apiserver, whatever the number of sessions. Each watch that ends and is
started again is counted in the metrics (`watch_restart`, reason
`closed`, `broken`, `expired`, `relist_interval` or `error`), each re-list
after a 410 too (`relist`).

The consumers' consistency contract (subscribe-then-snapshot, coalescing,
what proves a pod `GONE`) is `podcache`'s.

Resource handling: `run` is a long-lived task; start it with `nursery.start`
(it reports started at once: the daemon's boot never waits on the
apiserver). Cancelling it closes the watch stream.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any, Protocol

import trio

import runnerd.kube.errors as errors
from runnerd.kube.client import KubeClient
from runnerd.kube.podcache import GONE, Pod, PodCache, PodState, PodSubscription, resource_version
from runnerd.kube.policy import Policy, backoff_s
from runnerd.metrics import Metrics

__all__ = [
    "GONE",
    "ClientListerWatcher",
    "ListerWatcher",
    "PodInformer",
    "PodState",
    "PodSubscription",
    "Reflector",
]

log = logging.getLogger(__name__)

OPERATION = "could not watch the session pods"
# A clean end this soon, with no event, is a server refusing quietly: back off.
SHORT_WATCH_S = 1.0

Events = AbstractAsyncContextManager[AsyncIterator[Mapping[str, Any]]]


class ListerWatcher(Protocol):
    """What the reflector needs of an apiserver, for one selection of pods.

    Error handling: both raise `errors.KubeError` only: `Gone` when
    `resource_version` is too old (a 410: re-list), `Unreachable` for a
    stream that broke, anything else for a refusal.
    """

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        """Every selected pod, and the list's resourceVersion."""
        ...

    def watch(self, resource_version: str, timeout_s: int) -> Events:
        """Watch events (`{"type", "object"}`, bookmarks included) after
        `resource_version`; the iterator ends when the server ends the stream."""
        ...


class ClientListerWatcher:
    """The `ListerWatcher` of the pods matching `label_selector`, through `client`."""

    def __init__(self, client: KubeClient, label_selector: str) -> None:
        self._client = client
        self._selector = label_selector

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        return await self._client.list_pods(label_selector=self._selector, operation=OPERATION)

    def watch(self, resource_version: str, timeout_s: int) -> Events:
        params = {
            "labelSelector": self._selector,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_s),
        }
        return self._client.open_watch(self._client.pods_path(), params, operation=OPERATION)


class Reflector:
    """Keeps `cache` equal to what `source` holds (module docstring)."""

    def __init__(
        self,
        source: ListerWatcher,
        cache: PodCache,
        metrics: Metrics,
        *,
        relist_interval_s: float = 300.0,
        watch_timeout_s: int = 290,
        policy: Policy | None = None,
    ) -> None:
        self._source = source
        self._cache = cache
        self._metrics = metrics
        self._relist_interval_s = relist_interval_s
        self._watch_timeout_s = watch_timeout_s
        self._policy = policy or Policy()
        # The apiserver's refusal of the list or the watch (RBAC), until a list
        # succeeds: a start that times out names it (client-safe text).
        self.refused: errors.KubeError | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """List and watch until cancelled. Never raises but `Cancelled`:
        every apiserver failure is logged and retried with backoff."""
        task_status.started()
        attempt = 0
        metrics = self._metrics
        while True:
            watching = False
            try:
                rv = await self._relist()
                attempt, self.refused, watching = 0, None, True
                with trio.move_on_after(self._relist_interval_s) as interval:
                    await self._watch_from(rv)
                reason = "relist_interval" if interval.cancelled_caught else "expired"
            except errors.KubeError as exc:
                if isinstance(exc, (errors.Forbidden, errors.Unauthorized)):
                    self.refused = exc
                log.warning("pod watch failed; re-listing error=%s", exc, exc_info=exc.__cause__)
                reason = "error"
                await trio.sleep(backoff_s(attempt, self._policy, None))
                attempt += 1
            if watching:
                metrics.watch_restart("pods", reason)
            if reason == "expired":
                metrics.relist("pods")

    async def _relist(self) -> str:
        generation = self._cache.begin_list()
        items, rv = await self._source.list()
        self._cache.replace(items, generation)
        return rv

    async def _watch_from(self, rv: str) -> None:
        """Watch from `rv` until a 410 asks for a re-list (returns) or an error (raises)."""
        attempt = 0
        while True:
            started, seen = trio.current_time(), 0
            timeout = int(self._watch_timeout_s * random.uniform(0.8, 1.0)) or 1
            try:
                async with self._source.watch(rv, timeout) as events:
                    async for event in events:
                        seen += 1
                        next_rv = self._handle(event)
                        if next_rv is None:
                            return  # 410: the caller re-lists
                        rv = next_rv or rv
                reason = "closed"  # the server ended it (timeoutSeconds, a shutdown)
            except errors.Gone:
                return
            except errors.Unreachable as exc:
                # The stream broke (a cut, a restart): resume from the last RV.
                log.info("pod watch interrupted; resuming error=%s", exc)
                seen, reason = 0, "broken"
            self._metrics.watch_restart("pods", reason)
            if seen == 0 and trio.current_time() - started < SHORT_WATCH_S:
                await trio.sleep(backoff_s(attempt, self._policy, None))
                attempt += 1
            else:
                attempt = 0

    def _handle(self, event: Mapping[str, Any]) -> str | None:
        """Apply one watch event; the RV to resume from ("" keeps the old one),
        or None when the stream said 410 (re-list)."""
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(obj, Mapping):
            return ""
        if kind == "ERROR":
            if obj.get("code") == 410 or obj.get("reason") in ("Expired", "Gone"):
                return None
            raise errors.classify_answer(
                OPERATION, int(obj.get("code") or 500), json.dumps(obj).encode()
            )
        if kind in ("ADDED", "MODIFIED"):
            self._cache.apply(obj)
        elif kind == "DELETED":
            self._cache.remove(obj)
        return resource_version(obj)


class PodInformer:
    """The shared list+watch of the pods `label_selector` matches: a
    `Reflector` over the apiserver into a `PodCache` (module docstring)."""

    def __init__(
        self,
        client: KubeClient,
        label_selector: str,
        *,
        relist_interval_s: float = 300.0,
        watch_timeout_s: int = 290,
        policy: Policy | None = None,
    ) -> None:
        self._cache = PodCache()
        self._reflector = Reflector(
            ClientListerWatcher(client, label_selector),
            self._cache,
            client.metrics,
            relist_interval_s=relist_interval_s,
            watch_timeout_s=watch_timeout_s,
            policy=policy,
        )

    @contextmanager
    def subscribe(self, name: str) -> Iterator[PodSubscription]:
        """`PodCache.subscribe`: the contract is `podcache`'s."""
        with self._cache.subscribe(name) as sub:
            yield sub

    def pods(self) -> list[Pod]:
        """Every managed pod in the cache now (e.g. for the reaper)."""
        return self._cache.pods()

    @property
    def synced(self) -> bool:
        """Whether the first list has been applied (before it, `pods()` is empty
        because nothing is known, not because there are no pods)."""
        return self._cache.synced

    async def wait_synced(self) -> None:
        """Return once the first list has been applied."""
        await self._cache.wait_synced()

    @property
    def subscriber_count(self) -> int:
        return self._cache.subscriber_count

    @property
    def refused(self) -> errors.KubeError | None:
        """The apiserver's refusal of the list or watch, until a list succeeds."""
        return self._reflector.refused

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """`Reflector.run`: list and watch until cancelled."""
        await self._reflector.run(task_status=task_status)
