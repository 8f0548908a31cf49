"""The simulated container runtime: a container (or an exec) is a real host process.

Owns three things. `PodNetwork`: each pod's loopback address, claimed
machine-wide. `build_plan` (pure): a pod's container spec + its image →
argv, env and working directory on the host, with every emptyDir mountPath
mapped onto the pod's host directory. `open_host_process`: starts a plan in
its own session and process group, under a PTY (whose master carries stdin,
output and resizes) or with pipes, and fans its output out to every reader
subscribed at the time (attaches share a container's output from when they
attach). When the main process exits, the rest of its group is killed, as a
container's PID namespace would be.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import math
import os
import re
import shutil
import signal
import socket
import stat
import struct
import sys
import termios
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from .images import Image, build_wrapper_script

Obj = dict[str, Any]
# Child side of a PTY container: make the PTY the controlling terminal (so the
# process gets SIGWINCH on resize and ^C), then become the container command.
_CTTY_LAUNCHER = (
    "import fcntl,os,sys,termios;fcntl.ioctl(0,termios.TIOCSCTTY,0);"
    "os.execve(sys.argv[1],sys.argv[2:],os.environ)"
)
_HOST_PATH = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
DRAIN_S = 2.0  # how long output may trail the process exit (an escaped grandchild)
REAP_S = 5.0  # how long teardown waits for a SIGKILLed process to be reaped


class StartError(Exception):
    """The command cannot be started (a container: terminated StartError, exit 128)."""

    def __init__(self, argv0: str, why: str) -> None:
        self.argv0 = argv0
        self.why = why
        super().__init__(
            "failed to create containerd task: failed to create shim task: OCI runtime create "
            f"failed: runc create failed: unable to start container process: {self._exec_error}"
        )

    @property
    def _exec_error(self) -> str:
        return f'exec: "{self.argv0}": {self.why}: unknown'

    def exec_cause(self, exec_id: str) -> str:
        """The same failure for pods/exec, as the kubelet words it."""
        return (
            "error executing command in container: failed to exec in container: failed to "
            f'start exec "{exec_id}": OCI runtime exec failed: exec failed: unable to start '
            f"container process: {self._exec_error}"
        )


@dataclass(frozen=True)
class ProcessPlan:
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: Path


# ---- pure: container spec → host process ---------------------------------------------


def build_path_mapper(mounts: Mapping[str, Path]) -> Callable[[str], str]:
    """Rewrite container paths under a mountPath to the host directory, anywhere in a string.

    A mountPath counts where it starts a path token (string start, whitespace,
    a quote, `=`, `:` ...) and ends at `/` or such a delimiter, so the `/app` in
    `tar -xz -C /app` maps while `http://host/app` does not.
    """
    if not mounts:
        return lambda text: text
    ordered = sorted(mounts, key=len, reverse=True)
    alternatives = "|".join(re.escape(m.rstrip("/") or "/") for m in ordered)
    before, after = r"(?:(?<=^)|(?<=[\s'\"=:,;(|<>&]))", r"(?=$|[/\s'\"=:,;)|<>&])"
    pattern = re.compile(f"{before}({alternatives}){after}")
    table = {m.rstrip("/") or "/": str(host) for m, host in mounts.items()}
    return lambda text: pattern.sub(lambda m: table[m.group(1)], text)


def expand_vars(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: known names expand, `$$` escapes, unknown stay."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        text,
    )


def field_value(pod: Obj, path: str) -> str:
    """The downward-API fields env `valueFrom.fieldRef` may name."""
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    values = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
    }
    return str(values.get(path) or "")


def build_plan(
    container: Obj,
    image: Image,
    *,
    pod: Obj,
    mounts: Mapping[str, Path],
    root_dir: Path,
    bin_dir: Path,
) -> ProcessPlan:
    """The host process for `container` (see the module doc); pure."""
    to_host = build_path_mapper(mounts)
    status = pod.get("status", {})
    env: dict[str, str] = {
        "PATH": _HOST_PATH,
        "HOSTNAME": pod["metadata"]["name"],
        "HOME": "/root",
        "POD_IP": status.get("podIP", ""),
    }
    if container.get("tty"):
        env["TERM"] = "xterm"
    for var in container.get("env") or []:
        ref = (var.get("valueFrom") or {}).get("fieldRef")
        value = var.get("value", "")
        env[var["name"]] = field_value(pod, ref["fieldPath"]) if ref else expand_vars(value, env)
    env = {name: to_host(value) for name, value in env.items()}
    if env["HOME"] == "/root":
        env["HOME"] = str(root_dir)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    command, args = container.get("command"), container.get("args")
    argv = list(command or image.entrypoint) + list(
        args if args is not None else (() if command else image.cmd)
    )
    argv = [to_host(expand_vars(arg, env)) for arg in argv]
    working = container.get("workingDir") or ""
    cwd = Path(to_host(working)) if working else root_dir
    if working and str(cwd) == working:  # not under a mount: a dir in the pod's own root
        cwd = root_dir / working.lstrip("/")
    return ProcessPlan(tuple(argv), env, cwd)


def resolve_executable(argv0: str, plan: ProcessPlan) -> str:
    """The host file `argv0` runs (PATH of the plan, or relative to its cwd); raises StartError."""
    if "/" in argv0:
        found = str(plan.cwd / argv0) if not argv0.startswith("/") else argv0
        if os.path.isfile(found) and os.access(found, os.X_OK):
            return found
        raise StartError(argv0, "no such file or directory")
    found_on_path = shutil.which(argv0, path=plan.env.get("PATH", ""))
    if found_on_path is None:
        raise StartError(argv0, "executable file not found in $PATH")
    return found_on_path


def install_programs(image: Image, root: Path) -> Path:
    """A bin dir holding the image's stand-in programs (shared by every pod of the image)."""
    key = hashlib.sha256(repr(sorted(image.programs.items())).encode()).hexdigest()[:12]
    bin_dir = root / key
    if not bin_dir.is_dir():
        bin_dir.mkdir(parents=True)
        for name, program in image.programs.items():
            path = bin_dir / name
            path.write_text(build_wrapper_script(program))
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir


