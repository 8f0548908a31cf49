"""Unit tests for the PTY ring's lost-output marks (runnerd.session.rings). Pure, no IO."""

from __future__ import annotations

import random

from runnerd.contract import exited
from runnerd.session.registry import ByteRing, Lost, Replay, SessionRecord


def _flat(replay: Replay[bytes]) -> list[object]:
    """A replay as a reader sends it: seqs for chunks, ("lost", n) for marks."""
    return [
        ("lost", entry.mark) if isinstance(entry, Lost) else entry[0] for entry in replay.in_order()
    ]


def test_a_reader_from_before_the_mark_gets_bytes_then_the_mark_then_later_bytes() -> None:
    ring = ByteRing(1000)
    ring.append(b"one")
    ring.append(b"two")
    assert ring.mark_lost() == 1
    ring.append(b"three")
    assert _flat(ring.since(0)) == [1, 2, ("lost", 1), 3]
    assert _flat(ring.since(2)) == [("lost", 1), 3]  # its place is seq 2: still ahead
    assert _flat(ring.since(3)) == []  # past it
    assert ring.last_seq == 3  # a mark takes no seq


def test_a_reader_told_of_a_mark_is_not_told_again() -> None:
    ring = ByteRing(1000)
    ring.append(b"a")
    ring.mark_lost()
    assert _flat(ring.since(1)) == [("lost", 1)]  # a live reader at the place gets it
    assert _flat(ring.since(1, after_mark=1)) == []
    ring.append(b"b")
    assert _flat(ring.since(1, after_mark=1)) == [2]


def test_marks_at_one_place_merge_into_the_newest() -> None:
    ring = ByteRing(1000)
    ring.append(b"a")
    ring.mark_lost()
    ring.mark_lost()
    assert ring.since(0).lost == (Lost(1, 2),)
    assert ring.since(1, after_mark=1).lost == (Lost(1, 2),)  # a second loss is told too
    assert ring.last_mark == 2


def test_a_mark_before_any_output_comes_first() -> None:
    ring = ByteRing(1000)
    ring.mark_lost()
    ring.append(b"a")
    assert _flat(ring.since(0)) == [("lost", 1), 1]


def test_a_mark_at_the_evicted_frontier_survives_one_deeper_goes() -> None:
    ring = ByteRing(10)
    ring.append(b"12345")  # seq 1
    ring.mark_lost()  # after 1
    ring.append(b"67890")  # seq 2
    ring.mark_lost()  # after 2
    ring.append(b"abc")  # seq 3: seq 1 is evicted; the frontier is 1
    replay = ring.since(0)
    assert replay.gap and replay.evicted_to == 1
    assert _flat(replay) == [("lost", 1), 2, ("lost", 2), 3]
    ring.append(b"defgh")  # seq 4: seq 2 goes; the mark after 1 is inside the evicted part
    assert _flat(ring.since(0)) == [("lost", 2), 3, 4]


def test_a_record_marks_nothing_once_terminal() -> None:
    record = SessionRecord("s", 0.0, 1000)
    record.output(b"x")
    assert record.output_lost() == 1
    record.set_status(exited(0), 1.0)
    assert record.output_lost() is None
    assert record.pty.since(0).lost == (Lost(1, 1),)


def test_property_every_reader_sees_each_retained_mark_once_in_place() -> None:
    rnd = random.Random(17)
    ring = ByteRing(300)
    places: dict[int, int] = {}  # mark number -> its place
    for _ in range(3000):
        if rnd.random() < 0.2:
            places[ring.mark_lost()] = ring.last_seq
        else:
            ring.append(b"z" * rnd.randint(1, 60))
        assert len(ring.since(0).lost) <= len(ring) + 1
        after = rnd.randint(0, ring.last_seq)
        replay = ring.since(after)
        seqs = [s for s, _ in replay.items]
        assert seqs == list(range(max(after, replay.evicted_to) + 1, ring.last_seq + 1))
        frontier = max(after, replay.evicted_to)
        for mark in replay.lost:
            assert places[mark.mark] == mark.after_seq >= frontier
        # The newest mark at each retained place, and nothing else.
        newest: dict[int, int] = {}
        for number, place in places.items():
            if place >= frontier:
                newest[place] = max(newest.get(place, 0), number)
        assert sorted(m.mark for m in replay.lost) == sorted(newest.values())
        # In order: each mark right after the chunk at its place.
        flat = replay.in_order()
        for i, entry in enumerate(flat):
            if isinstance(entry, Lost) and i > 0 and not isinstance(flat[i - 1], Lost):
                previous = flat[i - 1]
                assert isinstance(previous, tuple) and previous[0] == entry.after_seq
        # A reader that was told of every mark is not told again.
        assert ring.since(after, ring.last_mark).lost == ()
