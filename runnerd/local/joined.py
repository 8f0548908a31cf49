"""Joining a live sandbox's namespaces: how a watch session's app enters them.

Owns the system calls (through libc: Python 3.11 has no `os.setns`) that
let a forked child enter the namespaces of the session's holder
(`runnerd.local.sandbox`) instead of making new ones as
`runnerd.local.containment` does for a run session: `open_namespaces` (in
the daemon, once per sandbox) and `preexec_joined` (in the child, before
exec). The child keeps every guarantee of `preexec_contained`: the session
uid, the parent-death signal, `no_new_privs`, an empty bounding set.

Nothing here keeps state.
"""

from __future__ import annotations

import ctypes
import os
import signal

from runnerd.local.containment import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    ContainmentPlan,
    keep_sys_admin_across_exec,
    set_parent_death_signal,
)
from runnerd.local.identity import (
    SessionIdentity,
    become,
    drop_bounding_set,
    set_no_new_privs,
)

_libc = ctypes.CDLL(None, use_errno=True)

# The namespaces a joined process enters, by their /proc/PID/ns names (the
# user namespace first: the others are owned by it, so entering them needs
# its capabilities; pid_for_children: setns(2) moves only the children).
JOINED = (
    (CLONE_NEWUSER, "user"),
    (CLONE_NEWIPC, "ipc"),
    (CLONE_NEWNET, "net"),
    (CLONE_NEWNS, "mnt"),
    (CLONE_NEWPID, "pid_for_children"),
)


def open_namespaces(pid: int, flags: int) -> tuple[int, ...]:
    """The namespaces `flags` names of the process `pid`, as fds (close-on-
    exec) in `JOINED`'s order, for `preexec_joined`. Raises OSError (nothing
    left open)."""
    fds: list[int] = []
    try:
        for flag, name in JOINED:
            if flags & flag:
                fds.append(os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return tuple(fds)


def setns(fd: int) -> None:
    """setns(2) into the namespace `fd` is. Raises OSError."""
    if _libc.setns(fd, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def preexec_joined(
    plan: ContainmentPlan,
    parent: int,
    namespaces: tuple[int, ...],
    identity: SessionIdentity | None = None,
) -> None:
    """As `preexec_contained`, but entering the namespaces of a live holder
    (`namespaces`: `open_namespaces` of it under the same `plan`) instead
    of new ones: the same uid, parent-death signal and `no_new_privs`; its
    mount view is the holder's (already applied), its cwd re-entered by
    path inside it. CAP_SYS_ADMIN of the user namespace is kept ambient for
    `nsinit --nest` (which unshares the app's own PID namespace and clears
    it before the workload's exec). Raises OSError."""
    if identity is not None:
        become(identity)
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)  # the parent died before the signal was armed
    cwd = os.getcwd()  # a path of the holder's view too (the session's own directory)
    for fd in namespaces:
        setns(fd)
    os.chdir(cwd)
    set_no_new_privs()
    if plan.unshare_flags & CLONE_NEWUSER:
        keep_sys_admin_across_exec()
        drop_bounding_set()
