"""Starting a session's process on a fresh PTY or on pipes, contained.

Owns the fork: the PTY pair or the three pipes (`streams`), the child's
set-up before exec (controlling terminal, parent-death signal, cgroup,
session uid, namespaces: `containment`) unless the compiled init does it
after the exec (`sessioninit.self_contained`), the wait for the init's
status (`sessioninit`), and handing the result to a `PtyProcess`
(`runnerd.local.pty`) or a `StreamsProcess` (`runnerd.local.streams`),
which owns it from then on.

Error handling: `spawn_pty_process` and `spawn_streams_process` raise
`OSError` when the command cannot be executed, its `filename` the file
that could not (the session init's interpreter or the workload's
program); nothing is left running and no fd stays open.

Limits: with the compiled init (`nsinit.c`) a run session's process is a
vfork and an exec of it; the Python init (where the binary is not built,
and for a watch session's apps) is exec'd after a `preexec_fn`, so that
spawn forks the daemon and starts an interpreter (~10-20 ms on a loaded
host).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import signal
import subprocess
import termios
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import trio

from runnerd.local.child import ContainedChild
from runnerd.local.containment import (
    Containment,
    ContainmentPlan,
    preexec_contained,
)
from runnerd.local.fdpass import passing
from runnerd.local.identity import SessionIdentity
from runnerd.local.joined import preexec_joined
from runnerd.local.mounts import SessionView
from runnerd.local.pty import DEFAULT_COLS, DEFAULT_ROWS, PtyProcess, set_window_size
from runnerd.local.sessioninit import (
    DEFAULT_LAUNCH,
    INIT_ENV,
    init_argv,
    read_exec_status,
    read_namespace_status,
    read_setup_status,
    self_contained,
)
from runnerd.local.sessioninit import Launch as Launch
from runnerd.local.spawner import run_in_spawner
from runnerd.local.streams import StreamsProcess

# `attach(pid, contained)`: see `spawn_pty_process`.
Attach = Callable[[int, Callable[[], Awaitable[None]]], Awaitable[None]]


def _join_cgroup(cgroup: Path) -> None:
    fd = os.open(cgroup / "cgroup.procs", os.O_WRONLY)
    try:
        os.write(fd, b"0")  # "0": the writing process itself
    finally:
        os.close(fd)


def _prepare_child(
    plan: ContainmentPlan,
    parent: int,
    cgroup: Path | None,
    view: SessionView,
    identity: SessionIdentity | None,
    terminal: bool,
    join: tuple[int, ...] | None = None,
) -> None:
    # Runs in the child after setsid() (start_new_session): make the slave
    # (fd 0 by now) this session's controlling terminal (in a namespace,
    # the workload takes it itself: see `nsinit`; a `streams` child has
    # none), then arm the parent-death signal and enter the namespaces
    # (`containment`). Only ioctl/prctl/unshare and a few small writes: no
    # locks worth speaking of, so the usual preexec_fn-with-threads hazard
    # does not apply.
    if terminal and plan.containment is Containment.PROCESS_GROUP:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    if cgroup is not None:
        _join_cgroup(cgroup)  # before any namespace: as the daemon's own user
    if join is not None:
        preexec_joined(plan, parent, join, identity)
    else:
        preexec_contained(plan, parent, view, identity)


@dataclass(frozen=True)
class _Stdio:
    """The child's fds 0, 1 and 2 (closed in the daemon once it is forked)
    and the daemon's ends (owned by the process handle from then on)."""

    child: tuple[int, int, int]
    ours: tuple[int, ...]
    terminal: bool

    def close_child(self) -> None:
        for fd in set(self.child):
            os.close(fd)

    def close_ours(self) -> None:
        for fd in self.ours:
            os.close(fd)


def _open_pty(size: tuple[int, int]) -> _Stdio:
    master, slave = os.openpty()
    try:
        set_window_size(master, *size)
    except BaseException:
        os.close(master)
        os.close(slave)
        raise
    return _Stdio((slave, slave, slave), (master,), terminal=True)


def _open_pipes() -> _Stdio:
    """Three pipes: the workload's stdin, stdout and stderr."""
    opened: list[int] = []
    try:
        for _ in range(3):
            opened += os.pipe()  # close-on-exec: Popen dup2s the child's ends
    except BaseException:
        for fd in opened:
            os.close(fd)
        raise
    stdin_r, stdin_w, out_r, out_w, err_r, err_w = opened
    return _Stdio((stdin_r, out_w, err_w), (stdin_w, out_r, err_r), terminal=False)


