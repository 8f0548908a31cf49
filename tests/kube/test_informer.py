"""runnerd.kube.informer against the test cluster: one watch for many sessions,
fan-out by pod name, cuts, injected 410s, compaction, a silent stream healed by
the periodic re-list, and the subscribe-then-snapshot contract."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio

from runnerd.kube.client import KubeClient, Policy
from runnerd.kube.informer import GONE, PodInformer, PodState, PodSubscription
from runnerd.kube.podspec import is_ours, managed_by_selector
from runnerd.kube.settings import KubeSettings
from tests.kube.helpers import FAST, open_client
from tests.kubesim.server import KubeSim

SETTINGS = KubeSettings()
SELECTOR = managed_by_selector(SETTINGS)
LIST = ("list", "/api/v1/namespaces/{namespace}/pods")


def pod(name: str, managed: bool = True) -> dict[str, Any]:
    labels = {
        "app.kubernetes.io/managed-by": "runnerd" if managed else "someone-else",
        "runnerd.telo.run/session-id": name,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "session", "image": "busybox:1.36"}]},
    }


async def create(client: KubeClient, name: str, managed: bool = True) -> dict[str, Any]:
    return await client.create_pod(
        pod(name, managed), operation="create", is_ours=lambda p: is_ours(p, SETTINGS, name)
    )


async def label(sim: KubeSim, name: str, value: str) -> None:
    def mutate(p: dict[str, Any]) -> None:
        p["metadata"].setdefault("annotations", {})["touched"] = value

    await sim.store.update("pods", "runnerd", name, mutate)


async def until(sub: PodSubscription, predicate: Any) -> PodState:
    """Read states until one satisfies `predicate`; bounded by the caller's scope."""
    while True:
        state = await sub.next()
        if predicate(state):
            return state


def touched(value: str) -> Any:
    return lambda s: s is not GONE and s["metadata"].get("annotations", {}).get("touched") == value


@asynccontextmanager
async def running_informer(
    sim: KubeSim, tmp_path: Path, policy: Policy = FAST, **kw: Any
) -> AsyncIterator[tuple[KubeClient, PodInformer]]:
    async with open_client(sim, tmp_path, policy) as client, trio.open_nursery() as nursery:
        informer = PodInformer(client, SELECTOR, policy=FAST, **kw)
        await nursery.start(informer.run)
        with trio.fail_after(10):
            await informer.wait_synced()
        yield client, informer
        nursery.cancel_scope.cancel()


async def test_each_subscriber_sees_only_its_pod(apiserver: KubeSim, tmp_path: Path) -> None:
    async with running_informer(apiserver, tmp_path) as (client, informer):
        await create(client, "a")
        await create(client, "b")
        await create(client, "stranger", managed=False)
        with informer.subscribe("a") as a, informer.subscribe("b") as b, trio.fail_after(10):
            assert (await until(a, lambda s: s is not GONE))["metadata"]["name"] == "a"
            assert (await until(b, lambda s: s is not GONE))["metadata"]["name"] == "b"
            await label(apiserver, "b", "1")
            await until(b, touched("1"))
            assert a.latest()["metadata"]["name"] == "a"  # type: ignore[index]
            await client.delete_pod("a", operation="delete")
            assert await until(a, lambda s: s is GONE) is GONE
        assert {p["metadata"]["name"] for p in informer.pods()} == {"b"}
        assert informer.subscriber_count == 0


async def test_fifty_sessions_share_one_watch_stream(apiserver: KubeSim, tmp_path: Path) -> None:
    async with running_informer(apiserver, tmp_path) as (client, informer):
        names = [f"s{i:02d}" for i in range(50)]
        async with trio.open_nursery() as nursery:
            for name in names:
                nursery.start_soon(create, client, name)

        async def follow(name: str) -> None:
            with informer.subscribe(name) as sub:
                state = await until(sub, lambda s: s is not GONE)
                assert state["metadata"]["name"] == name  # type: ignore[index]
                await label(apiserver, name, "x")
                state = await until(sub, touched("x"))
                assert state["metadata"]["name"] == name  # type: ignore[index]

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for name in names:
                    nursery.start_soon(follow, name)
        assert apiserver.stats.watches_open == 1
        assert apiserver.stats.watches_total == 1
        assert apiserver.stats.count(*LIST) == 1
        assert apiserver.stats.tls_handshakes <= FAST.max_connections


