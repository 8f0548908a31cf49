"""A Kubernetes watch session's live place: `KubeWatchHost`, one watch pod.

Owns what the core does on a live watch pod (`runnerd.backend.watch.
WatchHost`); entering and leaving the pod is `runnerd.kube.watchrun`'s:

- the workspace operations go to the `workspace` container's API over the
  pod IP (`Workspace`: `workspaceapi.WorkspaceApi`'s calls);
  `checkpoint` streams its snapshot to a 0600 tar in the state dir
  (`runnerd.kube.watchcheckpoint`);
- `publish` is the session's Service and Ingress or HTTPRoutes for the
  port set (`routes.SessionRoutes.publish`, owned by the pod, their health
  reported as `route` progress; `watchrun` holds the routes open for the
  pod's life): a refusal is the ports `rejected`, never raised;
- `run_app`/`run_agent` attach to the app's own container (`app-<name>`,
  `agent`; `terminal.keep_attached` with `container=`): a `tty` app's one
  stream spliced with that container's log, as a run pod's; a `streams`
  app's stdout and stderr apart (`OutputStream`), passed through (the log
  interleaves them). Started once the container runs: the `Relay`, the
  pod IP with the app's inspect port (9230 + slot), `self_watching` (the
  container runs `telo run --watch`), and `reload` (the entry rewritten
  through the workspace API: the kernel reloads in place). Returns
  `Exited(code)` once the container terminated (the informer's
  containerStatuses). A container that already terminated never runs
  again in this pod (`restartPolicy: Never`): its `run_app` is a
  `StartError` saying when the app comes back.

Cancellation (a stop of the app, a suspend, the session's end): the attach
is closed and `AppSink.exited(143)` reported; the container itself runs on
until the pod is deleted (a pod's container cannot be stopped alone; the
core reloads a self-watching app instead of cancelling it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import trio

from runnerd.backend import Exited, Failed, StartError, WorkloadAddress
from runnerd.backend.watch import (
    AgentLaunch,
    AppLaunch,
    AppSink,
    AppStarted,
    ChangeSet,
    Checkpoint,
    CheckpointFailed,
    OutputStream,
    Published,
    WatchSpec,
    WorkspaceFile,
    Write,
)
from runnerd.contract import PortMapping
from runnerd.errors import RunnerdError
from runnerd.kube.client import KubeClient
from runnerd.kube.informer import PodInformer, PodState, PodSubscription
from runnerd.kube.routes import SessionRoutes
from runnerd.kube.routing import Routing
from runnerd.kube.settings import KubeSettings
from runnerd.kube.terminal import Relay, Splice, keep_attached, read_log
from runnerd.kube.watchcheckpoint import FileCheckpoint, new_checkpoint_path
from runnerd.kube.watchpod import AGENT_CONTAINER, START_LINE, inspect_port
from runnerd.kube.watchstatus import container_exit

log = logging.getLogger(__name__)

# A stopped generation's code when the container itself runs on (SIGTERM's).
DETACHED_CODE = 143
ENDED_MESSAGE = (
    "its container in the session pod has ended; the app runs again with the"
    " session's next resume or a PUT /apps"
)


class Workspace(Protocol):
    """The workspace container's API (`workspaceapi.WorkspaceApi`)."""

    async def list(self) -> list[WorkspaceFile]: ...

    async def read(self, path: str) -> bytes: ...

    async def apply(self, changes: ChangeSet) -> tuple[int, int]: ...

    async def snapshot_to(self, dest: Path) -> tuple[int, int]: ...


@dataclass
class WatchPod:
    """The one watch pod a host runs on, as `watchrun` made or adopted it."""

    name: str
    pod: Mapping[str, Any]  # as created (the owner of the Service)
    ip: str
    containers: Mapping[str, str]  # app name → its container
    adopted: bool = False
    attached: set[str] = field(default_factory=set)  # containers attached before


@dataclass(frozen=True)
class HostKit:
    """What every host of one backend shares."""

    settings: KubeSettings
    client: KubeClient
    informer: PodInformer
    state_dir: Path | None  # None: no checkpoints (a backend built for tests)
    routing: Routing


class _StreamsSink:
    """A `streams` container's two streams to the app's sink, apart."""

    def __init__(self, sink: AppSink) -> None:
        self._sink = sink

    def stdout(self, data: bytes) -> None:
        self._sink.output(data, OutputStream.STDOUT)

    def stderr(self, data: bytes) -> None:
        self._sink.output(data, OutputStream.STDERR)


