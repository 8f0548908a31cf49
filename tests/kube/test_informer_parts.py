"""runnerd.kube.informer's `Reflector` over a fake `ListerWatcher`, into a
`podcache.PodCache`, under trio's autojump `MockClock`: the first list and
the watch from its resourceVersion, events and bookmarks moving the RV, a
cut stream resumed from it, a 410 (in the stream or as the answer) re-listed,
the periodic re-list, a refusal kept until a list succeeds, and the cache's
contract (subscribe-then-snapshot, coalescing, what proves a pod GONE).

The fake is an apiserver's pods in a dict: the test changes them and says
which watch events are sent; every list and every watch opened is handed
to the test through a channel, so a test waits for the reflector's next
move instead of sleeping."""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
import trio.testing

from runnerd.kube import errors
from runnerd.kube.client import Policy
from runnerd.kube.informer import ListerWatcher, Reflector
from runnerd.kube.podcache import GONE, PodCache
from runnerd.metrics import Metrics

POLICY = Policy()
END = object()  # a clean end of the stream (the server's timeoutSeconds)


def pod(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}}


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


@dataclass
class Watch:
    """One watch the reflector opened: from `rv`; the test feeds it."""

    rv: str
    send: trio.MemorySendChannel[object]

    async def events(self, *items: object) -> None:
        for item in items:
            await self.send.send(item)


@dataclass
class FakeSource:
    """A `ListerWatcher` over `pods`; `list_failures` answer the next lists."""

    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    rv: int = 10
    list_failures: list[errors.KubeError] = field(default_factory=list)
    watch_failures: list[errors.KubeError] = field(default_factory=list)
    list_gate: trio.Event | None = None  # a list waits for it (one in flight)

    def __post_init__(self) -> None:
        self.lists_send, self.lists = trio.open_memory_channel[int](math.inf)
        self.watches_send, self.watches = trio.open_memory_channel[Watch](math.inf)
        self.list_count = 0

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        self.list_count += 1
        if self.list_gate is not None:
            await self.list_gate.wait()
        self.lists_send.send_nowait(self.list_count)
        if self.list_failures:
            raise self.list_failures.pop(0)
        return list(self.pods.values()), str(self.rv)

    @asynccontextmanager
    async def watch(self, resource_version: str, timeout_s: int) -> AsyncIterator[Any]:
        assert timeout_s > 0
        if self.watch_failures:
            raise self.watch_failures.pop(0)
        send, receive = trio.open_memory_channel[object](math.inf)
        self.watches_send.send_nowait(Watch(resource_version, send))

        async def stream() -> AsyncGenerator[dict[str, Any], None]:
            async for item in receive:
                if item is END:
                    return
                if isinstance(item, Exception):
                    raise item
                assert isinstance(item, dict)
                yield item

        async with aclosing(stream()) as events:  # as the client's: closed when left
            yield events


_: type[ListerWatcher] = FakeSource  # the fake keeps to the protocol (mypy)


class Counted(Metrics):
    """The reflector's figures, as the daemon's metrics would receive them."""

    def __init__(self) -> None:
        self.restarts: list[str] = []
        self.relists = 0

    def watch_restart(self, resource: str, reason: str) -> None:
        self.restarts.append(reason)

    def relist(self, resource: str) -> None:
        self.relists += 1


@dataclass
class Running:
    source: FakeSource
    cache: PodCache
    reflector: Reflector
    metrics: Counted


@asynccontextmanager
async def running(source: FakeSource, **options: Any) -> AsyncIterator[Running]:
    cache, metrics = PodCache(), Counted()
    reflector = Reflector(source, cache, metrics, policy=POLICY, **options)
    with trio.fail_after(3600):  # virtual time: a reflector that stalls fails the test
        async with trio.open_nursery() as nursery:
            await nursery.start(reflector.run)
            yield Running(source, cache, reflector, metrics)
            nursery.cancel_scope.cancel()