# ---- IO: addresses ------------------------------------------------------------------------


class PodNetwork:
    """Pod addresses: the lowest free one from .2 up (.1 is the host's), claimed machine-wide.

    Several simulators (parallel test runs) share one loopback: two pods on
    127.0.0.2 would fight over the same ports (every session kernel binds
    :9230). An abstract UNIX socket named after the address is the claim: bind
    fails while another process holds it, and it vanishes with its holder.
    """

    def __init__(self, cidr: str) -> None:
        self._network = ipaddress.ip_network(cidr)
        self._owners: dict[str, str] = {}  # ip → pod uid
        self._claims: dict[str, socket.socket] = {}

    def claim(self, uid: str) -> str:
        first = int(self._network.network_address) + 2
        for n in range(first, int(self._network.broadcast_address)):
            ip = str(ipaddress.ip_address(n))
            if ip in self._owners:
                continue
            claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                claim.bind(f"\0kubesim-pod-ip-{ip}")
            except OSError:
                claim.close()
                continue
            self._owners[ip], self._claims[ip] = uid, claim
            return ip
        raise RuntimeError(f"kubesim: pod network {self._network} is exhausted")

    def release(self, uid: str) -> None:
        """Idempotent: a finished pod keeps podIP in its status but not the address."""
        for ip in [ip for ip, owner in self._owners.items() if owner == uid]:
            del self._owners[ip]
            self._claims.pop(ip).close()


# ---- IO: the process --------------------------------------------------------------------


class Fanout:
    """Copies output to every subscriber from the moment it subscribes; close() ends them all."""

    def __init__(self, record: Callable[[int, bytes], None] | None = None) -> None:
        self._subs: set[trio.MemorySendChannel[tuple[int, bytes]]] = set()
        self._record = record  # the container's log: sees everything, subscribed or not
        self.closed = False

    def publish(self, channel: int, data: bytes) -> None:
        if self._record is not None:
            self._record(channel, data)
        for send in list(self._subs):
            send.send_nowait((channel, data))  # unbounded: a slow reader never stalls the process

    @contextmanager
    def subscribe(self) -> Iterator[trio.MemoryReceiveChannel[tuple[int, bytes]]]:
        send, recv = trio.open_memory_channel[tuple[int, bytes]](math.inf)
        if self.closed:
            send.close()
        else:
            self._subs.add(send)
        try:
            yield recv
        finally:
            self._subs.discard(send)
            send.close()
            recv.close()

    def close(self) -> None:
        self.closed = True
        for send in self._subs:
            send.close()
        self._subs.clear()


