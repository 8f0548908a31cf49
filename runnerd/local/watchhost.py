"""A watch session's live place on the local backend: `LocalWatchHost`.

Owns what runs in an open watch session (`runnerd.local.watching` opens
it): the workspace operations over its `Workspace`, its checkpoints (files
beside the trash: `<workdir>/.trash/<id>.checkpoint-*`, the daemon's, out
of every session's view, removed by `discard()`, or with the trash by the
next start after a daemon killed outright) and each process, one
generation of an app (`run_app`) or the agent (`run_agent`), in the
session's sandbox (`runnerd.local.sandbox`).

An app runs the session image's runtime with `{entry}` the absolute path of
its entry in the workspace (which must be a regular file there, reached
through directories only), cwd the workspace, the session env, HOME the
session's `work/`, and with `inspect` and a runtime that has `inspect_args`
its own inspect port (a free loopback port, published as a run session's).
A `tty` app runs on a PTY of its own (80x24 until a client resizes it), a
`streams` app on three pipes. A runtime with `watch = "self"` gets its
`watch_args` and is reported `self_watching`. The agent runs its catalog
image's runtime (its own command, no `{entry}`) with `agent.env` and
`WORKSPACE_DIR` (the workspace's absolute path, the same inside the
sandbox) on pipes, its `port` published.

Resource handling: each generation owns its process; cancelling `run_app`
stops it as a DELETE stops a run session (SIGTERM, SIGKILL after
`local.stop_grace_seconds`: its nested PID namespace goes with it) and
reports its exit code (`AppSink.exited`: 137 for one SIGKILLed) before the
cancellation propagates.

A generation ends `Exited(code)` (signal N: 128+N), or `Failed` when the
kernel OOM-killed the session's cgroup (with ceilings: every process of
the session goes, as a pod's containers do).

Error handling: a generation that cannot start (its entry not a file, its
runtime's executable missing or not runnable, the exec failing) raises
`StartError` before `started`, its `message` the client's `run failed`
reason; `checkpoint` raises `CheckpointFailed` (client-safe); the
workspace operations raise what `runnerd.local.workspace` does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

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
)
from runnerd.contract import IoMode, PortMapping, RunnerEndpoint
from runnerd.local.forward import free_loopback_port
from runnerd.local.identity import SessionUids
from runnerd.local.launch import Unresolved, build_argv, build_env
from runnerd.local.preflight import resolve_image
from runnerd.local.pty import PtyProcess
from runnerd.local.runtimes import workload_path
from runnerd.local.sandbox import Sandbox, SandboxPlan
from runnerd.local.settings import LocalConfig, RuntimeConfig
from runnerd.local.spawn import spawn_pty_process, spawn_streams_process
from runnerd.local.streams import StreamsProcess
from runnerd.local.trash import Trash
from runnerd.local.workdir import SessionDir
from runnerd.local.workspace import CheckpointError, Workspace, WorkspaceError
from runnerd.workload.supervision import tcp_ports

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class WatchKit:
    """What the backend found once and every watch session uses."""

    local: LocalConfig
    sandbox: SandboxPlan
    uids: SessionUids | None
    trash: Trash
    hidden: tuple[str, ...]  # absolute: the daemon's paths and the workdir
    max_body_bytes: int


class LocalCheckpoint:
    """A checkpoint file of this backend (`runnerd.backend.watch.Checkpoint`)."""

    def __init__(self, path: Path, files: int, size_bytes: int) -> None:
        self.path = path
        self._files = files
        self._size_bytes = size_bytes

    @property
    def files(self) -> int:
        return self._files

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    async def discard(self) -> None:
        """Remove the file; idempotent, never raises."""
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_unlink_quietly, self.path)

    def saved(self) -> dict[str, object] | None:
        return None  # it lives beside the trash, which a restart empties


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


@dataclasses.dataclass(frozen=True)
class _Process:
    """One process to run in the sandbox, and how it is reported."""

    argv: list[str]
    env: dict[str, str]
    io: IoMode
    ports: tuple[int, ...]
    inspect_port: int | None
    self_watching: bool
    label: str


class LocalWatchHost:
    """One watch session's live place (`runnerd.backend.watch.WatchHost`)."""

    def __init__(
        self,
        kit: WatchKit,
        spec: WatchSpec,
        session_dir: SessionDir,
        workspace: Workspace,
        sandbox: Sandbox,
    ) -> None:
        self._kit = kit
        self._spec = spec
        self._dir = session_dir
        self._workspace = workspace
        self._sandbox = sandbox

    @property
    def workspace_dir(self) -> Path:
        """The workspace's absolute path (the same inside the sandbox)."""
        return self._workspace.root

    async def list_files(self) -> list[WorkspaceFile]:
        return [WorkspaceFile(f.path, f.hash) for f in await self._workspace.list()]

    async def read_file(self, path: str) -> bytes:
        return await self._workspace.read(path)

    async def apply(self, changes: ChangeSet) -> tuple[int, int]:
        return await self._workspace.apply(changes)

    async def checkpoint(self) -> Checkpoint:
        """A checkpoint file beside the trash. Raises CheckpointFailed."""
        name = f"{self._spec.session_id}.checkpoint-{secrets.token_hex(6)}"
        dest = self._kit.trash.path / name
        try:
            await trio.to_thread.run_sync(make_private_dir, self._kit.trash.path)
            info = await self._workspace.checkpoint(dest)
        except (CheckpointError, WorkspaceError) as exc:
            raise CheckpointFailed(exc.message) from exc
        except OSError as exc:
            raise CheckpointFailed(f"cannot write the checkpoint: {exc.strerror}") from exc
        return LocalCheckpoint(dest, info.files, info.bytes)

    async def publish(self, ports: tuple[PortMapping, ...]) -> Published:
        """Every port as the session's own, reached where the client reached
        the runner (`host` ""): nothing is routed publicly here."""
        await trio.lowlevel.checkpoint()
        endpoints: tuple[RunnerEndpoint, ...] = tuple(
            {"host": "", "port": p.port, "protocol": p.protocol} for p in ports
        )
        return Published(endpoints)

    async def run_app(
        self,
        app: AppLaunch,
        sink: AppSink,
        *,
        task_status: trio.TaskStatus[AppStarted] = trio.TASK_STATUS_IGNORED,
    ) -> Exited | Failed:
        """One generation of `app` (see the module docstring). Raises StartError."""
        runtime, executable = resolve_runtime(self._kit, self._spec.creation.image.image)
        if not await self._workspace.is_file(app.entry):
            raise StartError("boot", f"entry {app.entry!r} is not a file in the workspace")
        inspect = self._spec.identity.inspect and bool(runtime.inspect_args)
        inspect_port = free_loopback_port() if inspect else None
        argv = build_argv(
            runtime,
            executable,
            entry=self._workspace.root / app.entry,
            inspect_port=inspect_port,
            watch=runtime.self_watching,
        )
        process = _Process(
            argv=argv,
            env=self._env(self._spec.creation.env, runtime),
            io=app.io,
            ports=tuple(tcp_ports(app.ports)),
            inspect_port=inspect_port,
            self_watching=runtime.self_watching,
            label=f"{self._spec.session_id}/{app.name}",
        )
        return await self._run(process, runtime, sink, task_status)

    async def run_agent(
        self,
        agent: AgentLaunch,
        sink: AppSink,
        *,
        task_status: trio.TaskStatus[AppStarted] = trio.TASK_STATUS_IGNORED,
    ) -> Exited | Failed:
        """The co-resident agent (see the module docstring). Raises StartError."""
        runtime, executable = resolve_runtime(self._kit, agent.image.image)
        try:
            argv = build_argv(runtime, executable, entry=None, inspect_port=None)
        except ValueError as exc:
            raise StartError("boot", f"agent '{agent.name}': {exc}") from exc
        env = {**agent.env, "WORKSPACE_DIR": str(self._workspace.root)}
        process = _Process(
            argv=argv,
            env=self._env(env, runtime),
            io="streams",
            ports=(agent.port,),
            inspect_port=None,
            self_watching=False,
            label=f"{self._spec.session_id}/agent",
        )
        return await self._run(process, runtime, sink, task_status)

    def _env(self, env: Mapping[str, str], runtime: RuntimeConfig) -> dict[str, str]:
        try:
            return build_env(env, home=self._dir.work, path=workload_path(runtime))
        except ValueError as exc:
            raise StartError("provision", str(exc)) from exc

    async def _run(
        self,
        process: _Process,
        runtime: RuntimeConfig,
        sink: AppSink,
        task_status: trio.TaskStatus[AppStarted],
    ) -> Exited | Failed:
        """Spawn `process`, report it started, pump its output until it exits
        and its output is through; stopped when cancelled, its exit code
        then reported to `sink.exited` once it is reaped."""
        self._sandbox.check()
        proc = await self._spawn(process, runtime)
        log.info("started pid %s (%s)", proc.pid, process.label, extra=self._ids)
        try:
            code = await self._supervise(proc, process, sink, task_status)
        except BaseException:
            if proc.exit_code is not None:  # None: not reaped within the stop's bound
                sink.exited(proc.exit_code)
            raise
        log.info("%s exited with code %s", process.label, code, extra=self._ids)
        if self._sandbox.oom_killed():
            # The session's cgroup kills as one (`memory.oom.group`), as a pod's.
            memory = self._spec.identity.limits.memory
            return Failed(f"memory limit {memory} exceeded: the session was killed (OOM)")
        return Exited(code)

    async def _supervise(
        self,
        proc: PtyProcess | StreamsProcess,
        process: _Process,
        sink: AppSink,
        task_status: trio.TaskStatus[AppStarted],
    ) -> int:
        """`proc`'s life, owned: its exit code once its output is through;
        leaving it (cancelled, too) stops and reaps it."""
        async with proc:
            output_done = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(proc.run_writer)
                published = process.ports + _optional(process.inspect_port)
                await nursery.start(self._sandbox.publish, published)
                address = WorkloadAddress(LOOPBACK, process.inspect_port, self._sandbox.dial)
                task_status.started(AppStarted(proc, address, process.self_watching))
                _start_reader(nursery, proc, sink, output_done)
                code = await proc.wait()
                await sink.drain(output_done.wait)
                nursery.cancel_scope.cancel()
        return code

    @property
    def _ids(self) -> dict[str, object]:
        return {"session_id": self._spec.session_id}

    async def _spawn(
        self, process: _Process, runtime: RuntimeConfig
    ) -> PtyProcess | StreamsProcess:
        """Raises StartError naming the program that could not be executed."""
        common = {
            "cwd": self._workspace.root,
            "env": process.env,
            "stop_grace_s": self._kit.local.stop_grace_s,
            "launch": self._sandbox.launch,
            "label": self._spec.session_id,
        }
        try:
            if process.io == "tty":
                return await spawn_pty_process(process.argv, **common)  # type: ignore[arg-type]
            return await spawn_streams_process(process.argv, **common)  # type: ignore[arg-type]
        except OSError as exc:
            raise StartError(
                "boot", f"could not execute '{runtime.command[0]}': {exc.strerror}"
            ) from exc


def _start_reader(
    nursery: trio.Nursery, proc: PtyProcess | StreamsProcess, sink: AppSink, done: trio.Event
) -> None:
    """Read only after `started`: the seam's order (what it wrote meanwhile
    waits in the PTY or the pipes)."""
    if isinstance(proc, PtyProcess):
        nursery.start_soon(proc.run_reader, sink.output, done)
        return

    def on_output(stream: int, data: bytes) -> None:
        sink.output(data, OutputStream(stream))

    nursery.start_soon(proc.run_reader, on_output, done)


def _optional(port: int | None) -> tuple[int, ...]:
    return () if port is None else (port,)


def resolve_runtime(kit: WatchKit, image: str) -> tuple[RuntimeConfig, str]:
    resolved = resolve_image(kit.local, image, kit.uids)
    if isinstance(resolved, Unresolved):
        raise StartError("provision", resolved.message)
    return resolved


def make_private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