def _spawn(
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    launch: Launch,
    sockets_fd: int | None,
    stdio: _Stdio,
) -> tuple[subprocess.Popen[bytes], int, int | None]:
    """Fork the session's process on `stdio` (which it takes: every fd of
    it is closed or handed on); returns it, its pidfd and (in a PID
    namespace) the read end of the workload's exec status."""
    plan = launch.plan
    status_r = status_w = script = None
    passed: tuple[int, ...] = ()
    preexec: Callable[[], None] | None = functools.partial(
        _prepare_child,
        plan,
        os.getpid(),
        launch.cgroup,
        launch.view,
        launch.identity,
        stdio.terminal,
        launch.join,
    )
    # Handed on at numbers of their own (`runnerd.local.fdpass`): side by
    # side, the child would close every fd of the daemon one by one.
    with passing() as hand:
        try:
            if plan.containment is Containment.PID_NAMESPACE:
                status_r, status_w = os.pipe()
                argv, script = init_argv(launch, argv, status_w, sockets_fd, env, hand)
                passed = hand.fds
                if launch.init_binary is not None and self_contained(launch):
                    preexec = None  # the compiled init does it (`nssetup.c`): a vfork
                    env = INIT_ENV  # the workload's went in the memfd (`--env`)
                    # Exec'd by it; held (parked: `fdpass.park`), not ours to close.
                    passed += (launch.init_binary.fd,)
            if launch.identity is not None:
                # Its terminal, as login gives one, or its pipes: programs that
                # reopen them by name (/dev/stdout, /proc/self/fd/2).
                for child_fd in set(stdio.child):
                    os.fchown(child_fd, launch.identity.uid, launch.identity.gid)
            popen = subprocess.Popen(
                list(argv),
                stdin=stdio.child[0],
                stdout=stdio.child[1],
                stderr=stdio.child[2],
                cwd=cwd,
                env=dict(env),
                close_fds=True,
                pass_fds=passed,
                start_new_session=True,
                preexec_fn=preexec,
            )
        except BaseException as exc:
            stdio.close_ours()
            if status_r is not None:
                os.close(status_r)
            if isinstance(exc, subprocess.SubprocessError):
                # preexec_fn failed: the kernel refused what the probe allowed.
                raise OSError(errno.EPERM, "cannot set up the session's containment") from exc
            raise
        finally:
            # Our copies of the child's ends and the status pipe's write end must
            # go, or the output never reports EOF and the status never ends.
            stdio.close_child()
            for fd in (status_w, script):
                if fd is not None:
                    os.close(fd)
    try:
        # Taken before anyone can reap the child, so it names this process.
        pidfd = os.pidfd_open(popen.pid)
    except BaseException:
        # No handle will own the child (EMFILE, say): do not leave it running
        # on output nobody reads, or as a zombie.
        _abandon(popen, stdio, status_r)
        raise
    for fd in stdio.ours:
        os.set_blocking(fd, False)
    return popen, pidfd, status_r


def _abandon(popen: subprocess.Popen[bytes], stdio: _Stdio, status_r: int | None) -> None:
    """Kill and reap a child that never got its handle; close its fds."""
    with contextlib.suppress(ProcessLookupError):
        # A session leader: its pid is the group, which holds the namespace's
        # init too, and the namespace ends with its init.
        os.killpg(popen.pid, signal.SIGKILL)
    popen.wait()
    stdio.close_ours()
    if status_r is not None:
        os.close(status_r)


async def spawn_pty_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stop_grace_s: float,
    launch: Launch = DEFAULT_LAUNCH,
    label: str = "",
    sockets_fd: int | None = None,
    attach: Attach | None = None,
    size: tuple[int, int] | None = None,
) -> PtyProcess:
    """Start `argv` (argv[0] an absolute path) on a fresh PTY with exactly `env`,
    as `launch` says (contained, seeing the host's file system as its view
    says, in its cgroup, as its identity), on a terminal of `size` (cols,
    rows; None: 80x24) from its first instruction. `label` (the session id)
    is the `session_id` of every log line about it. Returns once the
    workload has exec'd.

    With a network namespace: `sockets_fd` is handed to `nsinit` (`--sockets`,
    the daemon's way into the namespace) and `attach(pid, contained)` is
    awaited with the pid of a process in the namespace, as soon as its
    namespaces exist, before the workload starts: it must await
    `contained()` (the rest of the containment's set-up, which may raise
    OSError) before it sends `nsinit` its go; if it raises, the process is
    stopped and the error propagates.

    Raises:
        OSError: the program could not be executed (missing, not executable,
            bad cwd; `filename` names it: the init's interpreter or argv[0]),
            or no pidfd could be had for it; nothing is left running and no
            fd stays open.
    """
    chosen = size or (DEFAULT_COLS, DEFAULT_ROWS)
    popen, stdio, pidfd, status_r = await _fork(
        argv, cwd, env, launch, sockets_fd, functools.partial(_open_pty, chosen)
    )
    proc = PtyProcess(
        popen,
        stdio.ours[0],
        pidfd,
        stop_grace_s=stop_grace_s,
        label=label,
        namespaced=status_r is not None,
    )
    return await _started(proc, argv, status_r, sockets_fd, attach, self_contained(launch))


