"""systemd integration: readiness notification, the watchdog, socket activation.

Owns the three small protocols runnerd speaks with its service manager, all
without a dependency (stdlib sockets driven by trio):

- `sd_notify(*states)`: one datagram to `$NOTIFY_SOCKET` (`READY=1`,
  `STATUS=...`, `STOPPING=1`, `WATCHDOG=1`). A no-op returning False when the
  variable is unset, so the daemon runs the same with or without systemd.
- `run_watchdog(interval_s)`: pings `WATCHDOG=1` forever at half the period
  systemd asked for (`parse_watchdog_interval` reads `WATCHDOG_USEC`).
- `parse_listen_fds(environ, pid)`: the sockets systemd passed us (fds from 3,
  `LISTEN_FDS` of them, only when `LISTEN_PID` is our pid).

The parse functions are pure (environment and pid passed in); only
`sd_notify` and `run_watchdog` do IO.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import trio

log = logging.getLogger("runnerd.systemd")

# sd_listen_fds(3): passed sockets start right after stdin/stdout/stderr.
LISTEN_FDS_START = 3
LISTEN_ENV_KEYS = ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")


def parse_notify_address(environ: Mapping[str, str]) -> str | None:
    """The datagram address to notify, or None when not run under systemd.

    A leading `@` names an abstract socket (Linux), written with a NUL byte.
    """
    addr = environ.get("NOTIFY_SOCKET", "")
    if not addr:
        return None
    if addr[0] == "@":
        return "\0" + addr[1:]
    return addr


async def sd_notify(*states: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send `states` (e.g. "READY=1", "STATUS=serving") as one notification.

    Returns False when `NOTIFY_SOCKET` is unset. Never raises: a service
    manager that went away must not take the daemon down, so a send error is
    logged and reported as False.
    """
    addr = parse_notify_address(os.environ if environ is None else environ)
    if addr is None:
        return False
    try:
        with trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_DGRAM) as sock:
            await sock.connect(addr)
            await sock.send("\n".join(states).encode())
    except OSError as exc:
        log.warning("sd_notify failed", extra={"states": ",".join(states), "error": str(exc)})
        return False
    return True


def parse_watchdog_interval(environ: Mapping[str, str], pid: int) -> float | None:
    """Seconds between `WATCHDOG=1` pings (half of `WATCHDOG_USEC`), or None.

    None when the watchdog is off, malformed, or meant for another process
    (`WATCHDOG_PID` set and not `pid`).
    """
    usec = environ.get("WATCHDOG_USEC", "")
    target = environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) <= 0:
        return None
    if target and target != str(pid):
        return None
    return int(usec) / 1e6 / 2


async def run_watchdog(interval_s: float) -> None:
    """Ping the watchdog every `interval_s` until cancelled.

    The ping comes from the event loop itself, so a wedged loop (the failure
    the watchdog exists for) stops the pings and systemd restarts us.
    """
    while True:
        await sd_notify("WATCHDOG=1")
        await trio.sleep(interval_s)


def parse_listen_fds(environ: Mapping[str, str], pid: int) -> tuple[int, ...]:
    """File descriptors passed by socket activation, or () when there are none.

    Honoured only when `LISTEN_PID` names this process: an inherited
    environment from a parent that was socket-activated must not make us
    adopt fds that are not sockets meant for us.
    """
    count = environ.get("LISTEN_FDS", "")
    if environ.get("LISTEN_PID", "") != str(pid) or not count.isdigit():
        return ()
    return tuple(range(LISTEN_FDS_START, LISTEN_FDS_START + int(count)))
