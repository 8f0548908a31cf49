"""Resource ceilings for local sessions: a cgroup v2 child per session.

Owns finding the cgroup subtree runnerd was *given* (systemd `Delegate=yes`),
and, inside it only, a cgroup per session with `memory.max`, `cpu.max` and
`pids.max` from the session's limits, and reading back whether the
kernel OOM-killed it. Nothing outside the delegated subtree is ever written.

Delegated means: runnerd's own cgroup (`0::/path` in /proc/self/cgroup, on a
host whose /sys/fs/cgroup is the unified cgroup2 hierarchy) carries
systemd's delegation mark (the `trusted.delegate` or `user.delegate` xattr),
or, for a non-root runnerd, is owned by its uid (what systemd does for
`User=` with `Delegate=yes`). Anything else (cgroup v1 or hybrid hosts,
runnerd started by hand) is "not delegated": ceilings are not enforced, and
`find_delegated_cgroup` says why, for the one start-up notice.

Layout under the delegated cgroup D (cgroup v2 allows processes only in
leaves once controllers are enabled for children):

    D/runnerd             the daemon itself, moved here at start-up
    D/session-<id>        one per live session, removed when it ends

The pure parts (`build_ceilings`, `find_delegated_cgroup` against any
root directory, `read_oom_kills`) are unit-tested on a fake tree.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_CEILING
from pathlib import Path

from runnerd.backend import Limits
from runnerd.config.quantities import parse_quantity

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "memory", "pids")
CPU_PERIOD_US = 100_000
# Tasks (processes and threads) per session. Not one of the contract's
# limits: a fork-bomb guard with room for node's thread pools.
PIDS_MAX = 4096
DELEGATE_XATTRS = ("trusted.delegate", "user.delegate")


def build_ceilings(limits: Limits) -> dict[str, str]:
    """The files to write in a session's cgroup, from its limits.

    `cpu` (cores, e.g. "500m") becomes a quota per 100 ms period, at least
    1 ms; `memory` becomes bytes (rounded up) for `memory.max`, and swap is
    kept out of the budget (`memory.swap.max` 0) so the ceiling is the
    ceiling. The whole group is OOM-killed together (`memory.oom.group`).
    """
    cores = parse_quantity(limits.cpu)
    quota_us = max(1000, int((cores * CPU_PERIOD_US).to_integral_value(ROUND_CEILING)))
    memory = int(parse_quantity(limits.memory).to_integral_value(ROUND_CEILING))
    return {
        "cpu.max": f"{quota_us} {CPU_PERIOD_US}",
        "memory.max": str(memory),
        "memory.swap.max": "0",
        "memory.oom.group": "1",
        "pids.max": str(PIDS_MAX),
    }


def own_cgroup_path(proc_self_cgroup: str) -> str | None:
    """The unified-hierarchy path from /proc/self/cgroup text (`0::/a/b`)."""
    for line in proc_self_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def _has_delegate_mark(directory: Path, getxattr: Callable[[Path, str], bytes]) -> bool:
    for name in DELEGATE_XATTRS:
        with contextlib.suppress(OSError):
            if getxattr(directory, name).strip() == b"1":
                return True
    return False


def _getxattr(path: Path, name: str) -> bytes:
    return os.getxattr(path, name)


@dataclass(frozen=True)
class Detection:
    """`cgroup` is the delegated directory, or None with `reason` why not."""

    cgroup: Path | None
    reason: str = ""


def find_delegated_cgroup(
    proc_self_cgroup: str,
    *,
    root: Path = CGROUP_ROOT,
    euid: int,
    getxattr: Callable[[Path, str], bytes] = _getxattr,
) -> Detection:
    """Find the cgroup v2 subtree runnerd was given, reading only."""
    path = own_cgroup_path(proc_self_cgroup)
    if path is None or not (root / "cgroup.controllers").is_file():
        return Detection(None, "this host has no unified cgroup v2 hierarchy (cgroup v1/hybrid)")
    directory = root / path.lstrip("/")
    try:
        owner = directory.stat().st_uid
    except OSError:
        return Detection(None, f"runnerd's cgroup {path} is not visible")
    if not _has_delegate_mark(directory, getxattr) and (euid == 0 or owner != euid):
        return Detection(
            None, f"runnerd's cgroup {path} was not delegated to it (systemd: Delegate=yes)"
        )
    try:
        available = (directory / "cgroup.controllers").read_text().split()
    except OSError as exc:
        return Detection(None, f"cannot read {path}/cgroup.controllers: {exc.strerror}")
    missing = [c for c in CONTROLLERS if c not in available]
    if missing:
        return Detection(None, f"the delegated cgroup {path} lacks {', '.join(missing)}")
    return Detection(directory)


def read_oom_kills(memory_events: str) -> int:
    """`oom_kill` from a memory.events file's text (0 when absent)."""
    for line in memory_events.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return 0


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class SessionCgroups:
    """The delegated subtree, set up for per-session children. Synchronous
    filesystem code: call it from a worker thread."""

    def __init__(self, delegated: Path) -> None:
        self.root = delegated

    def take_over(self) -> None:
        """Move this process into `root/runnerd` and enable the controllers
        for children. Raises OSError."""
        leaf = self.root / "runnerd"
        leaf.mkdir(exist_ok=True)
        _write(leaf / "cgroup.procs", str(os.getpid()))
        _write(self.root / "cgroup.subtree_control", " ".join(f"+{c}" for c in CONTROLLERS))

    def create(self, session_id: str, limits: Limits) -> Path:
        """A fresh cgroup for one session with its ceilings. Raises OSError."""
        cgroup = self.root / f"session-{session_id}"
        cgroup.mkdir()
        try:
            for name, value in build_ceilings(limits).items():
                if name == "memory.swap.max" and not (cgroup / name).exists():
                    continue  # swap accounting is off on this kernel
                _write(cgroup / name, value)
        except BaseException:
            self.remove(cgroup)
            raise
        return cgroup

    @staticmethod
    def oom_killed(cgroup: Path) -> bool:
        try:
            return read_oom_kills((cgroup / "memory.events").read_text()) > 0
        except (OSError, ValueError):
            return False

    @staticmethod
    def remove(cgroup: Path) -> None:
        """Remove an emptied session cgroup. Never raises (logged)."""
        try:
            cgroup.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.error("could not remove cgroup %s: %s", cgroup, exc)


def open_session_cgroups() -> tuple[SessionCgroups | None, str]:
    """The per-session cgroups where runnerd was given a subtree (and the
    daemon moved into its leaf), else None and why. Never raises."""
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError as exc:
        return None, f"cannot read /proc/self/cgroup: {exc.strerror}"
    found = find_delegated_cgroup(text, euid=os.geteuid())
    if found.cgroup is None:
        return None, found.reason
    cgroups = SessionCgroups(found.cgroup)
    try:
        cgroups.take_over()
    except OSError as exc:
        return None, f"cannot set up the delegated cgroup {found.cgroup}: {exc.strerror}"
    return cgroups, ""
