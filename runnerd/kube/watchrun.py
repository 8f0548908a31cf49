"""A Kubernetes watch session's pod, entered and left: `open_watch_pod` and
`adopt_watch_pod` (`KubeBackend.open_watch` / `adopt_watch`).

Entering a new pod, in order, each failure a `StartError` naming its stage:

1. `create`: the workspace application's ConfigMap ensured (one already
   there read back: a foreign one refuses the start) and the stale ones no
   pod mounts swept; the watch pod (`watchpod.build_watch_pod`, a fresh
   name, a fresh workspace token) created, in the ledger as a run pod is
   (so the reaper and recovery spare it);
2. `provision`: `podstatus.StartWatch` on the `workspace` container (the
   run pods' rules: a node, the pulls, a back-off past its grace) reported
   as `progress` until it runs;
3. `boot`: the workspace API's `/healthz` polled (soon at first, backing
   off to `BOOT_POLL_S`) until it answers, at most `BOOT_WAIT_S`; a
   workspace container that terminates meanwhile fails it at once (`the
   workspace container exited with code N`);
4. `provision` again: the workspace seeded (the bundle's files, or the
   checkpoint's tar on a resume or a reopen).

Adopting (`adopt_watch_pod`): the session's live watch pod found in the
informer (labels: managed-by, session id, mode), its workspace token read
back from its spec (`watchpod.read_workspace_token`), no seeding; none (or
not running) is `PlaceGone`.

While entered, the pod is watched (the informer): one that reaches
`Failed`/`Succeeded` (the TTL included), is deleted by someone else, or
whose workspace container terminates ends the session: `PlaceEnded("session
pod reached <phase>")` (or "the session pod was deleted outside runnerd",
"the workspace container exited with code N": nothing serves the files)
out of the context (the core's `failed` with that message, no stage
prefix; a user stop cancels the context first).

Leaving, on every path but a detach, shielded and bounded
(`podstop.tear_down`): the pod deleted and waited for until gone (a detach,
`ProgressReport.detaching()`, leaves it for the successor's adoption); a
delete that fails is the ledger's abandoned (the sweep retries). The
ConfigMap is shared by every watch pod of this runnerd (content-addressed):
when the last of this process's is gone, the ConfigMaps no pod mounts are
deleted (a pod a previous process left, still to be adopted, keeps its own),
so an idle runnerd leaves none.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

import runnerd.kube.errors as errors
from runnerd.backend import StartError
from runnerd.backend.watch import PlaceEnded, PlaceGone, ProgressReport, WatchSpec
from runnerd.contract import RouteState
from runnerd.kube.informer import PodSubscription
from runnerd.kube.ledger import PodLedger
from runnerd.kube.podphase import Teardown
from runnerd.kube.podspec import SESSION_LABEL, format_created_at, is_ours
from runnerd.kube.podstatus import PodRunning, Progress, StartFailed, StartWatch
from runnerd.kube.podstop import tear_down
from runnerd.kube.watchcheckpoint import FileCheckpoint
from runnerd.kube.watchhost import HostKit, KubeWatchHost, WatchPod, Workspace, seed_files
from runnerd.kube.watchpod import (
    WORKSPACE_CONTAINER,
    WORKSPACE_PORT,
    app_container_name,
    build_watch_pod,
    is_watch_pod,
    read_watch_annotations,
    read_workspace_token,
    watch_pod_name,
)
from runnerd.kube.watchstatus import container_exit, pod_end, pod_ip, workspace_end
from runnerd.kube.workspaceapp import configmap_for, ensure_configmap, sweep_stale_configmaps

log = logging.getLogger(__name__)

CREATE_OPERATION = "could not create the session pod"
# The workspace API comes up within seconds of its container; past this the
# start fails naming `boot` rather than hanging a POST.
BOOT_WAIT_S = 60.0
# Its health is polled soon at first (it answers within a few tens of ms of
# its container running on a warm node), doubling up to BOOT_POLL_S.
BOOT_FIRST_POLL_S = 0.01
BOOT_POLL_S = 0.2
# The ConfigMap sweep after the last watch pod is gone: a leave stays bounded.
SWEEP_WAIT_S = 5.0


class SeedableWorkspace(Workspace, Protocol):
    """What entering needs of the workspace API beyond the host's calls."""

    async def healthy(self) -> bool: ...

    async def seed(self, files: Any) -> object: ...

    async def seed_from_tar(self, path: Any) -> object: ...

    async def aclose(self) -> None: ...