class KubeWatchHost:
    """`runnerd.backend.watch.WatchHost` on one watch pod (module docstring)."""

    def __init__(
        self,
        kit: HostKit,
        spec: WatchSpec,
        pod: WatchPod,
        workspace: Workspace,
        routes: SessionRoutes,
    ) -> None:
        self._kit = kit
        self._spec = spec
        self.pod = pod
        self._workspace = workspace
        self._routes = routes

    async def list_files(self) -> list[WorkspaceFile]:
        return await self._workspace.list()

    async def read_file(self, path: str) -> bytes:
        return await self._workspace.read(path)

    async def apply(self, changes: ChangeSet) -> tuple[int, int]:
        return await self._workspace.apply(changes)

    async def checkpoint(self) -> Checkpoint:
        """The workspace's snapshot as a 0600 tar in the state dir; a failed
        one leaves no file (CheckpointFailed)."""
        if self._kit.state_dir is None:
            raise CheckpointFailed("checkpoints need the daemon's state dir")
        try:
            path = await trio.to_thread.run_sync(
                new_checkpoint_path, self._kit.state_dir, self._spec.session_id
            )
        except OSError as exc:
            raise CheckpointFailed(f"cannot keep a checkpoint: {exc.strerror}") from exc
        try:
            files, size = await self._workspace.snapshot_to(path)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(path.unlink, True)
            raise
        return FileCheckpoint(path, files, size)

    async def publish(self, ports: tuple[PortMapping, ...]) -> Published:
        """The session's routes for `ports`, owned by the pod (never raises
        for the cluster's refusal)."""
        return await self._routes.publish(ports)

    async def run_app(
        self,
        app: AppLaunch,
        sink: AppSink,
        *,
        task_status: trio.TaskStatus[AppStarted] = trio.TASK_STATUS_IGNORED,
    ) -> Exited | Failed:
        container = self.pod.containers.get(app.name)
        if container is None:
            raise StartError("run", f"app '{app.name}' is not in the session pod")
        await self._check_entry(app.entry)
        address = WorkloadAddress(self.pod.ip, inspect_port(app.slot))
        return await self._run(
            container, app.io == "tty", sink, address, self._reload(app), task_status
        )

    async def run_agent(
        self,
        agent: AgentLaunch,
        sink: AppSink,
        *,
        task_status: trio.TaskStatus[AppStarted] = trio.TASK_STATUS_IGNORED,
    ) -> Exited | Failed:
        address = WorkloadAddress(self.pod.ip)
        return await self._run(AGENT_CONTAINER, False, sink, address, None, task_status)

    async def _check_entry(self, entry: str) -> None:
        """As the local backend: an entry that is not a file in the workspace
        fails the start (the contract's `started` + `failed`) rather than
        leave the app's container waiting for it with no generation."""
        try:
            files = await self._workspace.list()
        except RunnerdError as exc:  # the workspace API down: its message is client-safe
            raise StartError("boot", exc.message) from exc
        if not any(f.path == entry for f in files):
            raise StartError("boot", f"entry {entry!r} is not a file in the workspace")

    def _reload(self, app: AppLaunch) -> Callable[[], Any]:
        async def reload() -> None:
            # Every write lands (mtime bumped) even with the same bytes: the
            # kernel's watch sees a change and starts a new run in place.
            data = await self._workspace.read(app.entry)
            await self._workspace.apply(ChangeSet(writes=(Write(app.entry, data),)))

        return reload

    async def _run(
        self,
        container: str,
        tty: bool,
        sink: AppSink,
        address: WorkloadAddress,
        reload: Callable[[], Any] | None,
        task_status: trio.TaskStatus[AppStarted],
    ) -> Exited | Failed:
        kit, name = self._kit, self.pod.name
        with kit.informer.subscribe(name) as sub:
            state = sub.latest()
            if state is not None and container_exit(_pod(state), container) is not None:
                raise StartError("run", ENDED_MESSAGE)
            stream = OutputStream.TTY if tty else OutputStream.STDOUT
            splice = Splice(lambda data: sink.output(data, stream), sink.output_lost)
            first = not self.pod.adopted and container not in self.pod.attached
            if not tty or not first:
                splice.pass_through()  # its earlier output went out already
            self.pod.attached.add(container)
            relay = Relay()
            if first and not tty and reload is not None:
                # A `streams` app waits for this line before it starts
                # (`watchpod._GATED_SCRIPT`): held by the relay until the
                # first attach is up, so none of its output comes before.
                relay.write(START_LINE)
            task_status.started(
                AppStarted(relay, address, self_watching=reload is not None, reload=reload)
            )
            try:
                delivered = await self._attach(container, tty, sink, relay, splice, sub)
            except trio.Cancelled:
                sink.exited(DETACHED_CODE)
                raise
            code = await _exit_code(sub, container)
            if tty and not delivered:
                splice.catch_up(await read_log(kit.client, name, container=container))
            return Exited(code)

    async def _attach(
        self,
        container: str,
        tty: bool,
        sink: AppSink,
        relay: Relay,
        splice: Splice,
        sub: PodSubscription,
    ) -> bool:
        streams = _StreamsSink(sink)

        def not_ended() -> bool:
            # Attached as early as it can be (the container may still be
            # being created: a refused attach is retried), so its first
            # output is not written before anyone listens.
            state = sub.latest()
            return state is None or container_exit(_pod(state), container) is None

        return await keep_attached(
            self._kit.client,
            self.pod.name,
            relay,
            splice,
            lambda data: sink.output(data, OutputStream.TTY if tty else OutputStream.STDOUT),
            not_ended,
            container=container,
            tty=tty,
            on_stderr=None if tty else streams.stderr,
        )


def _pod(state: PodState) -> Mapping[str, Any] | None:
    """A state as a pod, None when it is GONE."""
    return state if isinstance(state, Mapping) else None


async def _exit_code(sub: PodSubscription, container: str) -> int:
    """The container's exit code once the informer shows it terminated."""
    while True:
        state = sub.latest()
        if state is not None:  # None: not seen yet
            code = container_exit(_pod(state), container)
            if code is not None:
                return code
        await sub.next()


def seed_files(spec: WatchSpec) -> Iterable[tuple[str, bytes]]:
    """The bundle's files, as the workspace is seeded with them."""
    bundle = spec.creation.bundle
    return () if bundle is None else ((path, text.encode()) for path, text in bundle.files)
