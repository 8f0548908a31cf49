"""The simulated cluster's object store: one global resourceVersion, bounded history, fan-out.

Owns every object the apiserver serves (namespaces, pods, services, ingresses,
resourcequotas, configmaps), the single RV counter every write bumps, a bounded history of
change events (so a watch can resume from an RV, and an RV older than the
history answers 410), and fan-out of each change to subscribers.

Consistency contract (what watchers rely on):
- every write is synchronous between checkpoints: bump RV, store, append to the
  history, push to every subscriber, in that order, with no await in between;
- `open_watch(from_rv)` snapshots the history and subscribes in one synchronous
  step, so a watcher sees every event after `from_rv` exactly once;
- a subscriber whose buffer is full is dropped (its channel closes), as the real
  watch cache terminates a watcher that cannot keep up; the client re-watches;
- history goes when it exceeds `history_limit` and when compacted (`compact`, one
  tick of the apiserver's compactor; `run_compactor` ticks on a schedule): a watch or
  an Exact list from a compacted RV is then too old (410).

Objects handed out by `get`/`list`/`update` are deep copies; objects carried by
events are shared between subscribers and must not be mutated.

Pod deletion (the apiserver calls `delete`): the pod gets `deletionTimestamp`
(MODIFIED); if it is unscheduled, terminal, forced (grace 0) or no kubelet is
registered, it is removed at once (DELETED); otherwise the registered kubelet
sees the MODIFIED event, kills the containers and calls `remove`.
Removing an owner garbage-collects the same-namespace services/ingresses/httproutes/configmaps whose
ownerReferences name its uid (policy Background/Foreground; Orphan strips the
reference instead).
"""

from __future__ import annotations

import builtins
import copy
import datetime as dt
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

Obj = dict[str, Any]
SubKey = tuple[str | None, str | None, str | None]

CLUSTER_SCOPED = frozenset({"namespaces", "ingressclasses"})
GC_DEPENDENTS = ("services", "ingresses", "httproutes", "configmaps")
SUBSCRIBER_BUFFER = 10_000


class AlreadyExists(Exception):
    """create() of a name that exists (the apiserver answers 409)."""


class NotFound(Exception):
    """update()/remove()/delete() of a missing object (the apiserver answers 404)."""


class TooOld(Exception):
    """A watch asked for an RV older than the retained history (ERROR 410 event)."""

    def __init__(self, requested: int, floor: int) -> None:
        super().__init__(f"too old resource version: {requested} ({floor})")
        self.requested = requested
        self.floor = floor


