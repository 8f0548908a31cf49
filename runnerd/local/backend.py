"""The local backend: each session is a process on this host, under a real PTY.

Owns turning a `RunSpec` into a running process and back: the session
directory (`workdir/<session-id>/app` holds the bundle and is the cwd, as
the Telo runners run an entry in its bundle's directory; `work` is HOME, and
the cwd of an app session, which has no bundle), the session uid of a root
daemon (`identity`), the runtime's command line, the PTY process, the `running` status with
its endpoints and its address (`Started.address`: where the core probes its
ports and finds its debug server), the exit code, and the
teardown (the session's PID namespace or process group stopped, its
cgroup and session directory deleted) on every path. How sessions are
contained (`containment`) and whether they get cgroup ceilings (`cgroups`)
is found once, at construction, and announced there; what is checked before
a session runs (that announcement, an image's runtime resolved for a probe
and a start) is `runnerd.local.preflight`.

The workload's terminal exists from its first instruction, so its first
size must be the client's: the spawn waits (`Sink.terminal_size`) until a
client has asked for a size (the POST's `x-runnerd-terminal-size`, or an
`/io` client's first resize) or `local.terminal_size_wait_seconds` from the
session's creation have passed (80x24 then). The status stays `starting`
meanwhile, and a stop ends the wait as it ends any start.

A local "image" names a runtime from `[local.runtimes]`: a command line in
which `{entry}` is the absolute path of the bundle's entry file. An app
session (catalog entry, no bundle) runs the runtime its catalog image names;
a runtime whose command needs `{entry}` cannot run an app, which is a start
failure naming the runtime.

With `inspect` and a runtime that has `inspect_args`, a free loopback port is
picked and substituted for `{inspect_port}` and reported in the address, so
`running.inspectUrl` is the debug server's base URL `http://127.0.0.1:<port>`
(the core relays its `/events` SSE stream as debug frames).

With a network namespace per session (`[local] network`, see
`runnerd.local.network`), each declared TCP port and the inspect port are
published on the host's loopback and forwarded in (`runnerd.local.forward`)
before the session is `running`, and the address's `dial` reaches inside
(the core's reachability probes must meet the workload, not the forwarder).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import trio

from runnerd.backend import (
    Exited,
    Failed,
    ImageSpec,
    Outcome,
    Recovered,
    RunSpec,
    Sink,
    Started,
    StartError,
    WorkloadAddress,
)
from runnerd.backend.watch import Checkpoint, PlaceGone, ProgressReport, WatchHost, WatchSpec
from runnerd.contract import AvailabilityReport, IoMode, RunnerEndpoint, ready, unavailable
from runnerd.local.cgroups import SessionCgroups, open_session_cgroups
from runnerd.local.containment import ContainmentPlan, probe_containment
from runnerd.local.forward import SessionNetwork, free_loopback_port, open_session_network
from runnerd.local.identity import SessionIdentity, SessionUids
from runnerd.local.initpython import (
    choose_init_binary,
    choose_init_python,
    unreachable_workdir,
)
from runnerd.local.launch import Unresolved, build_argv, build_env
from runnerd.local.mounts import SessionView
from runnerd.local.network import probe_network
from runnerd.local.preflight import announce, resolve_image, start_checks
from runnerd.local.pty import PtyProcess
from runnerd.local.runtimes import workload_path
from runnerd.local.sandbox import SandboxPlan
from runnerd.local.settings import LocalConfig, RuntimeConfig
from runnerd.local.spawn import Launch, spawn_pty_process
from runnerd.local.trash import Trash
from runnerd.local.watching import WatchKit, open_local_watch
from runnerd.local.workdir import (
    SessionDir,
    WorkdirError,
    claim_workdir,
    prepare_session_dir,
    sweep_workdir,
)
from runnerd.workload.supervision import tcp_ports

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


class LocalBackend:
    """`runnerd.backend.Backend` running sessions as local PTY processes."""

    name = "local"
    # Detach is not supported: a session's processes live in the daemon's
    # PID namespace or process group and its workdir, so they cannot outlive
    # the daemon or be found by a successor (whose start sweeps what a killed
    # daemon left). The manager refuses a detach rather than leave them.
    detach_supported = False
    # Watch sessions (`runnerd.local.watching`): an app on a PTY or on pipes.
    watch_io: tuple[IoMode, ...] = ("tty", "streams")
    watch_fixed_apps = False  # any app joins the session's sandbox
    watch_adopt = False  # a sandbox never outlives its daemon

    def __init__(
        self,
        local: LocalConfig,
        *,
        hidden: Iterable[Path] = (),
        max_body_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        """`hidden`: what no session may see (the daemon's config and socket
        directories, `runnerd.backend.BackendContext.hidden_paths`), covered in
        every session, as the workdir is but for the session's own directory.
        Only with a mount namespace (`/v1/capabilities` says when there is none).
        `max_body_bytes` (`server.max_body_bytes`): a watch session's change
        set and file read caps."""
        self._local = local
        self._max_body_bytes = max_body_bytes
        self._workdir_lock: int | None = None
        self.trash = Trash(Path(local.workdir))  # run by `open_backend`
        self._hidden = tuple(sorted({os.path.abspath(path) for path in hidden}))
        # Probed once, here: the daemon builds the backend once at start-up,
        # so each of these is said once.
        root = os.geteuid() == 0
        self._plan = probe_containment(
            allow_namespaces=local.containment == "auto",
            session_uid=local.session_uid_base if root else None,
        )
        self._uids = (
            SessionUids(local.session_uid_base, local.session_uid_count)
            if self._plan.drops_root
            else None
        )
        # Who runs the init is checked once, as a session would run it.
        probe_as = None if self._uids is None else SessionIdentity(self._uids.base, self._uids.base)
        self._plan, self._net = probe_network(local.network, self._plan, probe_as)
        self._init_python, self.init_problem = choose_init_python(
            self._plan, local.init_python, probe_as
        )
        self._init_binary = choose_init_binary(self._plan, local.init_python, probe_as)
        self.workdir_problem = None
        if self._uids is not None and self._plan.private_mounts:
            self.workdir_problem = unreachable_workdir(os.path.abspath(local.workdir))
        self._cgroups, no_cgroups = open_session_cgroups()
        self.notices = announce(
            local,
            plan=self._plan,
            net=self._net,
            uids=self._uids,
            cgroups=self._cgroups,
            no_cgroups=no_cgroups,
        )

    def open_watch(
        self, spec: WatchSpec, progress: ProgressReport
    ) -> contextlib.AbstractAsyncContextManager[WatchHost]:
        """A watch session's place: `runnerd.local.watching`."""
        kit = WatchKit(
            local=self._local,
            sandbox=SandboxPlan(
                Launch(
                    self._plan,
                    None,
                    init_python=self._init_python,
                    init_binary=self._init_binary,
                ),
                self._net,
                self._cgroups,
                self._local.stop_grace_s,
            ),
            uids=self._uids,
            trash=self.trash,
            hidden=self._hidden + (os.path.abspath(self._local.workdir),),
            max_body_bytes=self._max_body_bytes,
        )
        return open_local_watch(kit, spec, progress)

    @contextlib.asynccontextmanager
    async def adopt_watch(
        self, spec: WatchSpec, progress: ProgressReport
    ) -> AsyncIterator[WatchHost]:
        """Never: a session's sandbox dies with the daemon that made it."""
        await trio.lowlevel.checkpoint()
        raise PlaceGone("a local watch session does not outlive its daemon")
        yield  # pragma: no cover - an async generator, for the context manager

    def load_checkpoint(self, saved: dict[str, object]) -> Checkpoint | None:
        return None  # local checkpoints are never saved (`Checkpoint.saved`)

    def _view(self, session_dir: SessionDir) -> SessionView:
        workdir = os.path.abspath(self._local.workdir)
        return SessionView(self._hidden + (workdir,), os.path.abspath(session_dir.root))

    def claim_workdir(self) -> None:
        """Take `local.workdir` for this process (one runnerd per workdir:
        the lock is held until the process exits) and remove the session
        directories a previous run left behind (a SIGKILL, a crash): none
        is live, since no session has started yet.

        Raises:
            WorkdirError: the workdir is unusable or another runnerd holds it.
        """
        workdir = self._local.workdir
        self._workdir_lock = claim_workdir(workdir)
        removed = sweep_workdir(workdir)
        if removed:
            log.warning(
                "removed %d session directories left by a previous run",
                len(removed),
                extra={"workdir": str(workdir)},
            )

    async def recover(self) -> list[Recovered]:
        """Always empty: nothing of a previous daemon's survives it (see
        `detach_supported`)."""
        await trio.lowlevel.checkpoint()
        return []

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        resolved = resolve_image(self._local, image.image, self._uids)
        if isinstance(resolved, Unresolved):
            return unavailable(resolved.message, resolved.remediation)
        return ready()

    async def run(
        self,
        spec: RunSpec,
        sink: Sink,
        *,
        task_status: trio.TaskStatus[Started] = trio.TASK_STATUS_IGNORED,
    ) -> Outcome:
        runtime, executable = start_checks(self._local, spec, self._uids)
        identity = self._acquire_identity()
        try:
            return await self._run_as(spec, sink, runtime, executable, identity, task_status)
        finally:
            if identity is not None and self._uids is not None:
                # Every process of the uid is gone: its PID namespace ended.
                self._uids.release(identity)

    def _acquire_identity(self) -> SessionIdentity | None:
        """A root daemon's session uid; None keeps the daemon's. Raises StartError."""
        if self._uids is None:
            return None
        identity = self._uids.acquire()
        if identity is None:
            raise StartError(
                "provision",
                f"all {self._uids.count} session uids (local.session_uid_count) are in use",
            )
        return identity

    async def _run_as(
        self,
        spec: RunSpec,
        sink: Sink,
        runtime: RuntimeConfig,
        executable: str,
        identity: SessionIdentity | None,
        task_status: trio.TaskStatus[Started],
    ) -> Outcome:
        session_dir = await self._prepare(spec, identity)
        cgroup: Path | None = None
        try:
            cgroup = await self._create_cgroup(spec)
            inspect_port = free_loopback_port() if spec.inspect and runtime.inspect_args else None
            launch = self._launch(session_dir, cgroup, identity)
            async with self._open_network(spec) as net:
                # The PTY exists from the spawn on: its first size must be the client's.
                size = await sink.terminal_size(self._local.terminal_size_wait_s)
                proc = await self._spawn(
                    spec, runtime, executable, session_dir, inspect_port, launch, net, size=size
                )
                ids = {"session_id": spec.session_id}
                log.info("started pid %s (runtime %s)", proc.pid, runtime.name, extra=ids)
                async with proc:
                    code = await self._run_process(spec, sink, proc, inspect_port, task_status, net)
            log.info("exited with code %s", code, extra=ids)
            return self._outcome(spec, code, cgroup)
        finally:
            with trio.CancelScope(shield=True):
                # Moved out now, removed after: the session is terminal
                # once its processes are gone (`runnerd.local.trash`).
                await self.trash.discard(session_dir.root)
                if cgroup is not None:
                    await trio.to_thread.run_sync(SessionCgroups.remove, cgroup)

    @contextlib.asynccontextmanager
    async def _open_network(self, spec: RunSpec) -> AsyncIterator[SessionNetwork | None]:
        """The session's way into its network namespace, if it has one."""
        if not self._net.own_namespace:
            yield None
            return
        async with open_session_network(self._net, spec.session_id) as net:
            yield net

    def _launch(
        self, session_dir: SessionDir, cgroup: Path | None, identity: SessionIdentity | None
    ) -> Launch:
        plan: ContainmentPlan = self._plan
        view = self._view(session_dir)
        return Launch(
            plan, cgroup, view, identity, self._init_python, init_binary=self._init_binary
        )

    async def _spawn(
        self,
        spec: RunSpec,
        runtime: RuntimeConfig,
        executable: str,
        session_dir: SessionDir,
        inspect_port: int | None,
        launch: Launch,
        net: SessionNetwork | None,
        *,
        size: tuple[int, int] | None,
    ) -> PtyProcess:
        """The session's first process, exec'd, on a terminal of `size` (cols,
        rows; None: the default) from its start. Raises StartError."""
        try:
            argv = build_argv(
                runtime, executable, entry=session_dir.entry, inspect_port=inspect_port
            )
            env = build_env(spec.env, home=session_dir.work, path=workload_path(runtime))
        except ValueError as exc:
            raise StartError("provision", str(exc)) from exc
        try:
            return await spawn_pty_process(
                argv,
                cwd=session_dir.work if session_dir.entry is None else session_dir.app,
                env=env,
                stop_grace_s=self._local.stop_grace_s,
                launch=launch,
                label=spec.session_id,
                sockets_fd=None if net is None else net.child_fd,
                attach=None if net is None else net.attach,
                size=size,
            )
        except OSError as exc:
            # The file that failed: the session init's interpreter or the
            # runtime's program (never a path of the client's bundle).
            failed = f"'{runtime.command[0]}'"
            if exc.filename == launch.init_python:
                failed = f"'{exc.filename}' (the session init's interpreter, as uid {_uid(launch)})"
            elif launch.init_binary is not None and exc.filename == launch.init_binary.exec_path:
                failed = f"'{launch.init_binary.path}' (the session init, as uid {_uid(launch)})"
            raise StartError("boot", f"could not execute {failed}: {exc.strerror}") from exc

    async def _create_cgroup(self, spec: RunSpec) -> Path | None:
        if self._cgroups is None:
            return None
        try:
            return await trio.to_thread.run_sync(self._cgroups.create, spec.session_id, spec.limits)
        except OSError as exc:
            raise StartError("provision", "cannot set up the session's resource limits") from exc

    @staticmethod
    def _outcome(spec: RunSpec, code: int, cgroup: Path | None) -> Outcome:
        # Read synchronously: one small file, and the cgroup is about to go.
        if cgroup is not None and SessionCgroups.oom_killed(cgroup):
            return Failed(
                f"memory limit {spec.limits.memory} exceeded: the session was killed (OOM)"
            )
        return Exited(code)

    async def _prepare(self, spec: RunSpec, identity: SessionIdentity | None) -> SessionDir:
        owner = None if identity is None else (identity.uid, identity.gid)
        try:
            return await trio.to_thread.run_sync(
                prepare_session_dir, self._local.workdir, spec.session_id, spec.bundle, owner
            )
        except WorkdirError as exc:
            raise StartError("provision", str(exc)) from exc

    async def _run_process(
        self,
        spec: RunSpec,
        sink: Sink,
        proc: PtyProcess,
        inspect_port: int | None,
        task_status: trio.TaskStatus[Started],
        net: SessionNetwork | None,
    ) -> int:
        """Pump the PTY while the process runs; return its exit code once all
        its output is through. With a namespace, its ports are published
        before the session is reported started. Where the process listens is
        in `Started.address`: the core probes and relays it."""
        output_done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(proc.run_writer)
            if net is not None:
                published = tcp_ports(spec.ports) + ([] if inspect_port is None else [inspect_port])
                await nursery.start(net.serve_ports, published)
            # Probes dial inside the namespace: the host side of a published
            # port is the daemon's own listener, which accepts for anyone.
            address = WorkloadAddress(LOOPBACK, inspect_port, None if net is None else net.dial)
            task_status.started(Started(proc, _endpoints(spec), address))
            # Read only now: `Started` comes before any output (the seam's
            # promise); what it wrote meanwhile waits in the PTY.
            nursery.start_soon(proc.run_reader, sink.output, output_done)
            code = await proc.wait()
            # Its output to the end, and what it sent its clients last.
            await sink.drain(output_done.wait, *([] if net is None else [net.drain]))
            nursery.cancel_scope.cancel()
        return code


def _uid(launch: Launch) -> int:
    return os.geteuid() if launch.identity is None else launch.identity.uid


def _endpoints(spec: RunSpec) -> tuple[RunnerEndpoint, ...]:
    # The host is left empty: the client knows how it reached the runner.
    return tuple({"host": "", "port": p.port, "protocol": p.protocol} for p in spec.ports)