async def spawn_warm_pty_process(
    *,
    cwd: Path,
    stop_grace_s: float,
    launch: Launch,
    label: str,
    sockets_fd: int,
    attach: Attach,
) -> tuple[PtyProcess, int]:
    """A warm sandbox (`launch.warm`, the compiled init's `--warm`): as
    `spawn_pty_process` up to `attach`, which must not send the go; its
    terminal 80x24 until resized. Returns the process, waiting for its go,
    and the read end of its status pipe (the caller's: `start_warm`).

    Raises:
        OSError: as `spawn_pty_process`; nothing is left running.
    """
    size = (DEFAULT_COLS, DEFAULT_ROWS)
    popen, stdio, pidfd, status_r = await _fork(
        [], cwd, {}, launch, sockets_fd, functools.partial(_open_pty, size)
    )
    proc = PtyProcess(
        popen, stdio.ours[0], pidfd, stop_grace_s=stop_grace_s, label=label, namespaced=True
    )
    assert status_r is not None  # a warm launch has a PID namespace
    try:
        await read_namespace_status(status_r)
        await attach(proc.pid, functools.partial(read_setup_status, status_r))
    except BaseException:
        _close_status(status_r)
        await proc.aclose()
        raise
    return proc, status_r


async def start_warm(
    proc: Proc, status_r: int, program: str, go: Callable[[], Awaitable[None]]
) -> Proc:
    """`proc`, a warm sandbox (`spawn_warm_pty_process`), once `go()` has
    sent its go and its workload (`program`) has exec'd; `status_r` is
    closed. Raises OSError as `spawn_pty_process` (the caller closes
    `proc`)."""
    try:
        await go()
        error = await read_exec_status(status_r)
    finally:
        _close_status(status_r)
    if error:
        raise OSError(error, os.strerror(error), program)
    return proc


def _close_status(status_r: int) -> None:
    trio.lowlevel.notify_closing(status_r)
    os.close(status_r)


async def spawn_streams_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stop_grace_s: float,
    launch: Launch = DEFAULT_LAUNCH,
    label: str = "",
    sockets_fd: int | None = None,
    attach: Attach | None = None,
) -> StreamsProcess:
    """As `spawn_pty_process`, with three pipes for stdin, stdout and stderr
    instead of a terminal (the contract's `io: "streams"`): the workload
    has no controlling terminal and `isatty` is false on fds 0, 1 and 2.
    The same containment, parent-death signal, cgroup, identity and stop
    guarantees; the same errors."""
    popen, stdio, pidfd, status_r = await _fork(argv, cwd, env, launch, sockets_fd, _open_pipes)
    stdin_w, stdout_r, stderr_r = stdio.ours
    proc = StreamsProcess(
        popen,
        (stdin_w, stdout_r, stderr_r),
        pidfd,
        stop_grace_s=stop_grace_s,
        label=label,
        namespaced=status_r is not None,
    )
    return await _started(proc, argv, status_r, sockets_fd, attach, self_contained(launch))


async def _fork(
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    launch: Launch,
    sockets_fd: int | None,
    open_stdio: Callable[[], _Stdio],
) -> tuple[subprocess.Popen[bytes], _Stdio, int, int | None]:
    def job() -> tuple[subprocess.Popen[bytes], _Stdio, int, int | None]:
        stdio = open_stdio()
        popen, pidfd, status_r = _spawn(argv, cwd, env, launch, sockets_fd, stdio)
        return popen, stdio, pidfd, status_r

    # Forked on the spawner thread (the parent-death signal's anchor), and
    # never abandoned on cancel: a spawned child always reaches its owner.
    return await run_in_spawner(job)


Proc = TypeVar("Proc", bound=ContainedChild)


async def _started(
    proc: Proc,
    argv: Sequence[str],
    status_r: int | None,
    sockets_fd: int | None,
    attach: Attach | None,
    contained_after_exec: bool,
) -> Proc:
    """`proc` once its workload has exec'd (in a namespace: after `attach`
    and the exec status; with the compiled init's own set-up, `attach`
    once the namespaces exist, handed the wait for the rest of it); stopped
    and closed if that fails."""
    if status_r is None:
        return proc  # Popen itself reported any exec failure
    contained: Callable[[], Awaitable[None]] = trio.lowlevel.checkpoint  # by preexec_fn
    if contained_after_exec:
        contained = functools.partial(read_setup_status, status_r)
    try:
        if contained_after_exec and sockets_fd is not None:
            await read_namespace_status(status_r)  # written with --sockets
        if attach is not None and sockets_fd is not None:
            # The namespaces exist: attach while the init makes its mounts.
            await attach(proc.pid, contained)
        else:
            await contained()
        error = await read_exec_status(status_r)
    except BaseException:
        await proc.aclose()
        raise
    finally:
        _close_status(status_r)
    if error:
        await proc.aclose()
        raise OSError(error, os.strerror(error), argv[0])
    return proc