def build_timestamp(now: dt.datetime | None = None) -> str:
    """RFC 3339 seconds, UTC, `Z` — the apiserver's metav1.Time format."""
    return (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(eq=False)
class Event:
    """One change, as stored in the history and fanned out to watchers.

    `obj` is shared (never mutate it); `line` caches the NDJSON encoding so a
    thousand watchers serialize an event once.
    """

    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    resource: str
    namespace: str
    obj: Obj
    prev: Obj | None = None  # the object before this change (None for ADDED)
    line: bytes | None = field(default=None)


class Store:
    """In-memory objects keyed by (resource, namespace, name); see the module doc."""

    def __init__(self, *, history_limit: int = 5000) -> None:
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._rv = 1
        self._history: deque[Event] = deque(maxlen=history_limit)
        # Subscribers by what they watch, so a watch pinned to one pod costs nothing
        # when other pods change: (resource, namespace, name), None = any.
        self._subs: dict[SubKey, set[trio.MemorySendChannel[Event]]] = {}
        self._kubelets = 0
        self._policies: dict[tuple[str, str, str], str] = {}  # pending pod deletes
        self.history_limit = history_limit
        self._compacted = 0  # every RV up to this one is gone (etcd compaction)
        self._next_compaction: int | None = None  # the RV the compactor saw last time

    # ---- reads -------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The current global RV (what a list reports)."""
        return self._rv

    def get(self, resource: str, ns: str, name: str) -> Obj | None:
        obj = self._objects.get(resource, {}).get((_ns(resource, ns), name))
        return copy.deepcopy(obj) if obj is not None else None

    def list(self, resource: str, ns: str | None) -> list[Obj]:
        """All objects of `resource` in `ns` (None or "" = every namespace), by name."""
        items = self._objects.get(resource, {})
        keys = sorted(k for k in items if not ns or k[0] == _ns(resource, ns))
        return [copy.deepcopy(items[k]) for k in keys]

    def count(self, resource: str, ns: str | None = None) -> int:
        items = self._objects.get(resource, {})
        return len(items) if not ns else sum(1 for k in items if k[0] == ns)

    # ---- writes ------------------------------------------------------------

    async def create(self, resource: str, ns: str, obj: Obj) -> Obj:
        """Store a new object: sets uid, creationTimestamp, RV; emits ADDED."""
        await trio.lowlevel.checkpoint()
        return self.create_nowait(resource, ns, obj)

    def create_nowait(self, resource: str, ns: str, obj: Obj) -> Obj:
        ns = _ns(resource, ns)
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        key = (ns, meta["name"])
        table = self._objects.setdefault(resource, {})
        if key in table:
            raise AlreadyExists(meta["name"])
        if ns:
            meta["namespace"] = ns
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", build_timestamp())
        self._commit("ADDED", resource, key, obj)
        return copy.deepcopy(obj)

    async def update(self, resource: str, ns: str, name: str, mutate: Callable[[Obj], None]) -> Obj:
        """Deep-copy the object, apply `mutate`, bump RV, emit MODIFIED; returns a copy."""
        await trio.lowlevel.checkpoint()
        return self.update_nowait(resource, ns, name, mutate)

    def update_nowait(
        self, resource: str, ns: str, name: str, mutate: Callable[[Obj], None]
    ) -> Obj:
        key = (_ns(resource, ns), name)
        current = self._objects.get(resource, {}).get(key)
        if current is None:
            raise NotFound(name)
        obj = copy.deepcopy(current)
        mutate(obj)
        self._commit("MODIFIED", resource, key, obj)
        return copy.deepcopy(obj)

    async def remove(self, resource: str, ns: str, name: str) -> None:
        """Final removal from storage: emits DELETED (at a new RV), then GC of dependents."""
        await trio.lowlevel.checkpoint()
        self.remove_nowait(resource, ns, name)

    def remove_nowait(
        self, resource: str, ns: str, name: str, *, propagation_policy: str | None = None
    ) -> None:
        key = (_ns(resource, ns), name)
        obj = self._objects.get(resource, {}).pop(key, None)
        if obj is None:
            raise NotFound(name)
        policy = self._policies.pop((resource, *key), None) or propagation_policy or "Background"
        last = obj
        obj = copy.deepcopy(obj)
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._emit(Event(self._rv, "DELETED", resource, key[0], obj, last))
        if resource not in GC_DEPENDENTS:
            self._collect_dependents(key[0], obj["metadata"]["uid"], policy)

    async def delete(
        self,
        resource: str,
        ns: str,
        name: str,
        *,
        grace_period_s: int | None = None,
        propagation_policy: str = "Background",
    ) -> Obj:
        """The apiserver's DELETE; returns the object as the response shows it.

        Non-pods are removed at once. A pod first gets deletionTimestamp (MODIFIED);
        see the module doc for when it is removed at once and when the kubelet does it.
        """
        await trio.lowlevel.checkpoint()
        key = (_ns(resource, ns), name)
        current = self._objects.get(resource, {}).get(key)
        if current is None:
            raise NotFound(name)
        if resource != "pods":
            shown = copy.deepcopy(current)
            self.remove_nowait(resource, ns, name, propagation_policy=propagation_policy)
            return shown
        grace = _pod_grace(current, grace_period_s)
        marked = current["metadata"].get("deletionGracePeriodSeconds")
        if marked is None or grace < marked:  # a second delete may only shorten the grace

            def mark(pod: Obj) -> None:
                pod["metadata"]["deletionTimestamp"] = build_timestamp(
                    dt.datetime.now(dt.UTC) + dt.timedelta(seconds=grace)
                )
                pod["metadata"]["deletionGracePeriodSeconds"] = grace

            self._policies.setdefault((resource, *key), propagation_policy)
            shown = self.update_nowait(resource, ns, name, mark)
        else:
            shown = copy.deepcopy(current)
        if grace == 0 or self._kubelets == 0:
            self.remove_nowait(resource, ns, name)
        return shown

    # ---- kubelet registration ----------------------------------------------

    @contextmanager
    def kubelet_registered(self) -> Iterator[None]:
        """While held, graceful pod deletes wait for the kubelet's `remove`."""
        self._kubelets += 1
        try:
            yield
        finally:
            self._kubelets -= 1

    # ---- watching ----------------------------------------------------------

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[trio.MemoryReceiveChannel[tuple[str, str, Obj]]]:
        """(event_type, resource, obj) for every change from now on (obj: do not mutate)."""
        send, recv = trio.open_memory_channel[tuple[str, str, Obj]](SUBSCRIBER_BUFFER)
        events = self.open_watch(None)[1]

        async def forward() -> None:
            async with send, events:
                async for ev in events:
                    await send.send((ev.type, ev.resource, ev.obj))

        async with trio.open_nursery() as nursery, recv:
            nursery.start_soon(forward)
            try:
                yield recv
            finally:
                nursery.cancel_scope.cancel()

    def open_watch(
        self,
        from_rv: int | None,
        *,
        resource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
    ) -> tuple[builtins.list[Event], Subscription]:
        """Events after `from_rv` from the history (None: none) plus a live channel.

        Only events for `resource`/`namespace`/`name` (None: any) are delivered.
        Synchronous on purpose: the snapshot and the subscription happen with no
        checkpoint in between, so nothing is missed or seen twice. Raises TooOld.
        """
        key: SubKey = (resource, namespace or None, name)
        replay: builtins.list[Event] = []
        if from_rv is not None and from_rv < self._rv:
            floor = self.history_floor
            if from_rv < floor:
                raise TooOld(from_rv, floor)
            replay = [ev for ev in self._history if ev.rv > from_rv and key in _keys(ev)]
        send, recv = trio.open_memory_channel[Event](SUBSCRIBER_BUFFER)
        self._subs.setdefault(key, set()).add(send)
        return replay, Subscription(recv, lambda: self._drop(key, send))

    @property
    def history_floor(self) -> int:
        """The oldest RV a watch may resume from (`oldest retained event RV - 1`)."""
        return self._history[0].rv - 1 if self._history else self._rv

    @property
    def compacted(self) -> int:
        """Every RV up to this one has been compacted away (0: none yet)."""
        return self._compacted

    def compact(self) -> int | None:
        """One tick of kube-apiserver's compactor; returns the RV compacted to, if any.

        As `storage/etcd3/compact.go` does: compact at the RV this tick saw the *previous*
        time, then remember the current RV for the next tick. So history survives at least
        one interval and at most two; resuming from a compacted RV answers 410.
        """
        target, self._next_compaction = self._next_compaction, self._rv
        if target is None or target <= self._compacted:
            return None
        self._compacted = target
        while self._history and self._history[0].rv <= target:
            self._history.popleft()
        return target

    def list_at(self, resource: str, ns: str | None, rv: int) -> builtins.list[Obj]:
        """`list` as it was at `rv` (resourceVersionMatch=Exact), undoing later history.

        Raises TooOld when `rv` is compacted or older than the retained history.
        """
        if rv > self._rv:
            raise TooOld(rv, self._rv)  # the caller answers "too large" differently
        if rv < self.history_floor:
            raise TooOld(rv, self.history_floor)
        items = {
            (o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
            for o in self.list(resource, ns)
        }
        for ev in reversed(self._history):
            if ev.rv <= rv:
                break
            if ev.resource != resource or (ns and ev.namespace != _ns(resource, ns)):
                continue
            key = (ev.namespace, ev.obj["metadata"]["name"])
            if ev.type == "ADDED":
                items.pop(key, None)
            elif ev.prev is not None:  # MODIFIED and DELETED: the object as it was before
                items[key] = copy.deepcopy(ev.prev)
        return [items[k] for k in sorted(items)]

    def close_all_watches(self) -> int:
        """Fault: end every live subscription now (their channels close); returns how many."""
        subs, self._subs = self._subs, {}
        for bucket in subs.values():
            for send in bucket:
                send.close()
        return sum(len(bucket) for bucket in subs.values())

    @property
    def subscriber_count(self) -> int:
        return sum(len(bucket) for bucket in self._subs.values())

    # ---- internals ---------------------------------------------------------

    def _commit(self, kind: str, resource: str, key: tuple[str, str], obj: Obj) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        table = self._objects.setdefault(resource, {})
        prev = table.get(key)
        table[key] = obj
        self._emit(Event(self._rv, kind, resource, key[0], obj, prev))

    def _emit(self, ev: Event) -> None:
        self._history.append(ev)
        for key in _keys(ev):
            for send in list(self._subs.get(key, ())):
                try:
                    send.send_nowait(ev)
                except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                    self._drop(key, send)

    def _drop(self, key: SubKey, send: trio.MemorySendChannel[Event]) -> None:
        bucket = self._subs.get(key)
        if bucket is not None:
            bucket.discard(send)
            if not bucket:
                del self._subs[key]
        send.close()

    def _collect_dependents(self, ns: str, owner_uid: str, policy: str) -> None:
        for resource in GC_DEPENDENTS:
            for (dep_ns, name), dep in list(self._objects.get(resource, {}).items()):
                refs = dep["metadata"].get("ownerReferences") or []
                if dep_ns != ns or not any(r.get("uid") == owner_uid for r in refs):
                    continue
                if policy == "Orphan":
                    self.update_nowait(resource, dep_ns, name, _without_owner(owner_uid))
                else:
                    self.remove_nowait(resource, dep_ns, name)


async def run_compactor(store: Store, interval_s: float) -> None:
    """Compact every `interval_s` until cancelled (kube-apiserver's
    `--etcd-compaction-interval`, default 5 min)."""
    while True:
        await trio.sleep(interval_s)
        store.compact()


class Subscription(trio.abc.ReceiveChannel[Event]):
    """A watcher's live event channel; closing it unsubscribes from the store."""

    def __init__(self, inner: trio.MemoryReceiveChannel[Event], on_close: Callable[[], None]):
        self._inner = inner
        self._on_close = on_close

    def receive_nowait(self) -> Event:
        return self._inner.receive_nowait()

    async def receive(self) -> Event:
        return await self._inner.receive()

    async def aclose(self) -> None:
        self._on_close()
        await self._inner.aclose()


def _keys(ev: Event) -> tuple[SubKey, ...]:
    """Every subscription key that wants `ev`."""
    res, ns, name = ev.resource, ev.namespace or None, ev.obj["metadata"]["name"]
    return (
        (None, None, None),
        (res, None, None),
        (res, ns, None),
        (res, ns, name),
        (res, None, name),
    )


def _ns(resource: str, ns: str | None) -> str:
    return "" if resource in CLUSTER_SCOPED else (ns or "")


def _without_owner(owner_uid: str) -> Callable[[Obj], None]:
    def strip(obj: Obj) -> None:
        refs = [r for r in obj["metadata"]["ownerReferences"] if r.get("uid") != owner_uid]
        if refs:
            obj["metadata"]["ownerReferences"] = refs
        else:
            del obj["metadata"]["ownerReferences"]

    return strip


def _pod_grace(pod: Obj, requested: int | None) -> int:
    """Grace period per k/k CheckGracefulDelete (`pkg/registry/core/pod/strategy.go`)."""
    if not pod.get("spec", {}).get("nodeName"):
        return 0
    if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        return 0
    if requested is None:
        requested = pod.get("spec", {}).get("terminationGracePeriodSeconds", 30)
    grace = int(requested) if requested is not None else 30
    return 1 if grace < 0 else grace
