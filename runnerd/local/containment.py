"""How a session's processes are held together, and what the kernel allows.

Owns the choice between the two containments and the system calls behind
them (through libc: Python 3.11 has no `os.unshare`):

- `Containment.PID_NAMESPACE`: the session's first process (`runnerd.local.
  nsinit`) is started in a new PID namespace, so the workload runs under an
  init of its own. When that init ends, the kernel kills every process left
  in the namespace, whatever it did to escape (`setsid`, double fork,
  `nohup`, ignoring SIGTERM). Without CAP_SYS_ADMIN, a user namespace that
  maps the daemon's own uid and gid is created with it (the workload keeps
  its identity).
- `Containment.PROCESS_GROUP`: the fallback where the kernel refuses
  namespaces (no privilege, user namespaces off, a seccomp filter). Stops
  reach the workload's process group and the descendants still attached to
  it; a process that double-forked away is out of reach. Announced once at
  start-up and in `/v1/capabilities`, never silent.

With `local.network` asking for one, `runnerd.local.network` adds a network
namespace (`CLONE_NEWNET`) to the PID namespace's flags; the child brings its
`lo` up (`loopback_up`) right after entering it, while it still has the
capabilities to.
Who a session is on the host (`runnerd.local.identity`): a root daemon's
sessions each drop to a uid of their own before entering a user namespace
that maps it to itself; where the kernel refuses that, they stay root, and
the notice says so. Each session has an IPC namespace of its own where
the kernel gives one (announced where not). With a mount namespace, every
session also gets a private /tmp, /var/tmp, /dev/shm and /run/lock and sees
/sys, /proc/sys and /proc/sysrq-trigger read-only: `runnerd.local.mounts`
sets that up in the child.

In both, the first process gets a parent-death signal (SIGKILL): a daemon
killed outright takes its sessions down. The kernel ties that signal to the
*thread* that forked the child, so every child is forked from one thread that
lives as long as the process (`runnerd.local.spawner`).

Everything here runs in a forked child before exec (`preexec_*`) or once at
start-up (`probe_containment`); nothing keeps state.
"""

from __future__ import annotations

import ctypes
import enum
import fcntl
import functools
import os
import signal
import socket
import struct
import subprocess
from dataclasses import dataclass, replace

from runnerd.local.identity import (
    SessionIdentity,
    become,
    drop_bounding_set,
    set_no_new_privs,
)
from runnerd.local.mounts import SessionView, apply_view, mount_proc

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000  # asked for by `runnerd.local.network`
PR_SET_PDEATHSIG = 1
PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE = 47, 2
CAP_SYS_ADMIN = 21

_libc = ctypes.CDLL(None, use_errno=True)


class Containment(enum.Enum):
    PID_NAMESPACE = "pid-namespace"
    PROCESS_GROUP = "process-group"


@dataclass(frozen=True)
class ContainmentPlan:
    """What `probe_containment` found: the containment and the namespaces it
    takes (`unshare_flags`, 0 for the fallback); whether the PID namespace's
    init mounts a fresh /proc (`fresh_proc`). `reason` says why the fallback
    applies; `mount_reason` why there is no mount namespace or no fresh
    /proc (None when everything works)."""

    containment: Containment
    unshare_flags: int = 0
    reason: str | None = None
    fresh_proc: bool = False
    mount_reason: str | None = None
    # A root daemon's sessions drop to a session uid (`identity`); when the
    # kernel refused that, `root_reason` says why they stay root.
    drops_root: bool = False
    root_reason: str | None = None
    # Without an IPC namespace (CLONE_NEWIPC in `unshare_flags`), why not.
    ipc_reason: str | None = None

    @property
    def ipc_notice(self) -> str | None:
        """The operator-facing sentence when sessions share the host's IPC."""
        if self.ipc_reason is None:
            return None
        return (
            f"Sessions share the host's System V IPC and POSIX message queues (no IPC "
            f"namespace: {self.ipc_reason}): what a session creates there outlives it."
        )

    @property
    def identity_notice(self) -> str | None:
        """The operator-facing sentence when a root daemon's sessions are root."""
        if self.root_reason is None:
            return None
        return (
            f"Sessions run as root on the host ({self.root_reason}): a workload can "
            "reach the host's kernel settings, raw sockets and every root-owned file "
            "it can see; run runnerd as a non-root user or allow user namespaces."
        )

    @property
    def private_mounts(self) -> bool:
        return bool(self.unshare_flags & CLONE_NEWNS)

    @property
    def notice(self) -> str | None:
        """The one operator-facing sentence about a weaker containment."""
        if self.containment is Containment.PROCESS_GROUP:
            return (
                "Sessions are contained by process group only (no PID namespace: "
                f"{self.reason}); a process that detaches with setsid may outlive its "
                f"session, and {SHARED_MOUNTS}"
            )
        if not self.private_mounts:
            return f"Sessions have no mount namespace ({self.mount_reason}): {SHARED_MOUNTS}"
        if not self.fresh_proc:
            # Each in a user namespace of its own, sessions fail the kernel's
            # ptrace check on each other: no environ, cwd or fd of another.
            reach = (
                "list other sessions' processes and their command lines (not their "
                "environments: each session has a user namespace of its own)"
                if self.unshare_flags & CLONE_NEWUSER
                else "see other sessions' processes and read their environments"
            )
            return (
                f"Sessions see the host's /proc (mounting their own was refused: "
                f"{self.mount_reason}): a session can {reach}."
            )
        return None