async def test_the_first_list_fills_the_cache_and_the_watch_starts_at_its_rv(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeSource({"p1": pod("p1", 5)}, rv=7)
    async with running(source) as r:
        watch = await source.watches.receive()
        assert watch.rv == "7"
        assert r.cache.synced and r.cache.pods() == [pod("p1", 5)]
        assert source.list_count == 1


async def test_events_reach_their_subscriber_and_bookmarks_move_the_rv(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeSource({"p1": pod("p1", 5), "p2": pod("p2", 6)})
    async with running(source) as r:
        watch = await source.watches.receive()
        with r.cache.subscribe("p1") as one, r.cache.subscribe("p2") as two:
            assert await one.next() == pod("p1", 5)  # the snapshot
            assert await two.next() == pod("p2", 6)
            await watch.events(event("MODIFIED", pod("p1", 11)))
            assert await one.next() == pod("p1", 11)
            assert two.latest() == pod("p2", 6)  # not p2's event
            await watch.events(event("BOOKMARK", {"metadata": {"resourceVersion": "15"}}), END)
            again = await source.watches.receive()
            assert again.rv == "15"  # resumed past the bookmark, no re-list
            await again.events(event("DELETED", pod("p1", 16)))
            assert await one.next() is GONE
        assert source.list_count == 1
        assert r.metrics.restarts == ["closed"]


async def test_a_cut_stream_resumes_from_its_last_rv_without_a_relist(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeSource()
    async with running(source) as r:
        watch = await source.watches.receive()
        await watch.events(event("ADDED", pod("p1", 12)), errors.Unreachable("watch"))
        assert (await source.watches.receive()).rv == "12"
        assert source.list_count == 1
        assert r.metrics.restarts == ["broken"]
        assert r.cache.pods() == [pod("p1", 12)]


@pytest.mark.parametrize("how", ["error-event", "http-410"])
async def test_a_410_relists_and_tells_a_subscriber_its_pod_vanished(
    autojump_clock: trio.testing.MockClock, how: str
) -> None:
    source = FakeSource({"p1": pod("p1", 5)})
    async with running(source) as r:
        watch = await source.watches.receive()
        with r.cache.subscribe("p1") as sub:
            assert await sub.next() == pod("p1", 5)
            del source.pods["p1"]  # deleted while the RV was compacted away
            source.rv = 30
            if how == "error-event":
                await watch.events(event("ERROR", {"code": 410, "reason": "Expired"}))
            else:
                source.watch_failures.append(errors.Gone("watch", 410))
                await watch.events(END)
            assert await sub.next() is GONE
        assert (await source.watches.receive()).rv == "30"
        assert source.list_count == 2
        assert r.metrics.relists == 1
        assert r.cache.pods() == []


async def test_the_periodic_relist_heals_a_silent_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeSource()
    async with running(source, relist_interval_s=60.0) as r:
        await source.watches.receive()  # open, and silent from now on
        source.pods["p1"] = pod("p1", 20)  # a change the stream never sent
        started = trio.current_time()
        await source.watches.receive()
        assert trio.current_time() - started == pytest.approx(60.0)
        assert source.list_count == 2
        assert r.cache.pods() == [pod("p1", 20)]
        assert r.metrics.restarts == ["relist_interval"]


async def test_a_refusal_is_kept_until_a_list_succeeds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    refusal = errors.Forbidden("could not watch the session pods", 403)
    source = FakeSource(list_failures=[refusal, refusal])
    async with running(source) as r:
        assert await source.lists.receive() == 1
        await source.lists.receive()
        assert r.reflector.refused is refusal
        assert not r.cache.synced  # nothing is known, not "no pods"
        await source.watches.receive()
        assert source.list_count == 3
        assert r.reflector.refused is None
        assert r.metrics.restarts == []  # no watch had started


async def test_a_list_that_began_before_the_subscription_cannot_prove_its_pod_gone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeSource(list_gate=trio.Event())
    async with running(source) as r:
        assert source.list_count == 1  # the first list is in flight
        with r.cache.subscribe("new") as sub:  # the pod was just created
            assert source.list_gate is not None
            source.list_gate.set()
            watch = await source.watches.receive()
            assert sub.latest() is None  # the older list lacks it: proves nothing
            source.rv = 40
            await watch.events(event("ERROR", {"code": 410}))
            assert await sub.next() is GONE  # a list begun after it does prove it


async def test_a_pod_deleted_before_the_subscription_starts_gone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeSource({"p1": pod("p1", 5)})
    async with running(source) as r:
        watch = await source.watches.receive()
        await watch.events(event("DELETED", pod("p1", 13)), END)
        assert (await source.watches.receive()).rv == "13"
        with r.cache.subscribe("p1") as sub:
            assert sub.latest() is GONE


async def test_deliveries_coalesce_to_the_latest_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeSource({"p1": pod("p1", 5)})
    async with running(source) as r:
        watch = await source.watches.receive()
        with r.cache.subscribe("p1") as sub:
            await sub.next()
            await watch.events(*(event("MODIFIED", pod("p1", rv)) for rv in (21, 22, 23)), END)
            await source.watches.receive()  # every event applied
            assert await sub.next() == pod("p1", 23)  # the newest, not a queue
            with trio.move_on_after(5) as waited:
                await sub.next()
            assert waited.cancelled_caught  # nothing newer: next() waits
        assert r.cache.subscriber_count == 0
