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
import functools
import os
import signal
import subprocess
from dataclasses import dataclass

CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)


class Containment(enum.Enum):
    PID_NAMESPACE = "pid-namespace"
    PROCESS_GROUP = "process-group"


@dataclass(frozen=True)
class ContainmentPlan:
    """What `probe_containment` found: the containment and the namespaces it
    takes (`unshare_flags`, 0 for the fallback). `reason` says why the
    fallback applies (None when namespaces work)."""

    containment: Containment
    unshare_flags: int = 0
    reason: str | None = None

    @property
    def notice(self) -> str | None:
        """The one operator-facing sentence about a weaker containment."""
        if self.containment is Containment.PID_NAMESPACE:
            return None
        return (
            "Sessions are contained by process group only (no PID namespace: "
            f"{self.reason}); a process that detaches with setsid may outlive its session."
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


def preexec_contained(plan: ContainmentPlan, parent: int) -> None:
    """Run in the forked child before exec: die with the spawning thread, and
    enter the plan's namespaces (the next process this child forks is the
    namespace's PID 1). Raises OSError; the spawn then fails."""
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)  # the parent died before the signal was armed
    if plan.unshare_flags:
        enter_namespaces(plan.unshare_flags, os.geteuid(), os.getegid())


def _probe_child(flags: int) -> None:
    # Exit with the errno: subprocess only reports "Exception occurred in
    # preexec_fn", and the operator should read why.
    try:
        enter_namespaces(flags, os.geteuid(), os.getegid())
    except OSError as exc:
        os._exit(exc.errno or 255)


def _candidate_flags() -> list[int]:
    # Privileged: a plain PID namespace. Otherwise (or refused), a user
    # namespace makes the PID namespace possible without CAP_SYS_ADMIN.
    return [CLONE_NEWPID, CLONE_NEWUSER | CLONE_NEWPID]


def probe_containment(*, allow_namespaces: bool) -> ContainmentPlan:
    """Find the strongest containment this host allows, by trying it: a
    child enters the namespaces and execs `/bin/true` (a few ms, once).
    `allow_namespaces=False` (config `local.containment = "process-group"`)
    skips the attempt. Never raises."""
    if not allow_namespaces:
        return ContainmentPlan(
            Containment.PROCESS_GROUP, reason='local.containment is "process-group"'
        )
    reason = "unknown"
    for flags in _candidate_flags():
        try:
            code = subprocess.run(
                ["/bin/true"], preexec_fn=functools.partial(_probe_child, flags)
            ).returncode
        except (OSError, subprocess.SubprocessError) as exc:
            code, reason = -1, str(exc)
        if code == 0:
            return ContainmentPlan(Containment.PID_NAMESPACE, unshare_flags=flags)
        if code > 0:
            reason = f"unshare: {os.strerror(code)}"
    return ContainmentPlan(Containment.PROCESS_GROUP, reason=f"the kernel refused it ({reason})")
