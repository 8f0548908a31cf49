"""The informer's store and fan-out: the managed pods by name, and one
consumer's view of one pod.

Owns `PodCache` (what the reflector in `informer` writes: a list's result, a
watch event's pod, a deletion) and `PodSubscription`. No IO and no apiserver:
it is fed, and it is tested by feeding it (tests/kube/test_informer_parts.py).

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
- A pod whose deletion the cache saw before the subscription starts as
  `GONE` (the last `TOMBSTONES` deleted names are remembered; session ids, so
  pod names, are never reused).
- Before the first list, or before the pod is first seen, `next()` waits;
  seed the consumer with the create response meanwhile.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

import trio

Pod = Mapping[str, Any]


class _Gone:
    def __repr__(self) -> str:
        return "GONE"


GONE: Final = _Gone()
PodState = Pod | _Gone

TOMBSTONES = 4096


def pod_name(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("name", ""))


def resource_version(pod: Pod) -> str:
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


class PodCache:
    """The pods by name, fanned out to subscriptions (module docstring).
    Every method is synchronous and never blocks."""

    def __init__(self) -> None:
        self._pods: dict[str, Pod] = {}
        self._deleted: OrderedDict[str, None] = OrderedDict()
        self._subs: dict[str, set[PodSubscription]] = {}
        self._lists_started = 0
        self._synced = trio.Event()

    # -- consumers ------------------------------------------------------------

    @contextmanager
    def subscribe(self, name: str) -> Iterator[PodSubscription]:
        """A subscription to pod `name` for the block's duration (synchronous:
        registration and snapshot happen with no checkpoint between them)."""
        state: PodState | None = GONE if name in self._deleted else self._pods.get(name)
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
        """Every pod in the cache now."""
        return list(self._pods.values())

    @property
    def synced(self) -> bool:
        """Whether a list has been applied (before it, `pods()` is empty
        because nothing is known, not because there are no pods)."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        """Return once the first list has been applied."""
        await self._synced.wait()

    @property
    def subscriber_count(self) -> int:
        return sum(len(s) for s in self._subs.values())

    # -- the reflector's side ---------------------------------------------------

    def begin_list(self) -> int:
        """A list is about to be sent: its generation, for `replace`. Only a
        list that began after a subscription can prove its pod gone."""
        self._lists_started += 1
        return self._lists_started

    def replace(self, items: Iterable[Pod], generation: int) -> None:
        """The list numbered `generation` answered `items`: what it lacks is
        removed, what changed (by resourceVersion) applied, and a subscriber
        older than the list whose pod it lacks is told `GONE` once."""
        fresh = {pod_name(p): p for p in items}
        for name in [n for n in self._pods if n not in fresh]:
            self.remove(self._pods[name])
        for name, pod in fresh.items():
            known = self._pods.get(name)
            if known is None or resource_version(known) != resource_version(pod):
                self.apply(pod)
        for name, subs in self._subs.items():
            if name not in fresh:
                for sub in subs:
                    if generation > sub.since_list and sub.latest() is not GONE:
                        sub._deliver(GONE)
        self._synced.set()

    def apply(self, pod: Pod) -> None:
        """A pod was added or changed."""
        name = pod_name(pod)
        self._pods[name] = pod
        self._deleted.pop(name, None)
        for sub in self._subs.get(name, ()):
            sub._deliver(pod)

    def remove(self, pod: Pod) -> None:
        """A pod was deleted (remembered as a tombstone)."""
        name = pod_name(pod)
        self._pods.pop(name, None)
        self._deleted[name] = None
        if len(self._deleted) > TOMBSTONES:
            self._deleted.popitem(last=False)
        for sub in self._subs.get(name, ()):
            sub._deliver(GONE)
