"""What network a local session gets: `[local] network`, and what the host allows.

Owns the three modes, found once at start-up (`probe_network`), and each
session's outbound stack (`run_outbound`):

- `isolated` (the default): a network namespace per session (with the PID,
  mount and user namespaces of `runnerd.local.containment`), `lo` up inside.
  The session cannot reach runnerd's TCP listener or anything else on the
  host's loopback, and sees no host traffic. Declared TCP ports (and the
  inspect port) are published on the host's loopback and forwarded in
  (`runnerd.local.forward`). Outbound goes through `slirp4netns` (a user-mode
  TCP/IP stack, the one rootless Podman uses) run with
  `--disable-host-loopback`, so its gateway does not lead to the host's
  127.0.0.1. Without slirp4netns, sessions are isolated all the same, with no
  outbound; said once at start-up with the package to install.
- `none`: the namespace with its loopback only.
- `host`: the host's network, as without namespaces: announced (the log and
  `/v1/capabilities`) as unisolated.

Where the kernel refuses a network namespace, or sessions have no PID
namespace (the process-group fallback), sessions keep the host's network,
announced the same way. Why slirp4netns and not pasta (Debian's `passt`):
pasta maps the host's loopback ports into the namespace unless told
otherwise port by port; slirp4netns has one flag that forbids the host's
loopback, and both attach to an existing namespace by pid.

`probe_network` runs synchronously at start-up (a few namespaces entered,
and one slirp4netns started against a throw-away namespace: ~100 ms);
nothing here keeps state.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import os
import select
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace

import trio

from runnerd.local.containment import (
    CLONE_NEWNET,
    CLONE_NEWUSER,
    Containment,
    ContainmentPlan,
    can_enter,
    enter_namespaces,
    loopback_up,
)
from runnerd.local.identity import SessionIdentity

log = logging.getLogger(__name__)

SLIRP = "slirp4netns"
INSTALL_SLIRP = "apt-get install slirp4netns"
TAP = "tap0"
# Ahead of the per-session arguments; `--enable-sandbox` (its own mount
# namespace, capabilities dropped) is used where this host allows it.
SLIRP_BASE = ("--configure", "--mtu=65520", "--disable-host-loopback")
SLIRP_SANDBOX = "--enable-sandbox"
# How long slirp4netns may take to configure a namespace (tens of ms here).
ATTACH_TIMEOUT_S = 10.0
# What a probe target enters: a session's user and network namespaces (the
# PID and mount namespaces do not matter to slirp4netns).
_NS_FLAGS = CLONE_NEWUSER | CLONE_NEWNET
UNISOLATED = (
    "a session can reach runnerd's TCP listener (and through it every other session)"
    " and every service on the host's loopback."
)


class NetworkMode(enum.Enum):
    ISOLATED = "isolated"
    NONE = "none"
    HOST = "host"


@dataclass(frozen=True)
class NetworkPlan:
    """What `probe_network` found: the configured `mode`; whether each
    session gets a network namespace (`own_namespace`); the slirp4netns
    command line before the per-session arguments (`outbound`, None for
    none); `reason` why there is no namespace, or no outbound."""

    mode: NetworkMode
    own_namespace: bool = False
    outbound: tuple[str, ...] | None = None
    reason: str | None = None
    user_namespace: bool = False

    @property
    def notice(self) -> str | None:
        """The operator- and client-facing sentence when sessions share the
        host's network (`/v1/capabilities` carries it)."""
        if self.own_namespace:
            return None
        if self.mode is NetworkMode.HOST:
            how = 'unisolated (local.network = "host")'
            return f"Sessions share the host's network, {how}: {UNISOLATED}"
        return (
            f"Sessions share the host's network (no network namespace: {self.reason}): {UNISOLATED}"
        )

    def describe(self) -> str:
        """One log line on what sessions get, when it is not a `notice`."""
        if self.mode is NetworkMode.NONE:
            return "sessions run in network namespaces with a loopback only (local.network = none)"
        if self.outbound is not None:
            return f"sessions run in network namespaces, outbound through {self.outbound[0]}"
        return (
            f"sessions run in network namespaces with no outbound network: {self.reason};"
            f" for outbound: {INSTALL_SLIRP} (declared ports are published all the same)"
        )


def probe_network(
    mode: str, containment: ContainmentPlan, identity: SessionIdentity | None = None
) -> tuple[ContainmentPlan, NetworkPlan]:
    """The containment plan with a network namespace added where `mode` asks
    for one and the kernel gives it, and what sessions' network will be.
    Never raises."""
    wanted = NetworkMode(mode)
    if wanted is NetworkMode.HOST:
        return containment, NetworkPlan(wanted, reason='local.network is "host"')
    if containment.containment is Containment.PROCESS_GROUP:
        return containment, NetworkPlan(wanted, reason="sessions have no PID namespace")
    flags = containment.unshare_flags | CLONE_NEWNET
    refused = can_enter(flags, containment.fresh_proc, identity)
    if refused is not None:
        return containment, NetworkPlan(wanted, reason=f"the kernel refused it ({refused})")
    plan = replace(containment, unshare_flags=flags)
    userns = bool(flags & CLONE_NEWUSER)
    if wanted is NetworkMode.NONE:
        return plan, NetworkPlan(wanted, own_namespace=True, user_namespace=userns)
    outbound, why = probe_outbound(plan)
    return plan, NetworkPlan(
        wanted, own_namespace=True, outbound=outbound, reason=why, user_namespace=userns
    )


