"""runnerd.session.reader: one stream reader over a ring, on a fake clock.

Real rings (`EventRing`, `ByteRing`); the wake-up is `Changes` as a
`Session` keeps it (each change wakes every parked reader; a terminal one
returns at once). Time is `MockClock(autojump_threshold=0)`: a heartbeat
test takes no real time.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from runnerd.contract import exited, progress_event
from runnerd.session.reader import (
    EVICTED,
    HEARTBEAT,
    LOST,
    Items,
    Part,
    StreamReader,
    open_reader,
)
from runnerd.session.rings import ByteRing, EventRing


@pytest.fixture
def autojump(mock_clock: trio.testing.MockClock) -> trio.testing.MockClock:
    """The test's clock (pytest-trio runs a test on the clock it is given)."""
    mock_clock.autojump_threshold = 0
    return mock_clock


class Wakes:
    """The `Changes` a `Session` is: every change wakes every parked reader."""

    def __init__(self, *rings: EventRing | ByteRing) -> None:
        self.is_terminal = False
        self._rings = rings
        self._changed = trio.Event()

    async def wait_change(self) -> None:
        if self.is_terminal and not any(ring.holding for ring in self._rings):
            await trio.lowlevel.checkpoint()
            return
        await self._changed.wait()

    def notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()


def event(n: int) -> Any:
    return progress_event("boot", str(n))


def ids(part: Part[Any] | None) -> list[int]:
    assert isinstance(part, Items), part
    return [i for i, _ in part.entries]


async def test_reader_replays_from_the_cursor_then_ends_on_terminal(
    autojump: trio.testing.MockClock,
) -> None:
    ring, wakes = EventRing(10_000), Wakes()
    for n in range(5):
        ring.append(event(n))
    wakes.is_terminal = True
    reader = StreamReader(ring, wakes, cursor=2)
    assert ids(await reader.next()) == [3, 4, 5]
    assert await reader.next() is None
    assert reader.finished and reader.cursor == 5


async def test_reader_tells_an_eviction_once_then_continues_past_it(
    autojump: trio.testing.MockClock,
) -> None:
    ring, wakes = EventRing(1), Wakes()  # keeps only the newest event
    for n in range(4):
        ring.append(event(n))
    reader = StreamReader(ring, wakes, cursor=1)
    assert await reader.next() is EVICTED
    assert ids(await reader.next()) == [4]
    ring.append(event(4))
    ring.append(event(5))  # 5 evicted before the reader reads again
    wakes.notify()
    assert [await reader.next(), ids(await reader.next())] == [EVICTED, [6]]


async def test_reader_of_a_ring_above_a_floor_is_told_once_and_waits(
    autojump: trio.testing.MockClock,
) -> None:
    ring, wakes = ByteRing(10_000, floor=100), Wakes()
    reader = StreamReader(ring, wakes, cursor=0)
    assert await reader.next() is EVICTED
    assert reader.cursor == 100
    with trio.move_on_after(60) as waited:
        await reader.next()  # nothing more: no second gap, it waits
    assert waited.cancelled_caught


async def test_reader_puts_each_lost_output_mark_in_its_place_once(
    autojump: trio.testing.MockClock,
) -> None:
    ring, wakes = ByteRing(10_000), Wakes()
    ring.append(b"one")
    ring.mark_lost()
    ring.append(b"two")
    reader = StreamReader(ring, wakes)
    assert ids(await reader.next()) == [1]
    assert await reader.next() is LOST
    assert ids(await reader.next()) == [2]
    ring.mark_lost()  # after the newest seq: a mark with no chunk after it yet
    wakes.notify()
    assert await reader.next() is LOST
    ring.append(b"three")
    wakes.notify()
    assert ids(await reader.next()) == [3]  # the mark is not told twice


async def test_reader_heartbeats_only_after_a_quiet_interval(
    autojump: trio.testing.MockClock,
) -> None:
    ring, wakes = EventRing(10_000), Wakes()
    reader = StreamReader(ring, wakes, heartbeat_s=20.0)
    t0 = trio.current_time()
    assert await reader.next() is HEARTBEAT
    assert trio.current_time() - t0 == pytest.approx(20.0)
    assert await reader.next() is HEARTBEAT
    assert trio.current_time() - t0 == pytest.approx(40.0)

    async def append_at(delay_s: float) -> None:
        await trio.sleep(delay_s)
        ring.append(event(1))
        wakes.notify()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(append_at, 15.0)
        assert ids(await reader.next()) == [1]
    assert trio.current_time() - t0 == pytest.approx(55.0)
    # A wake with nothing for this ring (another ring's change) does not
    # postpone the heartbeat: it counts from the last part handed out.
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_notify_after, wakes, 10.0)
        assert await reader.next() is HEARTBEAT
    assert trio.current_time() - t0 == pytest.approx(75.0)


