"""The Kubernetes backend: each session is a pod in the session namespace.

Owns `KubeBackend`, the parts in this package (see its docstring) put
together behind the backend seam. Each `run` is one `podrun.PodRun` (the
pod from create to delete, its phases `podphase`'s); what is known about
the pods across runs (live, stopping, abandoned, stopped by the previous
process) is the one `ledger.PodLedger`, which the provider's reaper, sweep
and give-up file read.

Restarts (`runnerd.kube.recovery`): `recover()` reads back the pods a
previous process left; `run()` with no creation re-attaches to one (no log
splice: its client saw that output already; one notice line says output
from while runnerd was away may be missing) and supervises it as usual.
The watch pods it finds are left to `adopt_watch`; those no session
adopted `WATCH_ADOPT_GRACE_S` after `recover()` are given up on
(`sweep_unadopted_watch`): the provider's sweep deletes them. One that
ended while runnerd was away (Failed/Succeeded) is given up on at once.
With `on_restart = "reap"`, `watch_reap` tells the core to discard the
watch records instead of adopting them (the reaper deletes their pods).

Public routes (`runnerd.kube.routing`): `backend.routing`, resolved at
start, gives each session its Service and Ingress or HTTPRoutes and follows
their health (`routing.session_routes`).

`probe` answers whether sessions could start now (ready, unreachable,
forbidden, namespace missing), each with what the operator should do.
"""

from __future__ import annotations

import functools
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from runnerd.backend import ImageSpec, Outcome, Recovered, RunSpec, Sink, Started
from runnerd.backend.watch import Checkpoint, ProgressReport, WatchHost, WatchSpec
from runnerd.contract import AvailabilityReport, IoMode
from runnerd.kube.bundle import BundleTokens
from runnerd.kube.client import KubeClient
from runnerd.kube.informer import PodInformer
from runnerd.kube.ledger import PodLedger
from runnerd.kube.podrun import PodRun, PodRunContext
from runnerd.kube.podspec import pod_name
from runnerd.kube.probe import probe_cluster
from runnerd.kube.recovery import left_pods, left_watch_pods, recover_pods
from runnerd.kube.routing import Routing
from runnerd.kube.settings import KubeSettings

if TYPE_CHECKING:
    from runnerd.kube.watchrun import WatchRunKit

# How long after `recover()` the core has to adopt the watch pods a previous
# process left (its recovery adopts them right after `recover()` returns;
# this is headroom for a slow apiserver, not a wait anyone sees).
WATCH_ADOPT_GRACE_S = 60.0


