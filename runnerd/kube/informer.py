"""One shared pod watch for every session, fanned out by pod name.

Owns `PodInformer`: a cache of the pods runnerd manages (the managed-by label
selector), kept by list-then-watch, and `PodSubscription`, one consumer's
view of one pod.

The reflector loop (client-go's `tools/cache/reflector.go`): list; watch
the namespace from the list's resourceVersion with bookmarks, remembering the
RV of every event (bookmarks included); a stream that ends is re-opened from
that RV; an `ERROR` 410 (the RV was compacted away) or an HTTP 410 re-lists;
any other failure backs off (capped, jittered) and re-lists; and every
`relist_interval_s` the watch is dropped and the namespace re-listed anyway,
which heals a stream that went silently stale. One watch stream to the
apiserver, whatever the number of sessions. Each watch that ends and is
started again is counted in the client's metrics (`watch_restart`, reason
`closed`, `broken`, `expired`, `relist_interval` or `error`), each re-list
after a 410 too (`relist`).

Consistency contract (load-bearing for the session's pod-watch task):
- `subscribe(name)` registers the subscription and takes the cache's current
  pod as its first state, with no checkpoint in between: every change applied
  to the cache after that is delivered. Subscribe first, then read `next()`;
  nothing that happens after `subscribe` returns can be missed.
- Deliveries coalesce: `next()` returns the LATEST state since the previous
  `next()`, never a queue. Pod status is state, not a log: the newest object
  says everything an older one did. A slow consumer cannot slow the informer.
- A state is the pod (a dict) or `GONE`: a watch DELETED, or a list that
  STARTED after the subscription and does not contain the pod. So subscribe
  after the pod's create returned: a list that began before the create may
  not hold it, and is never taken as proof that it is gone.
- A pod whose deletion the informer saw before the subscription starts as
  `GONE` (the last `TOMBSTONES` deleted names are remembered; session ids, so
  pod names, are never reused).
- Before the informer's first list, or before the pod is first seen, `next()`
  waits; seed the consumer with the create response meanwhile.

Resource handling: `run` is a long-lived task; start it with `nursery.start`
(it reports started at once: the daemon's boot never waits on the
apiserver). Cancelling it closes the watch stream.
"""

from __future__ import annotations

import json
import logging
import random
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

import trio

import runnerd.kube.errors as errors
from runnerd.kube.client import KubeClient, Policy, backoff_s

log = logging.getLogger(__name__)

Pod = Mapping[str, Any]


class _Gone:
    def __repr__(self) -> str:
        return "GONE"


GONE: Final = _Gone()
PodState = Pod | _Gone

OPERATION = "could not watch the session pods"
TOMBSTONES = 4096
# A clean end this soon, with no event, is a server refusing quietly: back off.
SHORT_WATCH_S = 1.0


def _name(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("name", ""))


def _rv(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("resourceVersion", ""))


class PodSubscription:
    """One consumer's view of one pod; see the module's consistency contract."""

    def __init__(self, name: str, list_generation: int, state: PodState | None) -> None:
        self.name = name
        self.since_list = list_generation  # lists numbered above this may prove GONE
        self._state = state
        self._version = 0 if state is None else 1
        self._taken = 0
        self._changed = trio.Event()

    def _deliver(self, state: PodState) -> None:
        self._state = state
        self._version += 1
        self._changed.set()

    def latest(self) -> PodState | None:
        """The newest state without waiting (None: not seen yet)."""
        return self._state

    async def next(self) -> PodState:
        """The newest state not yet returned; waits for one."""
        while self._version == self._taken:
            await self._changed.wait()
            self._changed = trio.Event()
        self._taken = self._version
        assert self._state is not None
        return self._state


class PodInformer:
    """The shared list+watch of managed pods. See the module docstring."""

    def __init__(
        self,
        client: KubeClient,
        label_selector: str,
        *,
        relist_interval_s: float = 300.0,
        watch_timeout_s: int = 290,
        policy: Policy | None = None,
    ) -> None:
        self._client = client
        self._selector = label_selector
        self._relist_interval_s = relist_interval_s
        self._watch_timeout_s = watch_timeout_s
        self._policy = policy or Policy()
        self._cache: dict[str, Pod] = {}
        self._deleted: OrderedDict[str, None] = OrderedDict()
        self._subs: dict[str, set[PodSubscription]] = {}
        self._lists_started = 0
        self._synced = trio.Event()
        # The apiserver's refusal of the list or the watch (RBAC), until a list
        # succeeds: a start that times out names it (client-safe text).
        self.refused: errors.KubeError | None = None

    # -- consumers ------------------------------------------------------------

    @contextmanager
    def subscribe(self, name: str) -> Iterator[PodSubscription]:
        """A subscription to pod `name` for the block's duration (synchronous:
        registration and snapshot happen with no checkpoint between them)."""
        state: PodState | None = GONE if name in self._deleted else self._cache.get(name)
        sub = PodSubscription(name, self._lists_started, state)
        self._subs.setdefault(name, set()).add(sub)
        try:
            yield sub
        finally:
            subs = self._subs.get(name)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subs[name]

    def pods(self) -> list[Pod]:
        """Every managed pod in the cache now (e.g. for the reaper)."""
        return list(self._cache.values())

    @property
    def synced(self) -> bool:
        """Whether the first list has been applied (before it, `pods()` is empty
        because nothing is known, not because there are no pods)."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        """Return once the first list has been applied."""
        await self._synced.wait()

    @property
    def subscriber_count(self) -> int:
        return sum(len(s) for s in self._subs.values())

    # -- the reflector ----------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """List and watch until cancelled. Never raises but `Cancelled`:
        every apiserver failure is logged and retried with backoff."""
        task_status.started()
        attempt = 0
        metrics = self._client.metrics
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
        self._lists_started += 1
        generation = self._lists_started
        items, rv = await self._client.list_pods(label_selector=self._selector, operation=OPERATION)
        fresh = {_name(p): p for p in items}
        for name in list(self._cache):
            if name not in fresh:
                self._remove(self._cache[name])
        for name, pod in fresh.items():
            if name not in self._cache or _rv(self._cache[name]) != _rv(pod):
                self._apply(pod)
        for name, subs in self._subs.items():
            if name not in fresh:
                for sub in subs:
                    if generation > sub.since_list and sub.latest() is not GONE:
                        sub._deliver(GONE)
        self._synced.set()
        return rv

    def _apply(self, pod: Pod) -> None:
        name = _name(pod)
        self._cache[name] = pod
        self._deleted.pop(name, None)
        for sub in self._subs.get(name, ()):
            sub._deliver(pod)

    def _remove(self, pod: Pod) -> None:
        name = _name(pod)
        self._cache.pop(name, None)
        self._deleted[name] = None
        if len(self._deleted) > TOMBSTONES:
            self._deleted.popitem(last=False)
        for sub in self._subs.get(name, ()):
            sub._deliver(GONE)

    async def _watch_from(self, rv: str) -> None:
        """Watch from `rv` until a 410 asks for a re-list (returns) or an error (raises)."""
        attempt = 0
        while True:
            started, seen = trio.current_time(), 0
            timeout = int(self._watch_timeout_s * random.uniform(0.8, 1.0)) or 1
            params = {
                "labelSelector": self._selector,
                "resourceVersion": rv,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(timeout),
            }
            try:
                async with self._client.open_watch(
                    self._client.pods_path(), params, operation=OPERATION
                ) as events:
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
            self._client.metrics.watch_restart("pods", reason)
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
            self._apply(obj)
        elif kind == "DELETED":
            self._remove(obj)
        return _rv(obj)