# (dial host, port, token) → the client (`workspaceapi.WorkspaceApi`).
WorkspaceFactory = Callable[[str, int, str], SeedableWorkspace]


@dataclass
class WatchRunKit:
    """What every watch pod of one backend shares. `active`: this process's
    watch pods from before their create to after they are gone; while any
    is, the workspace application's ConfigMap stays (`lock` orders its
    ensure against the sweep that follows the last one)."""

    host: HostKit
    ledger: PodLedger
    workspace: WorkspaceFactory
    active: set[str] = field(default_factory=set)
    lock: trio.Lock = field(default_factory=trio.Lock)


@asynccontextmanager
async def open_watch_pod(
    kit: WatchRunKit, spec: WatchSpec, progress: ProgressReport
) -> AsyncIterator[KubeWatchHost]:
    """A new watch pod for `spec` (module docstring). Raises StartError."""
    settings = kit.host.settings
    name, token = watch_pod_name(spec.session_id), secrets.token_urlsafe(32)
    cm_name = await _ensure_configmap(kit, name)
    pod = build_watch_pod(
        settings,
        spec,
        name=name,
        configmap=cm_name,
        workspace_token=token,
        created_at=format_created_at(spec.identity.created_at or time.time()),
    )
    containers = {app.name: app_container_name(app.name) for app in spec.apps}
    with kit.host.informer.subscribe(name) as sub:
        kit.ledger.created(name)
        try:
            created = await _create(kit, spec, pod)
            ip = await _provision(kit, sub, created, progress)
            workspace = kit.workspace(ip, WORKSPACE_PORT, token)
            try:
                await _boot(workspace, sub, progress)
                await _seed(workspace, spec, progress)
                place = WatchPod(name, created, ip, containers)
                async with _watching(kit, spec, place, workspace, sub, progress) as host:
                    yield host
            finally:
                await workspace.aclose()  # bounded and shielded by itself
        finally:
            with trio.CancelScope(shield=True):
                await _leave(kit, name, sub, progress)


@asynccontextmanager
async def adopt_watch_pod(
    kit: WatchRunKit, spec: WatchSpec, progress: ProgressReport
) -> AsyncIterator[KubeWatchHost]:
    """The session's live watch pod a previous daemon left (module
    docstring). Raises PlaceGone."""
    await kit.host.informer.wait_synced()
    pod = _live_watch_pod(kit.host.informer.pods(), spec.session_id)
    info = read_watch_annotations(pod) if pod is not None else None
    token = read_workspace_token(pod) if pod is not None else None
    ip = pod_ip(pod)
    if pod is None or info is None or token is None or ip is None:
        raise PlaceGone("the session's pod was gone after a restart")
    containers = {app.launch.name: app.container for app in info.apps}
    with kit.host.informer.subscribe(info.name) as sub:
        kit.ledger.created(info.name)
        kit.active.add(info.name)
        try:
            place = WatchPod(info.name, pod, ip, containers, adopted=True)
            workspace = kit.workspace(ip, WORKSPACE_PORT, token)
            try:
                async with _watching(kit, spec, place, workspace, sub, progress) as host:
                    yield host
            finally:
                await workspace.aclose()
        finally:
            with trio.CancelScope(shield=True):
                await _leave(kit, info.name, sub, progress)


