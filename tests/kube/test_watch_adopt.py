"""`KubeBackend.adopt_watch` on the test cluster: a second backend (a
successor daemon's, with its own client and informer) finds a live watch
pod by its labels, reads its workspace token back from the pod spec,
reaches the same workspace and re-attaches the app (no splice: its output
went out already); none for a session is `PlaceGone`. Two backends in one
test process, each as a daemon holds it; the daemon-level restart (the
core's watch records) is the session core's."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from runnerd.backend import (
    BundleSpec,
    CreationSpec,
    ImageSpec,
    Limits,
    SessionIdentity,
)
from runnerd.backend.watch import (
    AppLaunch,
    AppStarted,
    ChangeSet,
    OutputStream,
    PlaceEnded,
    PlaceGone,
    WatchSpec,
    Write,
)
from runnerd.contract import RouteState, RunPhase
from runnerd.kube.backend import KubeBackend
from runnerd.kube.bundle import BundleTokens
from runnerd.kube.informer import PodInformer
from runnerd.kube.podspec import managed_by_selector
from runnerd.kube.routing import resolve_routing
from runnerd.kube.settings import KubeSettings
from tests.kube.daemon import KERNEL, session_pods, wait_pods
from tests.kube.helpers import open_client
from tests.kubesim.server import KubeSim

TIMEOUT_S = 30.0
APP = "print app up\nwait\n"


class Reports:
    """What `open_watch` reported (a ProgressReport)."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, str]] = []

    def progress(self, phase: RunPhase, message: str, done: bool | None = None) -> None:
        self.steps.append((phase, message))

    def route(self, host: str, port: int, state: RouteState, reason: str | None = None) -> None:
        pass

    def detaching(self) -> bool:
        return False


class Output:
    """One app's sink: its output, woken on each chunk."""

    def __init__(self) -> None:
        self.data = b""
        self.codes: list[int] = []
        self._lot = trio.lowlevel.ParkingLot()

    def output(self, data: bytes, stream: OutputStream = OutputStream.TTY) -> None:
        self.data += data
        self._lot.unpark_all()

    def output_lost(self) -> None:
        pass

    def progress(self, phase: RunPhase, message: str, done: bool | None = None) -> None:
        pass

    async def drain(self, *steps: Callable[[], Awaitable[object]]) -> bool:
        for step in steps:
            await step()
        return True

    def exited(self, code: int) -> None:
        self.codes.append(code)

    async def until(self, text: bytes) -> None:
        while text not in self.data:
            await self._lot.park()


def spec(session_id: str) -> WatchSpec:
    identity = SessionIdentity(
        session_id, Limits("1", "1Gi", "1Gi", 3600.0), inspect=True, created_at=time.time()
    )
    bundle = BundleSpec("app.telo", (("app.telo", APP),))
    creation = CreationSpec(ImageSpec(KERNEL, "missing"), {}, bundle)
    return WatchSpec(identity, creation, apps=(AppLaunch("app", "app.telo"),))


@asynccontextmanager
async def backend_on(kubesim: KubeSim, tmp_path: Path, name: str) -> AsyncIterator[KubeBackend]:
    """A backend as one daemon holds it: its client, informer and state dir."""
    settings = KubeSettings()
    (tmp_path / name).mkdir()
    async with (
        open_client(kubesim, tmp_path / name) as client,
        trio.open_nursery() as nursery,
    ):
        informer = PodInformer(client, managed_by_selector(settings))
        await nursery.start(informer.run)
        routing = await resolve_routing(client, settings)
        yield KubeBackend(
            settings, client, informer, BundleTokens(), routing, state_dir=tmp_path / name
        )
        nursery.cancel_scope.cancel()


async def test_a_successor_adopts_the_live_watch_pod_its_workspace_and_its_app(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    the_spec = spec("adoptme23456")
    with trio.fail_after(TIMEOUT_S):
        async with backend_on(kubesim, tmp_path, "first") as first:
            await held_then_adopted(kubesim, tmp_path, first, the_spec)
    assert not kubesim.store.list("configmaps", "runnerd")


async def held_then_adopted(
    kubesim: KubeSim, tmp_path: Path, first: KubeBackend, the_spec: WatchSpec
) -> None:
    """`first` opens the place and runs the app; a second backend adopts it."""
    with pytest.raises(PlaceEnded) as first_end:
        async with (
            first.open_watch(the_spec, Reports()) as host,
            trio.open_nursery() as apps,
        ):
            await host.apply(ChangeSet(writes=(Write("notes.txt", b"kept"),)))
            out = Output()
            started: AppStarted = await apps.start(host.run_app, the_spec.apps[0], out)
            await out.until(b"app up")
            assert started.self_watching and started.address is not None
            assert started.address.inspect_port == 9230
            [pod] = session_pods(kubesim)

            async with backend_on(kubesim, tmp_path, "second") as second:
                with pytest.raises(PlaceGone):
                    async with second.adopt_watch(spec("nosuchsess23"), Reports()):
                        raise AssertionError("adopted a pod of no such session")
                async with second.adopt_watch(the_spec, Reports()) as adopted:
                    assert await adopted.read_file("notes.txt") == b"kept"
                    assert "notes.txt" in [f.path for f in await adopted.list_files()]
                    again = Output()
                    async with trio.open_nursery() as reattached:
                        await reattached.start(adopted.run_app, the_spec.apps[0], again)
                        await adopted.apply(
                            ChangeSet(writes=(Write("app.telo", b"print app v2\nwait\n"),))
                        )
                        await again.until(b"app v2")  # the same kernel, re-attached
                        reattached.cancel_scope.cancel()
                    assert b"app up" not in again.data  # no splice: it went out before
                    assert session_pods(kubesim) == [pod]  # adopted, not recreated
                # Leaving the adopted place deletes the pod, as leaving any does.
                await wait_pods(kubesim, lambda pods: not pods, TIMEOUT_S)
            await trio.sleep_forever()  # the first place sees its pod go
    # The first daemon's hold (dead, in a real restart) sees the pod deleted
    # by another: its session's end, as the seam's PlaceEnded (no group).
    assert str(first_end.value) == "the session pod was deleted outside runnerd"