class HostProcess:
    """A running plan: stdin, resize, signals, output fan-out, exit code.

    `write_stdin`/`close_stdin`/`resize` are no-ops once the process is gone.
    """

    def __init__(
        self,
        proc: trio.Process,
        *,
        tty: trio.lowlevel.FdStream | None,
        record: Callable[[int, bytes], None] | None = None,
    ) -> None:
        self.proc = proc
        self.output = Fanout(record)
        self._tty = tty
        self._stdin_lock = trio.Lock()
        self._stdin_closed = False
        self._drained = trio.Event()

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def write_stdin(self, data: bytes) -> None:
        stream = self._tty if self._tty is not None else self.proc.stdin
        if stream is None or self._stdin_closed or not data:
            return
        async with self._stdin_lock:
            try:
                await stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async def close_stdin(self) -> None:
        """EOF on stdin: the pipe closes; on a PTY the line discipline gets ^D."""
        if self._stdin_closed:
            return
        if self._tty is not None:
            await self.write_stdin(b"\x04")
        elif self.proc.stdin is not None:
            async with self._stdin_lock:
                await self.proc.stdin.aclose()
        self._stdin_closed = True

    def resize(self, width: int, height: int) -> None:
        if self._tty is not None and self.proc.returncode is None:
            winsize = struct.pack("HHHH", height, width, 0, 0)
            fcntl.ioctl(self._tty.fileno(), termios.TIOCSWINSZ, winsize)

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    async def wait(self) -> int:
        """Wait for exit, kill what remains of its group, let output drain; the exit code.

        Exit codes read as a container runtime reports them: 128+N for signal N.
        """
        code = await self.proc.wait()
        self.signal_group(signal.SIGKILL)
        with trio.move_on_after(DRAIN_S):
            await self._drained.wait()
        self.output.close()
        return 128 - code if code < 0 else code

    async def pump_tty(self) -> None:
        assert self._tty is not None
        try:
            while chunk := await self._tty.receive_some(65536):
                self.output.publish(1, chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # EIO: every slave fd is closed, the terminal is gone
        self._drained.set()

    async def pump_pipes(self) -> None:
        async with trio.open_nursery() as nursery:
            for channel, stream in ((1, self.proc.stdout), (2, self.proc.stderr)):
                if stream is not None:
                    nursery.start_soon(self._pump_pipe, channel, stream)
        self._drained.set()

    async def _pump_pipe(self, channel: int, stream: trio.abc.ReceiveStream) -> None:
        try:
            while chunk := await stream.receive_some(65536):
                self.output.publish(channel, bytes(chunk))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


@asynccontextmanager
async def open_host_process(
    plan: ProcessPlan,
    *,
    tty: bool,
    stdin: bool,
    stdout: bool = True,
    stderr: bool = True,
    record: Callable[[int, bytes], None] | None = None,
) -> AsyncIterator[HostProcess]:
    """Start `plan` (raises StartError); on exit the whole process group is killed.

    `record(channel, data)`, if given, sees every output chunk (the container's log).

    Resource handling: the process, its group, the PTY and pipes never outlive
    the block, even when it is cancelled.
    """
    executable = resolve_executable(plan.argv[0], plan)
    plan.cwd.mkdir(parents=True, exist_ok=True)
    common: dict[str, Any] = {"env": dict(plan.env), "cwd": plan.cwd, "start_new_session": True}
    master: trio.lowlevel.FdStream | None = None
    if tty:
        master_fd, slave_fd = os.openpty()
        try:
            argv = [sys.executable, "-I", "-c", _CTTY_LAUNCHER, executable, *plan.argv]
            proc = await trio.lowlevel.open_process(
                argv, stdin=slave_fd, stdout=slave_fd, stderr=slave_fd, **common
            )
        except BaseException:
            os.close(master_fd)
            raise
        finally:
            os.close(slave_fd)
        master = trio.lowlevel.FdStream(master_fd)
    else:
        pipe, null = -1, -3  # subprocess.PIPE, subprocess.DEVNULL
        proc = await trio.lowlevel.open_process(
            list(plan.argv),
            executable=executable,
            stdin=pipe if stdin else null,
            stdout=pipe if stdout else null,
            stderr=pipe if stderr else null,
            **common,
        )
    host = HostProcess(proc, tty=master, record=record)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host.pump_tty if master is not None else host.pump_pipes)
            yield host
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            host.signal_group(signal.SIGKILL)
            with trio.move_on_after(REAP_S):  # SIGKILL is prompt unless the kernel is stuck
                await proc.wait()
            host.output.close()
            for stream in (master, proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    await stream.aclose()