class KubeBackend:
    """`runnerd.backend.Backend` running sessions as pods."""

    name = "kubernetes"
    # `/v1/capabilities`' description unless runner.description is set.
    description = "Runs Telo applications on a Kubernetes cluster, in a pod per session."
    notices: tuple[str, ...] = ()
    # A pod outlives its daemon: a detach leaves it for a successor to adopt.
    detach_supported = True
    # A watch pod's app containers: a TTY, or stdout and stderr apart.
    watch_io: tuple[IoMode, ...] = ("tty", "streams")
    watch_fixed_apps = True  # the apps are the pod's containers
    watch_adopt = True  # a pod outlives its daemon

    def __init__(
        self,
        settings: KubeSettings,
        client: KubeClient,
        informer: PodInformer,
        tokens: BundleTokens,
        routing: Routing,
        *,
        ledger: PodLedger | None = None,
        state_dir: Path | None = None,
    ) -> None:
        self._settings = settings
        self.client = self._client = client
        self._informer = informer
        self.ledger = ledger or PodLedger()
        # Resolved once at start (`runnerd.kube.routing`): every session's
        # routes, run pods' and watch pods' alike, are made with it.
        self.routing = routing
        self._runs = PodRunContext(settings, client, informer, tokens, self.ledger, routing)
        # Where watch checkpoints are kept (`watchcheckpoint`); None: nowhere.
        self._state_dir = state_dir
        self._watch_left: list[str] = []
        # With "reap" the provider's reaper deletes the watch pods left too:
        # the core discards their records instead of adopting them.
        self.watch_reap = settings.on_restart == "reap"
        self._recovered = trio.Event()

    @functools.cached_property
    def _watch(self) -> WatchRunKit:
        """What watch pods are made with, built at the first watch session:
        the watch pod, host, workspace and checkpoint modules (and their
        dataclasses) are no part of a start that runs none."""
        from runnerd.kube.watchhost import HostKit
        from runnerd.kube.watchrun import WatchRunKit
        from runnerd.kube.workspaceapi import WorkspaceApi

        host = HostKit(self._settings, self._client, self._informer, self._state_dir, self.routing)
        return WatchRunKit(host, self.ledger, WorkspaceApi)

    async def recover(self) -> list[Recovered]:
        """With `on_restart = "adopt"`, once the informer has listed them:
        the pods a previous process left, live and ended (the ended ones, and
        the unreadable ones, deleted); see `runnerd.kube.recovery`. Empty
        with "reap" (the provider's reaper deletes them)."""
        if self._settings.on_restart != "adopt":
            await trio.lowlevel.checkpoint()
            return []
        from runnerd.kube.watchstatus import pod_end  # with the watch modules: see `_watch`

        await self._informer.wait_synced()
        ledger, pods = self.ledger, self._informer.pods()
        left = left_watch_pods(pods, ledger.live)
        # An ended watch pod (its deadline passed, evicted, while no runnerd
        # watched) has nothing to adopt: given up on now, not after the grace.
        ended = {(p.get("metadata") or {}).get("name") for p in pods if pod_end(p) is not None}
        ledger.abandon([name for name in left if name in ended], trio.current_time())
        self._watch_left = [name for name in left if name not in ended]
        self._recovered.set()
        return await recover_pods(self._client, left_pods(pods, ledger.live, ledger.stopped_before))

    async def sweep_unadopted_watch(self, grace_s: float = WATCH_ADOPT_GRACE_S) -> list[str]:
        """Once `recover()` ran and `grace_s` passed: the watch pods it found
        that no session adopted meanwhile, given up on in the ledger (the
        sweep deletes them). Never returns without a `recover()`."""
        await self._recovered.wait()
        await trio.sleep(grace_s)
        return self.ledger.abandon(self._watch_left, trio.current_time())

    def open_watch(
        self, spec: WatchSpec, progress: ProgressReport
    ) -> AbstractAsyncContextManager[WatchHost]:
        """A new watch pod for the session (`watchrun.open_watch_pod`)."""
        from runnerd.kube.watchrun import open_watch_pod

        return open_watch_pod(self._watch, spec, progress)

    def adopt_watch(
        self, spec: WatchSpec, progress: ProgressReport
    ) -> AbstractAsyncContextManager[WatchHost]:
        """The session's watch pod a previous process left
        (`watchrun.adopt_watch_pod`); `PlaceGone` when there is none."""
        from runnerd.kube.watchrun import adopt_watch_pod

        return adopt_watch_pod(self._watch, spec, progress)

    def load_checkpoint(self, saved: dict[str, object]) -> Checkpoint | None:
        """A checkpoint a previous daemon kept in `<state_dir>/watch-checkpoints`
        (`watchcheckpoint.load_checkpoint`), or None."""
        if self._state_dir is None:
            return None
        from runnerd.kube.watchcheckpoint import load_checkpoint

        return load_checkpoint(self._state_dir, saved)

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        """Whether sessions could start now (`probe.probe_cluster`)."""
        return await probe_cluster(self._client)

    async def run(
        self,
        spec: RunSpec,
        sink: Sink,
        *,
        task_status: trio.TaskStatus[Started] = trio.TASK_STATUS_IGNORED,
    ) -> Outcome:
        """`runnerd.backend.Backend.run`: one `podrun.PodRun`."""
        with self._informer.subscribe(pod_name(spec.session_id)) as sub:
            return await PodRun(self._runs, spec, sink, sub).run(task_status)