async def _notify_after(wakes: Wakes, delay_s: float) -> None:
    await trio.sleep(delay_s)
    wakes.notify()


async def test_reader_delivers_the_terminal_status_then_ends(
    autojump: trio.testing.MockClock,
) -> None:
    ring, wakes = EventRing(10_000), Wakes()
    reader = StreamReader(ring, wakes)

    async def end_session() -> None:
        await trio.sleep(5.0)
        ring.append(event(1))
        ring.append({"type": "status", "status": exited(0)})
        wakes.is_terminal = True
        wakes.notify()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(end_session)
        assert ids(await reader.next()) == [1, 2]
        assert await reader.next() is None
    assert reader.finished


async def test_reader_of_a_terminal_session_waits_for_what_is_held_back(
    autojump: trio.testing.MockClock,
) -> None:
    ring = EventRing(10_000)
    wakes = Wakes(ring)
    ring.append(event(0))
    ring.append({"type": "status", "status": exited(0)})
    ring.limit = 1  # the terminal status' id is not reserved on disk yet
    wakes.is_terminal = True
    reader = StreamReader(ring, wakes)
    assert ids(await reader.next()) == [1]

    async def reserved() -> None:
        await trio.sleep(1.0)
        ring.limit = None
        wakes.notify()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reserved)
        assert ids(await reader.next()) == [2]
        assert await reader.next() is None
    assert reader.finished


async def test_reader_never_loses_a_change_made_between_its_read_and_its_wait(
    autojump: trio.testing.MockClock,
) -> None:
    ring, wakes = ByteRing(1 << 20), Wakes()
    count = 200
    seen = [trio.Event() for _ in range(count)]
    got: list[int] = []

    async def produce() -> None:
        for n in range(count):
            # The reader has caught up and is on its way to park: land the
            # change at a different point of that way each round.
            for _ in range(n % 5):
                await trio.lowlevel.checkpoint()
            ring.append(b"x")
            wakes.notify()
            await seen[n].wait()  # a lost wake-up hangs here: fail_after says so
        wakes.is_terminal = True
        wakes.notify()

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            reader = StreamReader(ring, wakes)
            nursery.start_soon(produce)
            async for part in reader:
                for seq in ids(part):
                    got.append(seq)
                    seen[seq - 1].set()
    assert got == list(range(1, count + 1))


async def test_reader_waits_without_a_task_or_nursery_per_wait(
    autojump: trio.testing.MockClock,
) -> None:
    spawned: list[trio.lowlevel.Task] = []

    class Spawns(trio.abc.Instrument):
        def task_spawned(self, task: trio.lowlevel.Task) -> None:
            spawned.append(task)

    ring, wakes = EventRing(10_000), Wakes()
    reader = StreamReader(ring, wakes, heartbeat_s=1.0)
    trio.lowlevel.add_instrument(Spawns())
    for _ in range(50):
        assert await reader.next() is HEARTBEAT
    assert spawned == []


async def test_open_reader_ends_a_parked_reader_when_the_daemon_closes(
    autojump: trio.testing.MockClock,
) -> None:
    ring, wakes, closing = EventRing(10_000), Wakes(), trio.Event()
    ring.append(event(0))
    t0 = trio.current_time()

    async def close_at(delay_s: float) -> None:
        await trio.sleep(delay_s)
        closing.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(close_at, 3.0)
        async with open_reader(ring, wakes, 0, closing) as reader:
            parts = [part async for part in reader]
    assert [ids(p) for p in parts] == [[1]]
    assert not reader.finished and trio.current_time() - t0 == pytest.approx(3.0)
    # Already closing: nothing is read at all.
    async with open_reader(ring, wakes, 0, closing) as reader:
        assert await reader.next() is None


async def test_open_reader_hands_back_the_blocks_error_unwrapped(
    autojump: trio.testing.MockClock,
) -> None:
    ring, wakes, closing = EventRing(10_000), Wakes(), trio.Event()
    with pytest.raises(KeyError):
        async with open_reader(ring, wakes, 0, closing):
            raise KeyError("the caller's")


async def test_reader_stopped_hands_out_what_its_last_read_found_then_ends(
    autojump: trio.testing.MockClock,
) -> None:
    ring, wakes = EventRing(1), Wakes()
    ring.append(event(0))
    ring.append(event(1))
    reader = StreamReader(ring, wakes)
    assert await reader.next() is EVICTED  # the read also found event 2
    reader.stop()
    assert ids(await reader.next()) == [2]
    assert await reader.next() is None and not reader.finished
