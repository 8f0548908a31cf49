"""The kubelet's side of pods/attach and pods/exec: which streams, which process, which status.

Owns the kubelet's adjustments to what the client asked (attach uses the
container spec's tty and stdin; a tty drops stderr), the errors for a container
that is not running, attaching to a container's running process (sharing its
output from now on, stdinOnce), and running an exec'd command in the
container's context. The framing itself is attach.py's `serve_channels`.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from .attach import (
    Conn,
    Streams,
    build_exit_status,
    build_success_status,
    send_failure,
    serve_channels,
)
from .kubelet_runtime import (
    HostProcess,
    ProcessPlan,
    StartError,
    build_path_mapper,
    open_host_process,
)

Obj = dict[str, Any]


def build_streams(
    kind: str,
    spec: Obj | None,
    *,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
    protocol: str,
) -> Streams:
    """What the connection will carry (pure): for attach the container spec's tty wins."""
    if kind == "attach" and spec is not None:
        tty = bool(spec.get("tty"))
        stdin = stdin and bool(spec.get("stdin"))
    return Streams(stdin, stdout, stderr and not tty, tty, protocol)


def not_running_cause(kind: str, container: str, pod: str, ns: str) -> str:
    """The kubelet's words for a container it cannot find among running ones (§1.8)."""
    if kind == "attach":
        return f"unable to upgrade connection: container {container} not found in pod {pod}_{ns}"
    return f'unable to upgrade connection: container not found ("{container}")'


def build_exec_plan(
    base: ProcessPlan, mounts: Mapping[str, Path], command: list[str]
) -> ProcessPlan:
    """`command` in the container's context: its env and cwd, container paths mapped."""
    to_host = build_path_mapper(mounts)
    return ProcessPlan(tuple(to_host(arg) for arg in command), dict(base.env), base.cwd)


async def serve_attach(
    conn: Conn, streams: Streams, proc: HostProcess, spec: Obj, stdin_once_used: set[str]
) -> None:
    """Attach to the running process until it ends (Success) or the client leaves."""

    async def finish() -> bytes:
        await trio.lowlevel.checkpoint()
        return build_success_status()

    stdin_once = bool(spec.get("stdinOnce"))
    with proc.output.subscribe() as output:
        await serve_channels(
            conn, streams, _AttachEndpoint(proc, stdin_once=stdin_once), output, finish
        )
    if streams.stdin and stdin_once and spec["name"] not in stdin_once_used:
        # stdinOnce: the first attached client to leave closes the container's stdin.
        stdin_once_used.add(spec["name"])
        await proc.close_stdin()


async def serve_exec(
    conn: Conn, streams: Streams, plan: ProcessPlan, execs: set[HostProcess]
) -> None:
    """Run `plan` for one connection; its exit code becomes the channel-3 status.

    The process is in `execs` while it runs (the container's exit kills it, as
    its PID namespace would). A client that leaves first takes the process
    (and its group) down with it.
    """
    if streams.tty:
        plan = ProcessPlan(plan.argv, {**plan.env, "TERM": "xterm"}, plan.cwd)
    exit_code: list[int] = []
    exited = trio.Event()

    async def collect_exit(proc: HostProcess) -> None:
        exit_code.append(await proc.wait())
        exited.set()

    async def finish() -> bytes:
        await exited.wait()
        return build_exit_status(exit_code[0])

    try:
        async with open_host_process(
            plan, tty=streams.tty, stdin=streams.stdin, stdout=streams.stdout, stderr=streams.stderr
        ) as proc:
            # Subscribe before the first checkpoint: the output pump has not run yet.
            with proc.output.subscribe() as output:
                execs.add(proc)
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(collect_exit, proc)
                        await serve_channels(conn, streams, proc, output, finish)
                        nursery.cancel_scope.cancel()
                finally:
                    execs.discard(proc)
    except StartError as exc:
        await send_failure(conn, streams, exc.exec_cause(secrets.token_hex(32)))


class _AttachEndpoint:
    """An attach's view of the container: its CLOSE of stdin only counts with stdinOnce.

    Without stdinOnce the container's stdin outlives any one client (as containerd
    keeps it open); with it, the close reaches the process as EOF.
    """

    def __init__(self, proc: HostProcess, *, stdin_once: bool) -> None:
        self._proc = proc
        self._stdin_once = stdin_once

    async def write_stdin(self, data: bytes) -> None:
        await self._proc.write_stdin(data)

    async def close_stdin(self) -> None:
        if self._stdin_once:
            await self._proc.close_stdin()

    def resize(self, width: int, height: int) -> None:
        self._proc.resize(width, height)
