"""watch_reachability against real loopback sockets; timing on a MockClock."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio
import trio.testing

from runnerd.workload.reachability import watch_reachability


@contextmanager
def closed_port() -> Iterator[tuple[int, socket.socket]]:
    """A loopback port that refuses connections until `.listen()` is called on
    the returned socket (bound meanwhile, so nobody else takes it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1], sock


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[float, int, str]] = []
        self.changed = trio.lowlevel.ParkingLot()

    def __call__(self, port: int, state: str) -> None:
        self.calls.append((trio.current_time(), port, state))
        self.changed.unpark_all()

    def states(self, port: int) -> list[str]:
        return [state for _, p, state in self.calls if p == port]

    def time_of(self, port: int, state: str) -> float:
        return next(t for t, p, s in self.calls if p == port and s == state)

    async def wait_state(self, port: int, state: str) -> None:
        while state not in self.states(port):
            await self.changed.park()


async def test_live_port_is_checking_then_reachable() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    record = Recorder()
    try:
        with trio.fail_after(5):
            await watch_reachability("127.0.0.1", [port], record)
    finally:
        await trio.aclose_forcefully(listeners[0])
    assert record.states(port) == ["checking", "reachable"]


async def test_refused_port_turns_unreachable_after_timeout(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0
    record = Recorder()
    with closed_port() as (port, _):
        with trio.move_on_after(100):
            await watch_reachability(
                "127.0.0.1", [port], record, timeout_s=30, interval_s=1, recheck_interval_s=5
            )
    assert record.states(port) == ["checking", "unreachable"]
    assert record.time_of(port, "checking") == 0
    # Polled every second: noticed at the first attempt at or past 30 s.
    assert 30 <= record.time_of(port, "unreachable") <= 32


async def test_unreachable_port_flips_back_when_it_recovers(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0
    record = Recorder()
    with closed_port() as (port, sock):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: watch_reachability(
                    "127.0.0.1", [port], record, timeout_s=10, interval_s=1, recheck_interval_s=5
                )
            )
            await record.wait_state(port, "unreachable")
            recovered_at = trio.current_time() + 7
            await trio.sleep_until(recovered_at)
            sock.listen()
            await record.wait_state(port, "reachable")
    assert record.states(port) == ["checking", "unreachable", "reachable"]
    # Re-checks run every 5 s after `unreachable`: caught within one period.
    assert recovered_at <= record.time_of(port, "reachable") <= recovered_at + 5


async def test_each_port_is_watched_and_the_watch_ends_when_all_are_reachable() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    live = listeners[0].socket.getsockname()[1]
    record = Recorder()
    with closed_port() as (late, sock):
        try:
            with trio.fail_after(5):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(
                        lambda: watch_reachability(
                            "127.0.0.1", [live, late, live], record, interval_s=0.01
                        )
                    )
                    await record.wait_state(live, "reachable")
                    assert record.states(late) == ["checking"]
                    sock.listen()
                    await record.wait_state(late, "reachable")
        finally:
            await trio.aclose_forcefully(listeners[0])
    assert record.states(live) == ["checking", "reachable"]
    assert record.states(late) == ["checking", "reachable"]


@pytest.mark.parametrize("ports", [[], [1]])
async def test_watch_is_cancellable_and_empty_watch_returns(ports: list[int]) -> None:
    record = Recorder()
    with trio.fail_after(5):
        with trio.move_on_after(0.05) as scope:
            await watch_reachability("127.0.0.1", ports, record, interval_s=0.01)
    assert scope.cancelled_caught == bool(ports)
