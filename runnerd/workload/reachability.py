"""Is each declared TCP port of a workload reachable from the runner?

Owns the per-port reachability watch: `checking` at once, `reachable` the
moment a TCP connect succeeds, `unreachable` once `timeout_s` has passed
without one, then slower re-checks that flip it back to `reachable` when the
port recovers. That catches a workload bound to the wrong address or port, or
one crash-looping, which a client would otherwise only see as an opaque
connection error; a slow but correct start corrects itself.

Backend-neutral: the caller says where to dial and where states go.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import trio

from runnerd.backend import Dial
from runnerd.contract import Reachability

OnState = Callable[[int, Reachability], None]


async def watch_reachability(
    host: str,
    ports: Sequence[int],
    on_state: OnState,
    *,
    timeout_s: float = 30.0,
    interval_s: float = 1.0,
    recheck_interval_s: float = 5.0,
    connect_timeout_s: float = 1.0,
    dial: Dial = trio.open_tcp_stream,
) -> None:
    """Watch every port in `ports` concurrently, reporting each transition.

    Returns once every port has been `reachable`; runs until cancelled
    otherwise. `on_state` must not block or raise. Cancellation stops every
    probe at once and leaves no socket open. `dial` makes each probe's
    connection (a local session's goes into its network namespace).
    """
    async with trio.open_nursery() as nursery:
        for port in dict.fromkeys(ports):  # a port declared twice is watched once
            nursery.start_soon(
                _watch_port,
                host,
                port,
                on_state,
                timeout_s,
                interval_s,
                recheck_interval_s,
                connect_timeout_s,
                dial,
            )


async def _watch_port(
    host: str,
    port: int,
    on_state: OnState,
    timeout_s: float,
    interval_s: float,
    recheck_interval_s: float,
    connect_timeout_s: float,
    dial: Dial,
) -> None:
    on_state(port, "checking")
    deadline = trio.current_time() + timeout_s
    reported_unreachable = False
    while True:
        if await _can_connect(host, port, connect_timeout_s, dial):
            on_state(port, "reachable")
            return
        if not reported_unreachable and trio.current_time() >= deadline:
            reported_unreachable = True
            on_state(port, "unreachable")
        await trio.sleep(recheck_interval_s if reported_unreachable else interval_s)


async def _can_connect(host: str, port: int, connect_timeout_s: float, dial: Dial) -> bool:
    """One TCP connect attempt: True when it completes. Never raises (except
    Cancelled)."""
    with trio.move_on_after(connect_timeout_s):
        try:
            stream = await dial(host, port)
        except OSError:
            return False
        await stream.aclose()
        return True
    return False
