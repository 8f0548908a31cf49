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

A run session starts in a warm sandbox (`runnerd.local.warm`: made ahead,
`local.warm_sandboxes`) when one is ready and it can: the compiled init, a
PID, mount and network namespace with its own /proc, no `inspect`, no
cgroups (`_warm_pool`); else, or when the slot fails before its workload
runs, cold, as follows.

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
    ImageSpec,
    Outcome,
    Recovered,
    RunSpec,
    Sink,
    Started,
    StartError,
)
from runnerd.backend.watch import Checkpoint, PlaceGone, ProgressReport, WatchHost, WatchSpec
from runnerd.contract import AvailabilityReport, IoMode, ready, unavailable
from runnerd.local.cgroups import SessionCgroups, open_session_cgroups
from runnerd.local.containment import ContainmentPlan
from runnerd.local.forward import SessionNetwork, free_loopback_port, open_session_network
from runnerd.local.hostprobe import find_host
from runnerd.local.identity import SessionIdentity, SessionUids
from runnerd.local.initpython import unreachable_workdir
from runnerd.local.launch import Unresolved
from runnerd.local.mounts import SessionView
from runnerd.local.preflight import announce, resolve_image, start_checks
from runnerd.local.pty import PtyProcess
from runnerd.local.running import boot_error, build_command, outcome_of, run_started
from runnerd.local.sandbox import SandboxPlan
from runnerd.local.settings import LocalConfig, RuntimeConfig
from runnerd.local.spawn import Launch, spawn_pty_process
from runnerd.local.trash import Trash
from runnerd.local.warm import SlotKit, WarmPool, WarmSlot
from runnerd.local.workdir import (
    SessionDir,
    WorkdirError,
    claim_workdir,
    prepare_session_dir,
    sweep_workdir,
)