SHARED_MOUNTS = (
    "a session can read runnerd's config, other sessions' files and the API "
    "socket, and other sessions' environments through /proc."
)

# Before a probe decides (and for callers that never ask): no namespaces.
PROCESS_GROUP_PLAN = ContainmentPlan(Containment.PROCESS_GROUP, reason="not probed")


def set_parent_death_signal(sig: int) -> None:
    """prctl(PR_SET_PDEATHSIG). Raises OSError."""
    if _libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def unshare(flags: int) -> None:
    """unshare(2). Raises OSError."""
    if _libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter_namespaces(flags: int, uid: int, gid: int) -> None:
    """In a fresh child: unshare `flags`; with a user namespace, map `uid`
    and `gid` to themselves so the workload keeps the daemon's identity.
    Raises OSError."""
    unshare(flags)
    if flags & CLONE_NEWUSER:
        _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
        _write("/proc/self/setgroups", "deny")  # required before an unprivileged gid_map
        _write("/proc/self/gid_map", f"{gid} {gid} 1\n")


SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up() -> None:
    """In a fresh network namespace (with CAP_NET_ADMIN over it): bring `lo`
    up, so the workload has 127.0.0.1 and ::1 of its own. Raises OSError."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]


def keep_sys_admin_across_exec() -> None:
    """Make CAP_SYS_ADMIN (of the new user namespace) ambient, so `nsinit`
    (exec'd as a non-root uid, which drops capabilities) can still mount
    the namespace's /proc; it clears the ambient set before the workload's
    exec. Raises OSError."""
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if _libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    data[0].inheritable |= 1 << CAP_SYS_ADMIN
    if _libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    if _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAP_AMBIENT)")


def preexec_contained(
    plan: ContainmentPlan,
    parent: int,
    view: SessionView,
    identity: SessionIdentity | None = None,
) -> None:
    """Run in the forked child before exec: as root, drop to `identity`
    (a root daemon's session uid); die with the spawning thread; enter the
    plan's namespaces (the next process this child forks is the namespace's
    PID 1); with a mount namespace, the private dirs, read-only knobs and
    what `view` hides; `no_new_privs`. Raises OSError; the spawn then fails."""
    if identity is not None:
        become(identity)
    # After the uid change: a credential change clears the parent-death signal.
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)  # the parent died before the signal was armed
    _enter(plan.unshare_flags, plan.fresh_proc, view)


def _enter(flags: int, fresh_proc: bool, view: SessionView) -> None:
    """Namespaces, mounts and capabilities, as the session and the probe take them."""
    if flags:
        enter_namespaces(flags, os.geteuid(), os.getegid())
    if flags & CLONE_NEWNET:
        loopback_up()  # while the new user namespace's capabilities are whole
    if flags & CLONE_NEWNS:
        apply_view(view, fresh_proc=fresh_proc)
    set_no_new_privs()
    if flags & CLONE_NEWUSER:
        if fresh_proc:
            keep_sys_admin_across_exec()
        drop_bounding_set()  # after: a capability outside it cannot become inheritable


def probe_child(flags: int, fresh_proc: bool, identity: SessionIdentity | None) -> None:
    """A `preexec_fn` that enters `flags` as a session would (as
    `identity` when given); exits the child with the errno when refused."""
    # Exit with the errno: subprocess only reports "Exception occurred in
    # preexec_fn", and the operator should read why. /proc is mounted by a
    # child, as `nsinit`'s init does: only it is inside the PID namespace.
    try:
        if identity is not None:
            become(identity)
        _enter(flags, fresh_proc, SessionView())
        if fresh_proc:
            init = os.fork()
            if init == 0:
                try:
                    mount_proc()
                except OSError as exc:
                    os._exit(exc.errno or 255)
                os._exit(0)
            code = os.waitstatus_to_exitcode(os.waitpid(init, 0)[1])
            if code != 0:
                os._exit(code if code > 0 else 255)
    except OSError as exc:
        os._exit(exc.errno or 255)


def _try(flags: int, identity: SessionIdentity | None, fresh_proc: bool = False) -> str | None:
    """None when a child can enter `flags` (and mount /proc), else why not."""
    child = functools.partial(probe_child, flags, fresh_proc, identity)
    try:
        code = subprocess.run(["/bin/true"], preexec_fn=child, cwd="/").returncode
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if code == 0:
        return None
    call = "mount" if flags & CLONE_NEWNS else "unshare"
    return f"{call}: {os.strerror(code) if code > 0 else code}"


def can_enter(
    flags: int, fresh_proc: bool = False, identity: SessionIdentity | None = None
) -> str | None:
    """None when a child can enter the namespaces `flags` (as `identity`
    when given; bringing `lo` up in a network namespace; mounting /proc with
    `fresh_proc`), else why not. A few ms; never raises."""
    return _try(flags, identity, fresh_proc)


def _candidates(session_uid: int | None) -> list[tuple[int, SessionIdentity | None]]:
    # Not root: plain namespaces if privileged, else a user namespace makes
    # them possible. Root: the session uid in a user namespace first, then
    # (announced) root in plain namespaces.
    flags: list[tuple[int, SessionIdentity | None]] = [
        (CLONE_NEWPID, None),
        (CLONE_NEWUSER | CLONE_NEWPID, None),
    ]
    if session_uid is None:
        return flags
    return [(CLONE_NEWUSER | CLONE_NEWPID, SessionIdentity(session_uid, session_uid)), *flags]


def _with_mounts(flags: int, identity: SessionIdentity | None) -> ContainmentPlan:
    """The plan for PID namespaces `flags` allows, with as much of a mount
    namespace (and a fresh /proc) as the kernel gives."""
    pid_ns, drops_root = Containment.PID_NAMESPACE, identity is not None
    refused = _try(flags | CLONE_NEWNS, identity, fresh_proc=True)
    if refused is None:
        flags |= CLONE_NEWNS
        return ContainmentPlan(pid_ns, flags, fresh_proc=True, drops_root=drops_root)
    if _try(flags | CLONE_NEWNS, identity) is None:
        flags |= CLONE_NEWNS
        return ContainmentPlan(pid_ns, flags, mount_reason=refused, drops_root=drops_root)
    refused = f"the kernel refused it ({refused})"
    return ContainmentPlan(pid_ns, flags, mount_reason=refused, drops_root=drops_root)


def _with_ipc(plan: ContainmentPlan, identity: SessionIdentity | None) -> ContainmentPlan:
    """`plan` with an IPC namespace when the kernel gives one: SysV shared
    memory, semaphores, message queues and POSIX queues of the session's
    own, freed with it."""
    refused = _try(plan.unshare_flags | CLONE_NEWIPC, identity)
    if refused is None:
        return replace(plan, unshare_flags=plan.unshare_flags | CLONE_NEWIPC)
    return replace(plan, ipc_reason=f"the kernel refused it ({refused})")


def probe_containment(*, allow_namespaces: bool, session_uid: int | None = None) -> ContainmentPlan:
    """Find the strongest containment this host allows, by trying it: a
    child enters the namespaces (mounts, /proc) and execs `/bin/true` (a
    few ms each, once). `session_uid`: the daemon is root, and its sessions
    should drop to a uid (this one, for the probe). `allow_namespaces=False`
    (config `local.containment = "process-group"`) skips the attempt.
    Never raises."""
    root = None if session_uid is None else "no user namespace for a session uid: "
    if not allow_namespaces:
        why = 'local.containment is "process-group"'
        return ContainmentPlan(
            Containment.PROCESS_GROUP, reason=why, root_reason=root and root + why
        )
    reason = "unknown"
    for flags, identity in _candidates(session_uid):
        refused = _try(flags, identity)
        if refused is None:
            plan = _with_ipc(_with_mounts(flags, identity), identity)
            if root is not None and identity is None:
                plan = replace(plan, root_reason=root + reason)
            return plan
        reason = f"the kernel refused it ({refused})"
    return ContainmentPlan(
        Containment.PROCESS_GROUP, reason=reason, root_reason=root and root + reason
    )
