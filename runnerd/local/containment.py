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
import stat
import struct
import subprocess
from dataclasses import dataclass

CLONE_NEWNS = 0x00020000
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


MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
COVER_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    """mount(2). Raises OSError."""

    def enc(value: str | None) -> bytes | None:
        return None if value is None else os.fsencode(value)

    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


@dataclass(frozen=True)
class SessionView:
    """What one session must not see of the host's file system, for its
    mount namespace: `hide` (absolute paths; a directory is covered by an
    empty read-only tmpfs, a file by /dev/null) except `keep` (the
    session's own directory: bind-mounted back at its path)."""

    hide: tuple[str, ...] = ()
    keep: str | None = None


NOTHING_HIDDEN = SessionView()


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def covers(view: SessionView) -> list[str]:
    """The paths to cover, outermost first: one inside another is hidden by
    it already; "/" (everything) and the kept directory never are."""
    chosen: list[str] = []
    for path in sorted(set(view.hide), key=lambda p: (p.rstrip("/").count("/"), p)):
        if path == "/" or any(_inside(path, done) for done in chosen):
            continue
        if view.keep is not None and _inside(path, view.keep):
            continue
        chosen.append(path)
    return chosen


def _cover(path: str, keep: str | None, keep_fd: int | None) -> None:
    try:
        is_dir = stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return  # nothing there to hide
    if not is_dir:
        mount("/dev/null", path, None, MS_BIND)
        return
    mount("tmpfs", path, "tmpfs", COVER_FLAGS, "mode=0755,size=16k")
    if keep is not None and keep_fd is not None and _inside(keep, path):
        os.makedirs(keep, mode=0o755)  # inside the fresh tmpfs
        mount(f"/proc/self/fd/{keep_fd}", keep, None, MS_BIND | MS_REC)
    mount(None, path, None, MS_REMOUNT | MS_RDONLY | COVER_FLAGS)


def apply_view(view: SessionView) -> None:
    """In a fresh mount namespace: stop mount events propagating to the
    host, cover what `view` hides, and re-enter the cwd by its path (so it
    is the kept directory's bind mount, not the covered original).
    Raises OSError."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    keep_fd = None if view.keep is None else os.open(view.keep, os.O_PATH | os.O_DIRECTORY)
    try:
        for path in covers(view):
            _cover(path, view.keep, keep_fd)
    finally:
        if keep_fd is not None:
            os.close(keep_fd)
    os.chdir(os.getcwd())


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


def preexec_contained(plan: ContainmentPlan, parent: int, view: SessionView) -> None:
    """Run in the forked child before exec: die with the spawning thread,
    enter the plan's namespaces (the next process this child forks is the
    namespace's PID 1) and, with a mount namespace, hide what `view` says.
    Raises OSError; the spawn then fails."""
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)  # the parent died before the signal was armed
    if plan.unshare_flags:
        enter_namespaces(plan.unshare_flags, os.geteuid(), os.getegid())
    if plan.unshare_flags & CLONE_NEWNET:
        loopback_up()
    if plan.private_mounts:
        apply_view(view)
    if plan.fresh_proc and plan.unshare_flags & CLONE_NEWUSER:
        keep_sys_admin_across_exec()


def mount_proc() -> None:
    """In a PID namespace's init, in its own mount namespace: a /proc that
    shows this namespace's processes only. Raises OSError."""
    mount("proc", "/proc", "proc", COVER_FLAGS)


def _probe_child(flags: int, fresh_proc: bool) -> None:
    # Exit with the errno: subprocess only reports "Exception occurred in
    # preexec_fn", and the operator should read why. /proc is mounted by a
    # child, as `nsinit`'s init does: only it is inside the PID namespace.
    try:
        enter_namespaces(flags, os.geteuid(), os.getegid())
        if flags & CLONE_NEWNET:
            loopback_up()
        if flags & CLONE_NEWNS:
            apply_view(SessionView())
        if fresh_proc:
            if flags & CLONE_NEWUSER:
                keep_sys_admin_across_exec()
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


def _try(flags: int, fresh_proc: bool = False) -> str | None:
    """None when a child can enter `flags` (and mount /proc), else why not."""
    try:
        code = subprocess.run(
            ["/bin/true"], preexec_fn=functools.partial(_probe_child, flags, fresh_proc)
        ).returncode
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if code == 0:
        return None
    call = "mount" if flags & CLONE_NEWNS else "unshare"
    return f"{call}: {os.strerror(code) if code > 0 else code}"


def can_enter(flags: int, fresh_proc: bool = False) -> str | None:
    """None when a child can enter the namespaces `flags` (bringing `lo` up
    in a network namespace; mounting /proc with `fresh_proc`), else why
    not. A few ms; never raises."""
    return _try(flags, fresh_proc)


def _candidate_flags() -> list[int]:
    # Privileged: plain namespaces. Otherwise (or refused), a user namespace
    # makes them possible without CAP_SYS_ADMIN.
    return [CLONE_NEWPID, CLONE_NEWUSER | CLONE_NEWPID]


def _with_mounts(flags: int) -> ContainmentPlan:
    """The plan for PID namespaces `flags` allows, with as much of a mount
    namespace (and a fresh /proc) as the kernel gives."""
    pid_ns = Containment.PID_NAMESPACE
    refused = _try(flags | CLONE_NEWNS, fresh_proc=True)
    if refused is None:
        return ContainmentPlan(pid_ns, unshare_flags=flags | CLONE_NEWNS, fresh_proc=True)
    if _try(flags | CLONE_NEWNS) is None:
        return ContainmentPlan(pid_ns, unshare_flags=flags | CLONE_NEWNS, mount_reason=refused)
    refused = f"the kernel refused it ({refused})"
    return ContainmentPlan(pid_ns, unshare_flags=flags, mount_reason=refused)


def probe_containment(*, allow_namespaces: bool) -> ContainmentPlan:
    """Find the strongest containment this host allows, by trying it: a
    child enters the namespaces (mounts, /proc) and execs `/bin/true` (a
    few ms each, once). `allow_namespaces=False` (config `local.containment
    = "process-group"`) skips the attempt. Never raises."""
    if not allow_namespaces:
        return ContainmentPlan(
            Containment.PROCESS_GROUP, reason='local.containment is "process-group"'
        )
    reason = "unknown"
    for flags in _candidate_flags():
        refused = _try(flags)
        if refused is None:
            return _with_mounts(flags)
        reason = refused
    return ContainmentPlan(Containment.PROCESS_GROUP, reason=f"the kernel refused it ({reason})")