log = logging.getLogger(__name__)


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
        ahead: object = None,
    ) -> None:
        """`hidden`: what no session may see (the daemon's config and socket
        directories, `runnerd.backend.BackendContext.hidden_paths`), covered in
        every session, as the workdir is but for the session's own directory.
        Only with a mount namespace (`/v1/capabilities` says when there is none).
        `max_body_bytes` (`server.max_body_bytes`): a watch session's change
        set and file read caps. `ahead`: what `probe_ahead` started
        (`runnerd.backend.BackendContext.ahead`), taken here."""
        self._local = local
        self._max_body_bytes = max_body_bytes
        self._workdir_lock: int | None = None
        self.trash = Trash(Path(local.workdir))  # run by `open_backend`
        self._hidden = tuple(sorted({os.path.abspath(path) for path in hidden}))
        # Probed once, here (or by the probe child `ahead` the daemon started
        # before its imports, `runnerd.local.hostprobe`): the daemon builds
        # the backend once at start-up, so each of these is said once.
        findings, self._init_binary = find_host(local, ahead)
        self._plan, self._net = findings.plan, findings.net
        self._uids = (
            SessionUids(local.session_uid_base, local.session_uid_count)
            if self._plan.drops_root
            else None
        )
        self._init_python, self.init_problem = findings.init_python, findings.init_problem
        self.workdir_problem = None
        if self._uids is not None and self._plan.private_mounts:
            self.workdir_problem = unreachable_workdir(os.path.abspath(local.workdir))
        self._cgroups, no_cgroups = open_session_cgroups()
        self.warm = self._warm_pool()  # run by `open_backend`
        self.notices = announce(
            local,
            plan=self._plan,
            net=self._net,
            uids=self._uids,
            cgroups=self._cgroups,
            no_cgroups=no_cgroups,
        )

    def _warm_pool(self) -> WarmPool | None:
        """The pool of `local.warm_sandboxes`, or None (said why) where a
        sandbox made ahead would differ from a cold session's or could not
        be tested here: with cgroups (a slot would have to join the
        session's before its go)."""
        if not self._local.warm_sandboxes:
            return None
        plan, why = self._plan, None
        if self._init_binary is None:
            why = "sessions' init is not the compiled one"
        elif not (plan.fresh_proc and plan.private_mounts and self._net.own_namespace):
            why = "sessions lack a PID, mount or network namespace of their own"
        elif self._cgroups is not None:
            why = "sessions get cgroups, which a warm sandbox does not join"
        if why is not None:
            log.info("local.warm_sandboxes is off: %s; every session starts cold", why)
            return None
        kit = SlotKit(
            Path(self._local.workdir),
            self._local.stop_grace_s,
            self._net,
            self._uids,
            self.trash,
            lambda session_dir, identity: self._launch(session_dir, None, identity),
        )
        return WarmPool(self._local.warm_sandboxes, kit)

    def open_watch(
        self, spec: WatchSpec, progress: ProgressReport
    ) -> contextlib.AbstractAsyncContextManager[WatchHost]:
        """A watch session's place: `runnerd.local.watching`."""
        # Imported at the first watch session: its workspace, checkpoint and
        # tree modules (a dozen dataclasses) are no part of a daemon's start,
        # and most daemons never run one (`[watch]` is off by default).
        from runnerd.local.watching import WatchKit, open_local_watch

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
        slot = None if self.warm is None or spec.inspect else self.warm.take()
        if slot is not None:
            outcome = await self._run_warm(slot, spec, sink, runtime, executable, task_status)
            if outcome is not None:
                return outcome
        identity = await self._acquire_identity()
        try:
            return await self._run_as(spec, sink, runtime, executable, identity, task_status)
        finally:
            if identity is not None and self._uids is not None:
                # Every process of the uid is gone: its PID namespace ended.
                self._uids.release(identity)

    async def _acquire_identity(self) -> SessionIdentity | None:
        """A root daemon's session uid (a warm sandbox's given up for it if
        need be); None keeps the daemon's. Raises StartError."""
        if self._uids is None:
            return None
        identity = self._uids.acquire()
        while identity is None and self.warm is not None and await self.warm.evict():
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
                    code = await run_started(spec, sink, proc, inspect_port, task_status, net)
            log.info("exited with code %s", code, extra=ids)
            return outcome_of(spec, code, cgroup)
        finally:
            with trio.CancelScope(shield=True):
                # Moved out now, removed after: the session is terminal
                # once its processes are gone (`runnerd.local.trash`).
                await self.trash.discard(session_dir.root)
                if cgroup is not None:
                    await trio.to_thread.run_sync(SessionCgroups.remove, cgroup)

    async def _run_warm(
        self,
        slot: WarmSlot,
        spec: RunSpec,
        sink: Sink,
        runtime: RuntimeConfig,
        executable: str,
        task_status: trio.TaskStatus[Started],
    ) -> Outcome | None:
        """`_run_as` in `slot` (made the session's: its directory, bundle,
        terminal size, then its go), closed by the end; None when the slot
        failed before the workload ran (logged): the session starts cold."""
        ids = {"session_id": spec.session_id}
        assert self.warm is not None  # `slot` is its
        try:
            if not slot.alive():
                log.warning("warm sandbox %s had died", slot.name, extra=ids)
                return None
            session_dir = await slot.adopt(spec.session_id, spec.bundle)
            size = await sink.terminal_size(self._local.terminal_size_wait_s)
            argv, env = build_command(spec, runtime, executable, session_dir, None)
            try:
                proc = await slot.go(session_dir, argv, env, size)
            except OSError as exc:
                raise boot_error(exc, runtime, None) from exc
            finally:
                self.warm.refill()  # only now: its making would slow this start
            if proc is None:
                return None
            log.info("started pid %s (runtime %s, warm)", proc.pid, runtime.name, extra=ids)
            code = await run_started(spec, sink, proc, None, task_status, slot.net)
            log.info("exited with code %s", code, extra=ids)
            return outcome_of(spec, code, None)
        finally:
            await slot.aclose()
            self.warm.refill()  # (a no-op after the one above)

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
        argv, env = build_command(spec, runtime, executable, session_dir, inspect_port)
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
            raise boot_error(exc, runtime, launch) from exc

    async def _create_cgroup(self, spec: RunSpec) -> Path | None:
        if self._cgroups is None:
            return None
        try:
            return await trio.to_thread.run_sync(self._cgroups.create, spec.session_id, spec.limits)
        except OSError as exc:
            raise StartError("provision", "cannot set up the session's resource limits") from exc

    async def _prepare(self, spec: RunSpec, identity: SessionIdentity | None) -> SessionDir:
        owner = None if identity is None else (identity.uid, identity.gid)
        try:
            return await trio.to_thread.run_sync(
                prepare_session_dir, self._local.workdir, spec.session_id, spec.bundle, owner
            )
        except WorkdirError as exc:
            raise StartError("provision", str(exc)) from exc
