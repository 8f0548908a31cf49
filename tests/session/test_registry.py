"""Unit tests for runnerd.session.registry: rings, records and the registry. Pure, no IO."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest

from runnerd.contract import (
    RunEvent,
    exited,
    failed,
    progress_event,
    reachability_event,
    running,
    status_event,
    stopped,
)
from runnerd.session.registry import (
    CHUNK_BYTES,
    ByteRing,
    EventRing,
    RegistryFull,
    Resumed,
    SessionRecord,
    SessionRegistry,
    format_timestamp,
)


def _size(event: RunEvent) -> int:
    return len(json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode())


def _progress(n: int) -> RunEvent:
    return progress_event("boot", f"step {n}")


# --------------------------------------------------------------------------
# EventRing
# --------------------------------------------------------------------------


def test_event_ring_ids_start_at_one_and_grow_by_one() -> None:
    ring = EventRing(1_000_000)
    assert ring.last_id == 0
    assert [ring.append(_progress(n)) for n in range(5)] == [1, 2, 3, 4, 5]
    assert ring.last_id == 5
    replay = ring.since(0)
    assert not replay.gap
    assert [i for i, _ in replay.items] == [1, 2, 3, 4, 5]
    assert replay.items[2][1] == _progress(2)


def test_event_ring_ids_are_never_reused_after_eviction() -> None:
    one = _size(_progress(0))
    ring = EventRing(one * 3)
    ids = [ring.append(_progress(n % 10)) for n in range(100)]
    assert ids == list(range(1, 101))
    assert [i for i, _ in ring.since(0).items] == [98, 99, 100]


def test_event_ring_sizes_events_by_compact_json_length() -> None:
    event = _progress(1)
    ring = EventRing(_size(event) * 2)
    ring.append(event)
    ring.append(event)
    assert ring.total_bytes == _size(event) * 2
    assert len(ring) == 2
    ring.append(event)  # one over the cap: the oldest goes
    assert len(ring) == 2
    assert [i for i, _ in ring.since(0).items] == [2, 3]


def test_event_ring_keeps_newest_even_when_it_alone_exceeds_the_cap() -> None:
    ring = EventRing(10)
    ring.append(_progress(1))
    big: RunEvent = {"type": "stdout", "chunk": "x" * 1000}
    assert ring.append(big) == 2
    replay = ring.since(0)
    assert replay.gap
    assert replay.items == [(2, big)]


def test_event_ring_gap_exactly_at_the_eviction_boundary() -> None:
    one = _size(_progress(0))
    ring = EventRing(one * 3)
    for n in range(6):
        ring.append(_progress(n))
    # Retained 4, 5, 6; evicted 1..3.
    for after in (0, 1, 2):
        assert ring.since(after).gap, after
    for after in (3, 4, 5, 6):
        assert not ring.since(after).gap, after
    assert [i for i, _ in ring.since(2).items] == [4, 5, 6]
    assert [i for i, _ in ring.since(3).items] == [4, 5, 6]
    assert [i for i, _ in ring.since(5).items] == [6]
    assert ring.since(6).items == []


def test_event_ring_resume_point_beyond_last_answers_nothing() -> None:
    ring = EventRing(1000)
    ring.append(_progress(0))
    assert ring.since(7).items == []
    assert not ring.since(7).gap
    assert [i for i, _ in ring.since(-3).items] == [1]


def test_event_ring_property_replay_is_a_contiguous_suffix() -> None:
    rnd = random.Random(7)
    ring = EventRing(400)
    appended: list[RunEvent] = []
    for _ in range(2000):
        event: RunEvent = {"type": "stdout", "chunk": "y" * rnd.randint(0, 120)}
        appended.append(event)
        ring.append(event)
        assert ring.total_bytes <= 400 or len(ring) == 1
        after = rnd.randint(0, ring.last_id)
        replay = ring.since(after)
        ids = [i for i, _ in replay.items]
        if after == ring.last_id:
            assert ids == [] and not replay.gap
            continue
        # Everything after the resume point that is still retained, in order.
        assert ids == list(range(max(after + 1, ids[0]), ring.last_id + 1))
        assert replay.gap == (ids[0] > after + 1)
        assert all(appended[i - 1] is e for i, e in replay.items)


# --------------------------------------------------------------------------
# ByteRing
# --------------------------------------------------------------------------


def test_byte_ring_seqs_start_at_one_one_per_append() -> None:
    ring = ByteRing(1000)
    assert ring.last_seq == 0
    assert ring.append(b"a") == 1
    assert ring.append(b"bc") == 2
    assert ring.append(b"") == 2  # nothing to send, no seq spent
    assert ring.since(0).items == [(1, b"a"), (2, b"bc")]


def test_byte_ring_splits_writes_into_64k_chunks_with_own_seqs() -> None:
    ring = ByteRing(10 * CHUNK_BYTES)
    data = bytes(range(256)) * ((2 * CHUNK_BYTES + 100) // 256 + 1)
    data = data[: 2 * CHUNK_BYTES + 100]
    assert ring.append(data) == 3
    items = ring.since(0).items
    assert [s for s, _ in items] == [1, 2, 3]
    assert [len(c) for _, c in items] == [CHUNK_BYTES, CHUNK_BYTES, 100]
    assert b"".join(c for _, c in items) == data
    assert ring.append(bytearray(CHUNK_BYTES)) == 4  # exactly 64 KiB: one chunk


def test_byte_ring_eviction_keeps_newest_and_reports_gap() -> None:
    ring = ByteRing(10)
    ring.append(b"12345")
    ring.append(b"67890")
    ring.append(b"abc")  # 13 bytes > 10: seq 1 goes
    assert ring.total_bytes == 8
    replay = ring.since(0)
    assert replay.gap
    assert replay.items == [(2, b"67890"), (3, b"abc")]
    assert not ring.since(1).gap
    ring.append(b"x" * 50)  # alone over the cap: kept, everything else goes
    assert ring.since(3).items == [(4, b"x" * 50)]
    assert not ring.since(3).gap
    assert ring.since(2).gap


def test_byte_ring_many_small_writes_stay_bounded_and_ordered() -> None:
    ring = ByteRing(1000)
    for n in range(50_000):
        ring.append(bytes([n % 256]))
    assert ring.total_bytes == 1000
    assert ring.last_seq == 50_000
    tail = ring.since(49_990).items
    assert [s for s, _ in tail] == list(range(49_991, 50_001))
    assert [c for _, c in tail] == [bytes([s - 1 & 0xFF]) for s, _ in tail]


def test_rings_reject_a_negative_cap() -> None:
    with pytest.raises(ValueError, match="cap_bytes"):
        ByteRing(-1)


# --------------------------------------------------------------------------
# SessionRecord
# --------------------------------------------------------------------------


def test_record_starts_starting_with_that_status_as_event_one() -> None:
    record = SessionRecord("abcdefghijkl", 1_800_000_000.5, 1000)
    assert record.status == {"kind": "starting"}
    assert record.events.since(0).items == [(1, status_event({"kind": "starting"}))]
    assert record.created_at_iso == "2027-01-15T08:00:00.500Z"
    assert record.exited_at is None and record.exited_at_iso is None


def test_format_timestamp_is_iso_utc_with_millis() -> None:
    assert format_timestamp(0.0) == "1970-01-01T00:00:00.000Z"
    assert format_timestamp(1.2345) == "1970-01-01T00:00:01.234Z"


def test_record_terminal_status_is_sticky() -> None:
    record = SessionRecord("s", 100.0, 10_000)
    assert record.set_status(running(), 101.0)
    assert record.set_status(exited(3), 102.0)
    last_id = record.events.last_id
    assert not record.set_status(failed("late"), 103.0)
    assert not record.set_status(stopped(), 104.0)
    assert record.emit(reachability_event(80, "reachable")) is None
    assert record.output(b"late bytes") is None
    assert record.status == {"kind": "exited", "code": 3}
    assert record.exited_at == 102.0
    assert record.events.last_id == last_id
    kinds = [e["status"]["kind"] for _, e in record.events.since(0).items if e["type"] == "status"]
    assert kinds == ["starting", "running", "exited"]
    assert record.pty.last_seq == 0


def test_record_rejects_status_events_through_emit() -> None:
    record = SessionRecord("s", 0.0, 10_000)
    with pytest.raises(ValueError, match="set_status"):
        record.emit(status_event(running()))


# --------------------------------------------------------------------------
# SessionRegistry
# --------------------------------------------------------------------------


def _record(session_id: str, now: float = 0.0) -> SessionRecord:
    return SessionRecord(session_id, now, 10_000)


def _terminal(session_id: str, exited_at: float) -> SessionRecord:
    record = _record(session_id)
    record.set_status(exited(0), exited_at)
    return record


def test_registry_full_of_live_sessions_refuses_and_changes_nothing() -> None:
    registry = SessionRegistry(max_sessions=2, exit_ttl_s=60)
    registry.add(_record("a"), 0)
    registry.add(_record("b"), 0)
    with pytest.raises(RegistryFull, match="2 session slots"):
        registry.add(_record("c"), 0)
    assert sorted(r.id for r in registry) == ["a", "b"]
    assert registry.live_count == 2


def test_registry_at_capacity_evicts_the_oldest_exit_first() -> None:
    registry = SessionRegistry(max_sessions=3, exit_ttl_s=3600)
    registry.add(_terminal("late", exited_at=50), 0)
    registry.add(_terminal("early", exited_at=10), 0)
    registry.add(_record("live"), 0)
    assert registry.add(_record("new1"), 60) == ["early"]
    assert registry.add(_record("new2"), 61) == ["late"]
    with pytest.raises(RegistryFull):
        registry.add(_record("new3"), 62)
    assert sorted(r.id for r in registry) == ["live", "new1", "new2"]


def test_registry_shrunk_capacity_evicts_enough_or_refuses_untouched() -> None:
    registry = SessionRegistry(max_sessions=4, exit_ttl_s=3600)
    for n in range(3):
        registry.add(_terminal(f"t{n}", exited_at=n), 0)
    registry.add(_record("live"), 0)
    registry.reconfigure(max_sessions=2)
    assert registry.add(_record("new"), 5) == ["t0", "t1", "t2"]
    with pytest.raises(RegistryFull):
        registry.add(_record("again"), 6)
    assert len(registry) == 2


def test_registry_rejects_a_duplicate_id() -> None:
    registry = SessionRegistry(max_sessions=4, exit_ttl_s=1)
    registry.add(_record("a"), 0)
    with pytest.raises(ValueError, match="already registered"):
        registry.add(_record("a"), 0)


def test_registry_expires_terminal_sessions_after_exit_ttl() -> None:
    registry = SessionRegistry(max_sessions=10, exit_ttl_s=100)
    registry.add(_terminal("old", exited_at=1000), 0)
    registry.add(_terminal("young", exited_at=1050), 0)
    registry.add(_record("live", now=0), 0)
    assert registry.next_expiry() == 1100
    assert registry.expire(1099.9) == []
    assert registry.expire(1100) == ["old"]
    assert registry.next_expiry() == 1150
    assert registry.expire(10_000) == ["young"]
    assert [r.id for r in registry] == ["live"]  # live sessions never expire
    assert registry.next_expiry() is None


def test_registry_get_remove_and_membership() -> None:
    registry = SessionRegistry(max_sessions=2, exit_ttl_s=1)
    record = _record("a")
    registry.add(record, 0)
    assert registry.get("a") is record and "a" in registry
    assert registry.remove("a") is record
    assert registry.get("a") is None and registry.remove("a") is None


def test_registry_property_never_exceeds_capacity() -> None:
    rnd = random.Random(3)
    registry = SessionRegistry(max_sessions=5, exit_ttl_s=30)
    now = 0.0
    for n in range(3000):
        now += rnd.random() * 3
        registry.expire(now)
        live = [r for r in registry if not r.is_terminal]
        if live and rnd.random() < 0.5:
            rnd.choice(live).set_status(exited(0), now)
        try:
            registry.add(_record(f"s{n}", now), now)
        except RegistryFull:
            assert registry.live_count == 5
        assert len(registry) <= 5
        assert all(now - r.exited_at < 30 for r in registry if r.exited_at is not None)


# --------------------------------------------------------------------------
# Rings above a floor (a session a previous daemon ran)
# --------------------------------------------------------------------------


def test_ring_floor_continues_above_it_and_counts_everything_below_as_evicted() -> None:
    ring = EventRing(10_000, floor=1024)
    assert ring.since(0).gap and ring.since(1023).gap
    # Empty above its floor: a reader told of the gap continues from the floor.
    assert ring.since(0).evicted_to == 1024 and not ring.since(0).items
    assert ring.since(1024) == ring.since(5000) == ring.since(0).__class__(False, [], 1024)
    assert ring.append(_progress(1)) == 1025
    replay = ring.since(17)
    assert replay.gap and [i for i, _ in replay.items] == [1025]
    assert ring.since(1024) == type(replay)(False, [(1025, _progress(1))], 1024)
    pty = ByteRing(10 * CHUNK_BYTES, floor=7)
    assert pty.append(b"x" * (CHUNK_BYTES + 1)) == 9
    assert ByteRing.chunks_for(CHUNK_BYTES + 1) == 2 and ByteRing.chunks_for(1) == 1
    assert pty.since(0).gap and [i for i, _ in pty.since(0).items] == [8, 9]
    with pytest.raises(ValueError):
        EventRing(10, floor=-1)


def test_ring_retained_and_first_name_what_is_replayable() -> None:
    ring = ByteRing(4)
    for data in (b"ab", b"cd", b"ef"):
        ring.append(data)
    assert ring.first == 2 and ring.retained() == [b"cd", b"ef"]
    assert ByteRing(4, floor=5).first == 6


class CountingReserver:
    def __init__(self) -> None:
        self.claims: list[tuple[int, int]] = []
        self.covered: tuple[int, int] | None = None
        self.on_covered: Callable[[], None] = lambda: None

    def claim(self, last_event_id: int, last_seq: int) -> None:
        self.claims.append((last_event_id, last_seq))


def test_record_holds_back_what_its_reserver_does_not_cover_yet() -> None:
    reserver = CountingReserver()
    reserver.covered = (0, 2)  # nothing of the events yet, two seqs
    record = SessionRecord("s", 0.0, 10_000_000, reserver=reserver)
    published: list[int] = []
    record.on_publish = lambda: published.append(record.pty.published)
    for data in (b"a", b"b", b"c"):
        record.output(data)
    record.pty.mark_lost()  # after seq 3: held back with it
    assert record.events.since(0).items == [] and record.holding
    replay = record.pty.since(0)
    assert [c for _, c in replay.items] == [b"a", b"b"] and replay.lost == ()
    assert record.pty.published == 2 and record.pty.last_seq == 3
    reserver.covered = None  # the reservation landed: everything is covered
    reserver.on_covered()
    assert published == [3] and not record.holding
    assert [c for _, c in record.pty.since(2).items] == [b"c"]
    assert len(record.pty.since(2).lost) == 1
    assert record.events.since(0).items == [(1, status_event(record.status))]


def test_record_claims_every_id_before_it_is_issued() -> None:
    reserver = CountingReserver()
    record = SessionRecord("s", 0.0, 10_000_000, reserver=reserver)
    assert reserver.claims == [(1, 0)]  # `starting`, event 1
    record.output(b"x" * (2 * CHUNK_BYTES + 1))
    assert reserver.claims[-1] == (1, 3) and record.pty.last_seq == 3
    record.emit(_progress(1))
    record.set_status(running(), 1.0)
    assert reserver.claims[-2:] == [(2, 3), (3, 3)] and record.events.last_id == 3


def test_resumed_record_replays_what_was_saved_and_emits_no_starting() -> None:
    saved = Resumed(40, 9, (status_event(running()), _progress(1)), (b"old",))
    reserver = CountingReserver()
    record = SessionRecord("s", 5.0, 10_000, reserver=reserver, resumed=saved)
    assert reserver.claims == []  # the restored ids were the previous daemon's
    assert record.events.since(40).items == [(41, status_event(running())), (42, _progress(1))]
    assert record.events.since(40).gap is False and record.events.since(39).gap is True
    assert record.pty.since(9).items == [(10, b"old")]
    record.resume_status(running())
    assert record.status == running() and record.events.last_id == 42
    assert record.set_status(exited(0), 6.0)
    assert record.events.last_id == 43 and reserver.claims == [(43, 10)]
