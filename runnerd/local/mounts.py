"""A session's mount namespace: what it sees of the host's file system.

Run in a forked child that has just entered a fresh mount namespace
(`runnerd.local.containment` decides whether there is one and calls in):
mount propagation to the host is stopped, the session gets a private /tmp,
/var/tmp, /dev/shm and /run/lock (`PRIVATE_DIRS`: tmpfs, gone with the
namespace), what its `SessionView` hides is covered (an empty read-only
tmpfs, or /dev/null for a file) except the session's own directory, bound
back at its path, and /sys, /proc/sys and /proc/sysrq-trigger are made
read-only (`apply_view`). A PID namespace's init mounts its fresh /proc
with `mount_proc` (`runnerd.local.nsinit`, and the probe's child).

System calls through libc (Python 3.11 has no `os.mount`); nothing keeps
state.
"""

from __future__ import annotations

import ctypes
import os
import re
import stat
from dataclasses import dataclass

_libc = ctypes.CDLL(None, use_errno=True)

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
COVER_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC
# World-writable on a stock host: what a session writes there would outlive
# it, so each session gets its own (a tmpfs, freed with its namespace).
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
# The host's kernel knobs: a write to /proc/sys/kernel/core_pattern runs
# code on the host; /proc/sys and sysrq-trigger are redone on a fresh /proc
# by `nsinit`.
READ_ONLY = ("/sys",)
HOST_PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger")


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


def _cover(path: str, keep: str | None, keep_fd: int | None, *, private: bool = False) -> None:
    # `private`: a writable tmpfs of the session's own (PRIVATE_DIRS), for
    # real directories only; else an empty read-only one.
    try:
        is_dir = stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return  # nothing there to hide
    if private and not is_dir:
        return  # a symlink (/var/tmp -> /tmp): its target is covered
    if not is_dir:
        mount("/dev/null", path, None, MS_BIND)
        return
    if private:
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    else:
        mount("tmpfs", path, "tmpfs", COVER_FLAGS, "mode=0755,size=16k")
    if keep is not None and keep_fd is not None and _inside(keep, path):
        os.makedirs(keep, mode=0o755)  # inside the fresh tmpfs
        mount(f"/proc/self/fd/{keep_fd}", keep, None, MS_BIND | MS_REC)
    if not private:
        mount(None, path, None, MS_REMOUNT | MS_RDONLY | COVER_FLAGS)


# statvfs flags that a remount must repeat: in a user namespace the kernel
# locks them on the mounts it copied (and refuses a remount that drops one).
_KEPT_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC))
_OCTAL = re.compile(rb"\\([0-7]{3})")  # mountinfo writes a space as \040


def _unescape(match: re.Match[bytes]) -> bytes:
    return bytes([int(match.group(1), 8)])


def _mount_points_under(path: str) -> list[str]:
    """`path` and every mount point below it, from /proc/self/mountinfo
    (autofs left out: looking one up would mount it)."""
    found = []
    with open("/proc/self/mountinfo", "rb") as info:
        for line in info:
            fields, _, rest = line.partition(b" - ")
            point = os.fsdecode(_OCTAL.sub(_unescape, fields.split()[4]))
            if _inside(point, path) and not rest.startswith(b"autofs "):
                found.append(point)
    return found


def read_only(path: str) -> None:
    """Make `path` and every mount under it read-only in this mount
    namespace: a recursive bind onto itself, then a read-only remount of
    each mount in it (plain mount(2): the shipped unit's system call filter
    allows it and not mount_setattr). A missing path is skipped, and so is
    a mount under it out of this process's reach (it cannot write there
    either). Raises OSError."""
    if not os.path.lexists(path):
        return
    mount(path, path, None, MS_BIND | MS_REC)
    for point in _mount_points_under(path):
        try:
            kept = os.statvfs(point).f_flag
            flags = sum(ms for st, ms in _KEPT_FLAGS if kept & st)
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except (PermissionError, FileNotFoundError):
            if point == path:
                raise


def _open_kept(keep: str) -> int:
    # By the way from the cwd when it is inside (a session's is): the
    # workdir above may be 0700, out of a session uid's reach by its path.
    # Opened in this mount namespace: a bind mount's source must be in it.
    cwd = os.getcwd()
    path = os.path.relpath(keep, cwd) if _inside(cwd, keep) else keep
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def apply_view(view: SessionView, *, fresh_proc: bool = False) -> None:
    """In a fresh mount namespace: stop mount events propagating to the
    host, give the session its private `PRIVATE_DIRS`, cover what `view`
    hides, make the host's kernel knobs read-only (`READ_ONLY`, and the
    host /proc's unless `fresh_proc`: a fresh /proc cannot be mounted over
    a partly covered one), and re-enter the cwd by its path (so it is the
    kept directory's bind mount, not the covered original). Raises OSError."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    keep_fd = None if view.keep is None else _open_kept(view.keep)
    try:
        for path in PRIVATE_DIRS:
            _cover(path, view.keep, keep_fd, private=True)
        for path in covers(view):
            _cover(path, view.keep, keep_fd)
    finally:
        if keep_fd is not None:
            os.close(keep_fd)
    for path in READ_ONLY + (() if fresh_proc else HOST_PROC_READ_ONLY):
        read_only(path)
    os.chdir(os.getcwd())


def mount_proc() -> None:
    """In a PID namespace's init, in its own mount namespace: a /proc that
    shows this namespace's processes only. Raises OSError."""
    mount("proc", "/proc", "proc", COVER_FLAGS)
