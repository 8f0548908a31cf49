"""Workloads that try to outlive their session, and how a test sees them die.

Inside a PID namespace `$$` and `$!` are the namespace's numbers, and the
session's /proc is its namespace's own: nothing inside knows its host pid.
So a shell names itself by a *token*, its pid in its namespace plus that
namespace (`/proc/self/stat` read by the `read` builtin in the shell itself,
and `/proc/self/ns/pid`), and the test finds the host pid from the host's
/proc (`host_pid`). Every escapee appends its token to `$PIDFILE` before it
execs the long sleep.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import trio

# Shell: set HOST_PID to this shell's token (`host_pid` gives its host pid).
HOST_PID = 'read -r p _ </proc/self/stat; HOST_PID="$p@$(readlink /proc/self/ns/pid)"'


def find_host_pid(token: str | bytes) -> int | None:
    """The host pid of the live process a `HOST_PID` token names (a trailing
    "." is ignored), None when it is gone."""
    text = (token.decode() if isinstance(token, bytes) else token).strip().rstrip(".")
    ns_pid, _, namespace = text.partition("@")
    for pid in (name for name in os.listdir("/proc") if name.isdigit()):
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") != namespace:
                continue
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue  # exited meanwhile
        for line in status.splitlines():
            if line.startswith("NSpid:") and line.split()[-1] == ns_pid:
                return int(pid)
    return None


async def wait_token_gone(token: str | bytes) -> None:
    """Return once the process a token names has exited (at once if it has)."""
    pid = find_host_pid(token)
    if pid is not None:
        await wait_gone(pid)


def host_pid(token: str | bytes) -> int:
    """The host pid of the live process a `HOST_PID` token names."""
    pid = find_host_pid(token)
    assert pid is not None, f"no live process is {token!r}"
    return pid


def _record(name: str) -> str:
    return f'{HOST_PID}; echo "{name} $HOST_PID" >> "$PIDFILE"'


# Each line starts one escapee by a classic trick; all four sleep for long.
ESCAPES = {
    "setsid": f"(setsid sh -c '{_record('setsid')}; exec sleep 4344' &)",
    "double-fork": f"( (sh -c '{_record('double-fork')}; exec sleep 4344' &) & )",
    "nohup": f"nohup sh -c '{_record('nohup')}; exec sleep 4344' >/dev/null 2>&1 &",
    "ignores-sigterm": (f"sh -c 'trap \"\" TERM; {_record('ignores-sigterm')}; exec sleep 4344' &"),
}


# The session's own process stays alive and ignores the hangup a dead
# daemon's PTY sends, so only the parent-death signal can end it.
STAY = 'trap "" HUP; exec sleep 4344'


def escape_script(then: str = STAY) -> str:
    """Start every escapee, wait until all recorded their pids, print
    `escaped`, then run `then` (default: stay alive, deaf to SIGHUP)."""
    lines = [': >> "$PIDFILE"', *ESCAPES.values()]
    lines.append(f'while [ "$(wc -l < "$PIDFILE")" -lt {len(ESCAPES)} ]; do sleep 0.02; done')
    lines += ["echo escaped", then]
    return "\n".join(lines) + "\n"


def read_pids(pidfile: Path) -> dict[str, int]:
    """Escapee name → host pid (while they live)."""
    pids = {
        name: host_pid(token)
        for name, token in (line.split() for line in pidfile.read_text().splitlines())
    }
    assert sorted(pids) == sorted(ESCAPES), pids
    return pids


def is_running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


async def wait_gone(pid: int) -> None:
    """Return once `pid` has exited (its pidfd turns readable: child or not)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        await trio.lowlevel.wait_readable(pidfd)
    finally:
        trio.lowlevel.notify_closing(pidfd)
        os.close(pidfd)


async def wait_all_gone(pids: dict[str, int], timeout_s: float = 10.0) -> None:
    with trio.fail_after(timeout_s):
        for pid in pids.values():
            await wait_gone(pid)


def kill_leftovers(pids: dict[str, int]) -> None:
    """Test cleanup for the fallback path, where escapees may survive."""
    for pid in pids.values():
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        finally:
            os.close(pidfd)