async def _leave(
    kit: WatchRunKit, name: str, sub: PodSubscription, progress: ProgressReport
) -> None:
    """Delete pod `name` and wait until it is gone (bounded), then release
    the ConfigMap; on a detach (the daemon restarts for a successor to
    adopt), leave both as they are: the pod stays live in the ledger."""
    if progress.detaching():
        kit.active.discard(name)
        return
    await tear_down(kit.host.client, kit.ledger, name, sub, Teardown.DELETE_AND_WAIT)
    await _release_configmap(kit, name)


async def _ensure_configmap(kit: WatchRunKit, name: str) -> str:
    """The workspace application's ConfigMap there (stale ones swept), and
    pod `name` counted active: the ConfigMap's name. Raises StartError."""
    settings, client = kit.host.settings, kit.host.client
    configmap = configmap_for(settings)
    cm_name: str = configmap["metadata"]["name"]
    async with kit.lock:
        try:
            await ensure_configmap(client, configmap)
        except errors.KubeError as exc:
            raise errors.start_error(exc, "create") from exc
        kit.active.add(name)
    if kit.host.informer.synced:  # else a pod not listed yet could lose its own
        await sweep_stale_configmaps(client, cm_name, kit.host.informer.pods(), settings=settings)
    return cm_name


async def _release_configmap(kit: WatchRunKit, name: str) -> None:
    """Pod `name` is gone: with no other watch pod of this process left,
    the ConfigMaps no pod mounts are deleted (bounded; never raises)."""
    kit.active.discard(name)
    async with kit.lock:
        if kit.active or not kit.host.informer.synced:
            return
        with trio.move_on_after(SWEEP_WAIT_S):
            await sweep_stale_configmaps(
                kit.host.client, "", kit.host.informer.pods(), settings=kit.host.settings
            )


def _live_watch_pod(pods: list[Mapping[str, Any]], session_id: str) -> Mapping[str, Any] | None:
    """The session's watch pod that is running and not being deleted."""
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if not is_watch_pod(pod) or labels.get(SESSION_LABEL) != session_id:
            continue
        if pod_end(pod) is None:
            return pod
    return None


async def _create(kit: WatchRunKit, spec: WatchSpec, pod: dict[str, Any]) -> dict[str, Any]:
    settings = kit.host.settings
    try:
        return await kit.host.client.create_pod(
            pod,
            operation=CREATE_OPERATION,
            is_ours=lambda p: is_ours(p, settings, spec.session_id),
        )
    except errors.KubeError as exc:
        raise errors.start_error(exc, "create") from exc


async def _provision(
    kit: WatchRunKit, sub: PodSubscription, created: Mapping[str, Any], progress: ProgressReport
) -> str:
    """Follow the pod until its workspace container runs: its IP."""
    watch = StartWatch(kit.host.settings.pull_backoff_grace_s, container=WORKSPACE_CONTAINER)
    said = ""
    state: Any = sub.latest() or created
    while True:
        verdict = watch.observe(state if isinstance(state, Mapping) else None, trio.current_time())
        if isinstance(verdict, PodRunning) and verdict.pod_ip:
            progress.progress("provision", "the session pod is running", done=True)
            return verdict.pod_ip
        if isinstance(verdict, Progress) and verdict.message != said:
            said = verdict.message
            progress.progress("provision", said)
        elif isinstance(verdict, StartFailed):
            raise StartError("provision", verdict.message)
        elif not isinstance(verdict, (Progress, PodRunning)):
            raise StartError(
                "provision",
                verdict.message
                if hasattr(verdict, "message")
                else f"the workspace container exited ({verdict.code})",
            )
        state = await sub.next()


async def _boot(
    workspace: SeedableWorkspace, sub: PodSubscription, progress: ProgressReport
) -> None:
    """Wait (bounded) for the workspace API to answer `/healthz`; a workspace
    container that terminates meanwhile fails the boot at once, naming its end."""
    progress.progress("boot", "waiting for the workspace to come up")
    exited: list[str] = []
    up = False

    async def watch_exit(scope: trio.CancelScope) -> None:
        exited.append(await _workspace_exited(sub))
        scope.cancel()

    with trio.move_on_after(BOOT_WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_exit, nursery.cancel_scope)
            up = await _until_healthy(workspace)
            nursery.cancel_scope.cancel()
    if exited:
        raise StartError("boot", exited[0])
    if up:
        progress.progress("boot", "the workspace is up", done=True)
        return
    raise StartError("boot", f"the workspace did not come up within {BOOT_WAIT_S:.0f} s")


