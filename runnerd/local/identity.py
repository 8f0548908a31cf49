"""Who a session runs as on the host, and the privileges it gives up.

Owns the session uids of a root daemon and the credential system calls of
a session's first process (run in the forked child, before exec):

- A daemon running as root gives each live session a uid of its own from
  `[local] session_uid_base` / `session_uid_count` (the gid is the same
  number; no supplementary groups). The child drops to it *before* it
  creates its user namespace, which then maps that uid to itself, as a
  non-root daemon's sessions map the daemon's: so a session is root
  nowhere, holds no capability over anything of the host's, and owns no
  file on the host but its session directory (chowned to it, removed with
  it). A uid is reused only once its session has ended: the session's PID
  namespace is gone by then, and with it every process of that uid.
- A non-root daemon's sessions keep its uid (it cannot take another).
- Every session: `no_new_privs` (no setuid binary or file capability
  raises it) and an empty bounding set where it is in a user namespace of
  its own (`drop_bounding_set`).

`SessionUids` is pure bookkeeping and `blocking_directory` reads modes;
the rest are system calls (through libc: Python 3.11 has no `prctl`).
"""

from __future__ import annotations

import ctypes
import heapq
import os
from dataclasses import dataclass

PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 4, 24, 38
# Capabilities are numbered below 64 (CAP_LAST_CAP is 40 on Linux 6.x); a
# number the kernel does not know is EINVAL, which the drop ignores.
CAP_NUMBERS = range(64)

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class SessionIdentity:
    """A session's host uid and gid."""

    uid: int
    gid: int


class SessionUids:
    """The uids `base` … `base + count - 1`, one per live session.

    Invariant: a uid is held by at most one session; `acquire` hands out
    the lowest free one (so a quiet daemon reuses the same few). Every uid
    from `_fresh` up is free and was never handed out; the free ones below
    it are exactly `_freed` (a heap), so the lowest free uid is the heap's
    smallest, else `_fresh`: O(log n) a start, not a scan of every held uid
    (which made starting n sessions O(n²))."""

    def __init__(self, base: int, count: int) -> None:
        self.base, self.count = base, count
        self._held: set[int] = set()
        self._freed: list[int] = []
        self._fresh = base

    def acquire(self) -> SessionIdentity | None:
        """A free uid, or None when every uid of the range is held."""
        if self._freed:
            uid = heapq.heappop(self._freed)
        elif self._fresh < self.base + self.count:
            uid, self._fresh = self._fresh, self._fresh + 1
        else:
            return None
        self._held.add(uid)
        return SessionIdentity(uid, uid)

    @property
    def free(self) -> int:
        """How many uids `acquire` can still hand out."""
        return self.count - len(self._held)

    def release(self, identity: SessionIdentity) -> None:
        """Give the uid back (call once its session's processes are gone;
        a second call, or a uid not handed out, is a no-op)."""
        if identity.uid in self._held:
            self._held.remove(identity.uid)
            heapq.heappush(self._freed, identity.uid)


def _prctl(option: int, arg: int) -> None:
    if _libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def become(identity: SessionIdentity) -> None:
    """As root, in the child: drop to `identity` for good (every capability
    goes with the uid), and stay dumpable: a credential change makes the
    process non-dumpable, which hands its /proc files (its `uid_map`) to
    root. Raises OSError."""
    os.setgroups([])
    os.setresgid(identity.gid, identity.gid, identity.gid)
    os.setresuid(identity.uid, identity.uid, identity.uid)
    _prctl(PR_SET_DUMPABLE, 1)


def set_no_new_privs() -> None:
    """No exec from here on gains a privilege (setuid bits and file
    capabilities are ignored). Inherited by every descendant. Raises OSError."""
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def drop_bounding_set() -> None:
    """Empty the bounding set (needs CAP_SETPCAP in the current user
    namespace: a child right after `unshare(CLONE_NEWUSER)` has it). The
    ambient set is unaffected, so what `containment` made ambient for the
    init still reaches it; nothing exec'd later can get any other
    capability. Raises OSError."""
    for cap in CAP_NUMBERS:
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            if err != 22:  # EINVAL: no such capability on this kernel
                raise OSError(err, f"prctl(PR_CAPBSET_DROP): {os.strerror(err)}")


def blocking_directory(path: str, private: tuple[str, ...] = ()) -> str | None:
    """The first directory on the way to `path` (symlinks resolved) that a
    uid owning nothing on the host cannot pass (no search bit for others),
    None when there is none. Directories at or under one of `private` are
    the session's own copies (`mounts.PRIVATE_DIRS`), passable. Why an
    interpreter under a 0700 home fails."""
    real = os.path.realpath(path)
    current = "/"
    for part in real.strip("/").split("/")[:-1]:
        current = os.path.join(current, part)
        if any(current == p or current.startswith(p + "/") for p in private):
            return None
        try:
            if not os.stat(current).st_mode & 0o001:
                return current
        except OSError:
            return current
    return None