async def test_a_cut_stream_resumes_from_its_rv_without_a_relist(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    async with running_informer(apiserver, tmp_path) as (client, informer):
        await create(client, "p")
        with informer.subscribe("p") as sub, trio.fail_after(10):
            await until(sub, lambda s: s is not GONE)
            for abrupt in (False, True):
                await apiserver.stats.wait_until(lambda s: s.watches_open == 1)
                assert apiserver.faults.cut_watches(abrupt=abrupt) == 1
                await label(apiserver, "p", f"after-cut-{abrupt}")
                await until(sub, touched(f"after-cut-{abrupt}"))
        assert apiserver.stats.count(*LIST) == 1
        assert apiserver.stats.watches_total >= 3


async def test_an_expired_rv_relists_and_reports_what_vanished(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    async with running_informer(apiserver, tmp_path) as (client, informer):
        await create(client, "stays")
        await create(client, "vanishes")
        with (
            informer.subscribe("stays") as stays,
            informer.subscribe("vanishes") as vanishes,
            trio.fail_after(10),
        ):
            await until(vanishes, lambda s: s is not GONE)
            await apiserver.stats.wait_until(lambda s: s.watches_open == 1)
            apiserver.faults.go_silent()  # the informer cannot resume yet
            apiserver.faults.cut_watches(abrupt=True)
            await apiserver.store.remove("pods", "runnerd", "vanishes")
            await label(apiserver, "stays", "while-down")
            apiserver.faults.expire_next_watch()  # its resume will get ERROR 410
            apiserver.faults.resume()
            assert await until(vanishes, lambda s: s is GONE) is GONE
            await until(stays, touched("while-down"))
        assert apiserver.stats.count(*LIST) == 2


async def test_compaction_under_a_broken_stream_relists(apiserver: KubeSim, tmp_path: Path) -> None:
    async with running_informer(apiserver, tmp_path) as (client, informer):
        await create(client, "p")
        with informer.subscribe("p") as sub, trio.fail_after(10):
            await until(sub, lambda s: s is not GONE)
            await apiserver.stats.wait_until(lambda s: s.watches_open == 1)
            apiserver.faults.go_silent()
            apiserver.faults.cut_watches(abrupt=True)
            for i in range(3):
                await label(apiserver, "p", f"v{i}")
            apiserver.store.compact()
            apiserver.store.compact()  # twice: everything up to now is compacted
            apiserver.faults.resume()
            await until(sub, touched("v2"))
        assert apiserver.stats.count(*LIST) == 2


async def test_the_periodic_relist_heals_a_silent_stream(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    # A request the silent server took is never answered: a short read timeout
    # lets the re-list's retry go through soon after the server answers again.
    quick = replace(FAST, read_timeout_s=0.5)
    async with running_informer(apiserver, tmp_path, quick, relist_interval_s=1.0) as (
        client,
        informer,
    ):
        await create(client, "p")
        with informer.subscribe("p") as sub, trio.fail_after(15):
            await until(sub, lambda s: s is not GONE)
            lists = apiserver.stats.count(*LIST)
            await apiserver.stats.wait_until(lambda s: s.watches_open == 1)
            apiserver.faults.go_silent()  # the open stream goes quiet, as a stale one does
            await apiserver.store.remove("pods", "runnerd", "p")
            # The frozen stream never tells; only the periodic re-list drops it.
            await apiserver.stats.wait_until(lambda s: s.watches_open == 0)
            apiserver.faults.resume()
            assert await until(sub, lambda s: s is GONE) is GONE
        assert apiserver.stats.count(*LIST) > lists


async def test_subscribe_then_snapshot_never_misses_and_never_lies(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    async with running_informer(apiserver, tmp_path) as (client, informer):
        await create(client, "late")
        with informer.subscribe("late") as sub:
            # Right after the create the cache may or may not hold the pod; either
            # way, a later list (started after subscribing) includes it, so it is
            # never reported GONE, and the next state is the pod.
            assert sub.latest() is not GONE
            with trio.fail_after(10):
                state = await sub.next()
            assert state is not GONE and state["metadata"]["name"] == "late"
        # Subscribing after the pod is cached: the snapshot is the first state.
        with informer.subscribe("late") as again:
            assert again.latest() is not None
            with trio.fail_after(1):
                assert (await again.next())["metadata"]["name"] == "late"  # type: ignore[index]


async def test_a_pod_deleted_before_the_subscription_starts_gone(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    async with running_informer(apiserver, tmp_path) as (client, informer):
        await create(client, "brief")
        with informer.subscribe("brief") as witness, trio.fail_after(10):
            await until(witness, lambda s: s is not GONE)
            await client.delete_pod("brief", operation="delete")
            await until(witness, lambda s: s is GONE)
        with informer.subscribe("brief") as late:
            assert late.latest() is GONE
            with trio.fail_after(1):
                assert await late.next() is GONE


async def test_a_silent_apiserver_never_holds_up_the_start(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    quick = replace(FAST, read_timeout_s=0.3, deadline_s=1.0)
    async with open_client(apiserver, tmp_path, quick) as client, trio.open_nursery() as nursery:
        apiserver.faults.go_silent()
        informer = PodInformer(client, SELECTOR, policy=quick)
        with trio.fail_after(1):
            await nursery.start(informer.run)  # the daemon's boot goes on at once
        with trio.move_on_after(0.5) as waited:
            await informer.wait_synced()
        assert waited.cancelled_caught  # nothing answered, nothing synced
        apiserver.faults.resume()
        with trio.fail_after(10):
            await informer.wait_synced()
        nursery.cancel_scope.cancel()