async def _until_healthy(workspace: SeedableWorkspace) -> bool:
    """Poll `/healthz` until it answers (the caller bounds the wait): True."""
    poll_s = BOOT_FIRST_POLL_S
    while not await workspace.healthy():
        await trio.sleep(poll_s)  # a poll: nothing to wait on but the answer
        poll_s = min(poll_s * 2, BOOT_POLL_S)
    return True


async def _workspace_exited(sub: PodSubscription) -> str:
    """`the workspace container exited with code N`, once it has."""
    state: Any = sub.latest()
    while True:
        if isinstance(state, Mapping):
            code = container_exit(state, WORKSPACE_CONTAINER)
            if code is not None:
                return f"the workspace container exited with code {code}"
        state = await sub.next()


async def _seed(workspace: SeedableWorkspace, spec: WatchSpec, progress: ProgressReport) -> None:
    """The bundle's files, or the checkpoint's (a resume, a reopen)."""
    checkpoint = spec.checkpoint
    try:
        if checkpoint is None:
            progress.progress("provision", "writing the session's files")
            await workspace.seed(seed_files(spec))
        elif isinstance(checkpoint, FileCheckpoint):
            files = f"{checkpoint.files} file" + ("" if checkpoint.files == 1 else "s")
            progress.progress("provision", f"restoring the workspace ({files})")
            await workspace.seed_from_tar(checkpoint.path)
        else:
            raise StartError("provision", "the checkpoint was not made by this backend")
    except StartError:
        raise
    except Exception as exc:  # the client's classified, client-safe errors
        raise StartError("provision", f"cannot seed the workspace: {exc}") from exc


@asynccontextmanager
async def _watching(
    kit: WatchRunKit,
    spec: WatchSpec,
    place: WatchPod,
    workspace: Workspace,
    sub: PodSubscription,
    progress: ProgressReport,
) -> AsyncIterator[KubeWatchHost]:
    """The host, while its routes are open and a task watches the pod for
    its end (module docstring)."""
    report = _RouteReport(progress)
    try:
        async with (
            kit.host.routing.session_routes(spec.identity, place.pod, report) as routes,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(_watch_end, sub)
            yield KubeWatchHost(kit.host, spec, place, workspace, routes)
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The pod's end, alone with the body's cancellation it caused: the
        # seam's PlaceEnded itself, never a group (house rule 5).
        ended = _the_end(group)
        if ended is None:
            raise
        raise ended from None


def _the_end(group: BaseExceptionGroup[Any]) -> PlaceEnded | None:
    """The pod's end in `group` when everything else is its cancellation."""
    found: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            found.append(exc)

    walk(group)
    real = [e for e in found if not isinstance(e, trio.Cancelled)]
    return real[0] if len(real) == 1 and isinstance(real[0], PlaceEnded) else None


class _RouteReport:
    """Route health as the session's `route` events; a refusal's line as
    progress (a watch session has no terminal of its own)."""

    def __init__(self, progress: ProgressReport) -> None:
        self._progress = progress

    def route(self, host: str, port: int, state: RouteState, reason: str | None = None) -> None:
        self._progress.route(host, port, state, reason)

    def notice(self, text: str) -> None:
        self._progress.progress("provision", text)


async def _watch_end(sub: PodSubscription) -> None:
    """Raise the session's end once the pod has one, or its workspace
    container has ended (the newest state first: the boot's watch may have
    taken the one that told)."""
    state: Any = sub.latest()
    while True:
        pod = state if isinstance(state, Mapping) else None
        end = pod_end(pod) or workspace_end(pod, WORKSPACE_CONTAINER)
        if end is not None:
            raise PlaceEnded(end)
        state = await sub.next()