def probe_outbound(plan: ContainmentPlan) -> tuple[tuple[str, ...] | None, str | None]:
    """slirp4netns's command line if it attaches to a namespace like a
    session's here (sandboxed if it can be), else None and why not."""
    program = shutil.which(SLIRP)
    if program is None:
        return None, f"{SLIRP} is not installed"
    failure: str | None = "unknown"
    for extra in ((SLIRP_SANDBOX,), ()):
        command = (program, *SLIRP_BASE, *extra)
        failure = _try_outbound(command, plan.unshare_flags & _NS_FLAGS)
        if failure is None:
            return command, None
    return None, f"{SLIRP} cannot attach to a session's namespace here ({failure})"


def _enter_probe(flags: int) -> None:
    try:
        enter_namespaces(flags, os.geteuid(), os.getegid())
        loopback_up()
    except OSError as exc:
        os._exit(exc.errno or 255)


def _try_outbound(command: tuple[str, ...], flags: int) -> str | None:
    """Attach `command` to a throw-away namespace; None once it reports ready."""
    try:
        target = subprocess.Popen(["/bin/sleep", "30"], preexec_fn=lambda: _enter_probe(flags))
    except (OSError, subprocess.SubprocessError) as exc:
        return f"no namespace to try it on: {exc}"
    try:
        return _attach_once(command, target.pid, bool(flags & CLONE_NEWUSER))
    finally:
        target.kill()
        target.wait()


def _attach_once(command: tuple[str, ...], pid: int, userns: bool) -> str | None:
    ready_r, ready_w = os.pipe()
    exit_r, exit_w = os.pipe()
    try:
        argv = slirp_argv(command, pid, userns, ready_fd=ready_w, exit_fd=exit_r)
        slirp = subprocess.Popen(
            argv,
            pass_fds=(ready_w, exit_r),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        for fd in (ready_r, ready_w, exit_r, exit_w):
            os.close(fd)
        return str(exc)
    os.close(ready_w)
    os.close(exit_r)
    try:
        poller = select.poll()  # not select(): it refuses fds past 1024
        poller.register(ready_r, select.POLLIN)
        readable = poller.poll(ATTACH_TIMEOUT_S * 1000)
        ready = bool(readable) and os.read(ready_r, 1) == b"1"
    finally:
        os.close(exit_w)  # slirp4netns exits when its exit fd closes
        os.close(ready_r)
    try:
        _, err = slirp.communicate(timeout=ATTACH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        slirp.kill()
        _, err = slirp.communicate()
    if ready:
        return None
    said = err.decode(errors="replace").strip().splitlines()[-2:]
    return "; ".join(said) if said else f"exit code {slirp.returncode}"


def slirp_argv(
    command: tuple[str, ...], pid: int, userns: bool, *, ready_fd: int, exit_fd: int
) -> list[str]:
    """slirp4netns's argv for the namespace of `pid`."""
    argv = [*command, f"--ready-fd={ready_fd}", f"--exit-fd={exit_fd}"]
    if userns:
        argv.append(f"--userns-path=/proc/{pid}/ns/user")
    return [*argv, str(pid), TAP]


@contextlib.asynccontextmanager
async def open_outbound(
    plan: NetworkPlan, pid: int, *, meanwhile: Callable[[], Awaitable[None]] | None = None
) -> AsyncIterator[None]:
    """Attach slirp4netns to the namespace of `pid`; entered once the
    namespace has its interface and route, held until exit. `meanwhile`
    is awaited once slirp4netns is started, before its ready wait (the
    session's set-up goes on while it attaches).

    Resource handling: slirp4netns exits when its exit fd (ours) closes, so
    a daemon killed outright takes it along; on exit (and when `meanwhile`
    raises) it is killed and reaped.

    Raises:
        OSError: it could not be started, or did not bring the network up;
            or what `meanwhile` raises.
    """
    assert plan.outbound is not None
    ready_r, ready_w = os.pipe()
    exit_r, exit_w = os.pipe()
    argv = slirp_argv(plan.outbound, pid, plan.user_namespace, ready_fd=ready_w, exit_fd=exit_r)
    try:
        # Popen in a worker thread (trio's): on the loop, its vfork and a
        # session directory's writes stalled every other start whenever the
        # kernel made them wait, and 1,000 starts took 1.3-1.8x as long;
        # the spawner thread (one, in turn with every session's fork) was
        # slower still.
        proc = await trio.lowlevel.open_process(
            argv,
            pass_fds=(ready_w, exit_r),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except BaseException:
        for fd in (ready_r, exit_w):
            os.close(fd)
        raise
    finally:
        os.close(ready_w)
        os.close(exit_r)
    try:
        if meanwhile is not None:
            await meanwhile()
        ready = False
        with trio.move_on_after(ATTACH_TIMEOUT_S):
            ready = await _read_ready(ready_r)
        if not ready:
            raise OSError(errno.EIO, f"{SLIRP} did not bring the session's network up")
        yield
    finally:
        os.close(exit_w)
        # Killed, not left to notice its exit fd: the namespace's processes
        # are gone, so it has nothing left to do, and at a shutdown 1,000 of
        # them each waking to exit took seconds of a loaded machine's CPU.
        proc.kill()
        with trio.CancelScope(shield=True):
            await proc.wait()
        trio.lowlevel.notify_closing(ready_r)
        os.close(ready_r)


async def _read_ready(fd: int) -> bool:
    """Whether slirp4netns wrote its ready byte (False on EOF: it exited)."""
    os.set_blocking(fd, False)
    while True:
        try:
            return bool(os.read(fd, 1))
        except BlockingIOError:
            await trio.lowlevel.wait_readable(fd)
