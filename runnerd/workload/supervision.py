"""The core's watch over one running app of a workload: reachability and debug.

Owns `supervise`: for one `WorkloadAddress` (what a backend's `Started`
says), a reachability probe per declared tcp port (`reachability`) and, when
the address has a debug server, the debug relay (`debug_relay`), reporting to
a `Report`. The session machinery starts it in the workload's nursery once
the workload has started, so nothing of it outlives the run; a session with
several apps runs it once per app. No backend starts either watcher.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import trio

from runnerd.backend import WorkloadAddress
from runnerd.contract import PortMapping, Reachability
from runnerd.workload.reachability import watch_reachability


class Report(Protocol):
    """Where the watchers of one app report. Both methods are synchronous,
    never block and never raise (as the `Sink`'s)."""

    def reachability(self, port: int, state: Reachability) -> None: ...

    def debug(self, frame: dict[str, Any]) -> None:
        """A debug frame, as the workload's debug server sent it (choosing
        event frames over log frames is the report's job)."""


def tcp_ports(ports: Iterable[PortMapping]) -> list[int]:
    """The declared tcp ports reachability probes, each once, in order."""
    return list(dict.fromkeys(p.port for p in ports if p.protocol == "tcp"))


async def supervise(address: WorkloadAddress, ports: Sequence[int], report: Report) -> None:
    """Watch one app at `address` until cancelled: each of `ports` probed
    through `address.dial` (`watch_reachability`), and the debug stream at
    `address.inspect_url` relayed frame by frame when it has one.

    Runs until cancelled when there is a debug server (the relay retries
    for as long as the workload runs); otherwise returns once every port has
    been reachable. Cancellation stops every watcher at once and leaves no
    socket open; nothing is raised but `Cancelled`.
    """
    async with trio.open_nursery() as nursery:
        if ports:
            dial = address.dial or trio.open_tcp_stream
            watch = functools.partial(watch_reachability, dial=dial)
            nursery.start_soon(watch, address.host, ports, report.reachability)
        url = address.inspect_url
        if url is not None:
            # Imported here: the relay pulls in httpx, which only inspect
            # sessions need, and the daemon's start-up time is a target.
            from runnerd.workload.debug_relay import relay_debug_stream

            nursery.start_soon(relay_debug_stream, f"{url}/events", report.debug)
