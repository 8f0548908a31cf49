"""A local run session's workload from its spawn to its exit code.

Owns what the backend does the same way for a session started cold and one
started in a warm sandbox (`runnerd.local.warm`): the workload's command
line and environment (`build_command`), the start failure a spawn's OSError
becomes (`boot_error`), the run itself once the workload has exec'd
(`run_started`: ports published, `Started` reported, output pumped to the
end) and the outcome (`outcome_of`).
"""

from __future__ import annotations

import os
from pathlib import Path

import trio

from runnerd.backend import (
    Exited,
    Failed,
    Outcome,
    RunSpec,
    Sink,
    Started,
    StartError,
    WorkloadAddress,
)
from runnerd.contract import RunnerEndpoint
from runnerd.local.cgroups import SessionCgroups
from runnerd.local.forward import SessionNetwork
from runnerd.local.launch import build_argv, build_env
from runnerd.local.pty import PtyProcess
from runnerd.local.runtimes import workload_path
from runnerd.local.sessioninit import Launch
from runnerd.local.settings import RuntimeConfig
from runnerd.local.workdir import SessionDir
from runnerd.workload.supervision import tcp_ports

LOOPBACK = "127.0.0.1"


def build_command(
    spec: RunSpec,
    runtime: RuntimeConfig,
    executable: str,
    session_dir: SessionDir,
    inspect_port: int | None,
) -> tuple[list[str], dict[str, str]]:
    """The workload's argv and env. Raises StartError."""
    try:
        argv = build_argv(runtime, executable, entry=session_dir.entry, inspect_port=inspect_port)
        env = build_env(spec.env, home=session_dir.work, path=workload_path(runtime))
    except ValueError as exc:
        raise StartError("provision", str(exc)) from exc
    return argv, env


def boot_error(exc: OSError, runtime: RuntimeConfig, launch: Launch | None) -> StartError:
    """The start failure for the spawn's `exc`, naming the file that failed:
    the session init's interpreter (`launch`'s, when given) or the
    runtime's program (never a path of the client's bundle)."""
    failed = f"'{runtime.command[0]}'"
    if launch is not None and exc.filename == launch.init_python:
        failed = f"'{exc.filename}' (the session init's interpreter, as uid {_uid(launch)})"
    elif launch is not None and launch.init_binary is not None:
        if exc.filename == launch.init_binary.exec_path:
            failed = f"'{launch.init_binary.path}' (the session init, as uid {_uid(launch)})"
    return StartError("boot", f"could not execute {failed}: {exc.strerror}")


def outcome_of(spec: RunSpec, code: int, cgroup: Path | None) -> Outcome:
    """How the session ended, its workload's exit `code` known."""
    # Read synchronously: one small file, and the cgroup is about to go.
    if cgroup is not None and SessionCgroups.oom_killed(cgroup):
        return Failed(f"memory limit {spec.limits.memory} exceeded: the session was killed (OOM)")
    return Exited(code)


async def run_started(
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
