"""runnerd.session.statefile: what a successor daemon reads to continue replay.
Real files in a temp dir; no daemon."""

from __future__ import annotations

import random
import stat
from pathlib import Path

import pytest

from runnerd.contract import progress_event, running, status_event
from runnerd.session.registry import CHUNK_BYTES, Resumed, SessionRecord
from runnerd.session.statefile import (
    BLOCK,
    UNKNOWN_FLOOR,
    StateDir,
    decode,
    encode,
    replay_of,
)
from runnerd.session.statewriter import StateWriter


def test_statefile_round_trips_floors_events_and_binary_chunks() -> None:
    saved = Resumed(3, 7, (status_event(running()),), (b"\x00\xffbin", b"x"))
    back = decode(encode("abc", saved))
    assert back.session_id == "abc" and back.resumed == saved


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"[]",
        b'{"format": 2}',
        b'{"format":1,"session_id":"a","events":[],"chunks":[]}',
        b'{"format":1,"session_id":"a","event_floor":-1,"seq_floor":0,"events":[],"chunks":[]}',
        b'{"format":1,"session_id":"a","event_floor":0,"seq_floor":0,"events":[1],"chunks":[]}',
        b'{"format":1,"session_id":"a","event_floor":0,"seq_floor":0,"events":[],"chunks":["!"]}',
        b'{"format":1,"session_id":"a","event_floor":0,"seq_floor":0,"events":[],"chunks":[],'
        b'"lost":[1]}',
        b'{"format":1,"session_id":"a","event_floor":0,"seq_floor":5,"events":[],"chunks":[],'
        b'"lost":[4]}',
        b'{"format":1,"session_id":"a","event_floor":0,"seq_floor":0,"events":[],"chunks":[],'
        b'"lost":{}}',
    ],
)
def test_statefile_garbled_files_are_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode(raw)


def test_statefile_dir_and_files_are_private(tmp_path: Path) -> None:
    state = StateDir.open(tmp_path / "state")
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert state.write("sess1", Resumed(1, 2))
    assert stat.S_IMODE((tmp_path / "state" / "sess1.json").stat().st_mode) == 0o600
    assert state.session_ids() == ["sess1"]
    # A session id never names a path outside the directory.
    assert not state.write("../evil", Resumed(1, 2))
    assert state.load("../evil") is None


def test_statefile_reserver_rewrites_once_per_block_ahead_of_issued_ids(tmp_path: Path) -> None:
    state = StateDir.open(tmp_path)
    writes: list[Resumed] = []
    original = state.write

    def counting(session_id: str, resumed: Resumed) -> bool:
        writes.append(resumed)
        return original(session_id, resumed)

    state.write = counting  # type: ignore[method-assign]
    writer = StateWriter(state)
    record = SessionRecord("sess1", 0.0, 10_000_000, reserver=writer.reserver("sess1", None))
    for n in range(3 * BLOCK):
        record.output(b"x")
        record.emit(progress_event("boot", str(n)))
        writer.flush_sync()  # the writer keeping up with every item: no coalescing
    on_disk = state.load("sess1")
    assert on_disk is not None
    # Every id issued is at or below what the file reserves ...
    assert on_disk.event_floor >= record.events.last_id
    assert on_disk.seq_floor >= record.pty.last_seq
    # ... at the cost of a handful of writes, not one per item.
    assert len(writes) <= 8
    assert on_disk.events == () and on_disk.chunks == ()


def test_statefile_a_killed_daemons_successor_never_reuses_an_id(tmp_path: Path) -> None:
    state = StateDir.open(tmp_path)
    writer = StateWriter(state)
    old = SessionRecord("sess1", 0.0, 10_000_000, reserver=writer.reserver("sess1", None))
    for _ in range(5):
        old.output(b"seen")
    writer.flush_sync()
    seen = old.pty.last_seq
    # SIGKILL: nothing more is written; the successor reads the reservation.
    new = SessionRecord(
        "sess1",
        0.0,
        10_000_000,
        reserver=StateWriter(state).reserver("sess1", None),
        resumed=state.resume("sess1"),
    )
    new.output(b"after")
    replay = new.pty.since(seen)
    assert replay.gap and [c for _, c in replay.items] == [b"after"]
    assert replay.items[0][0] > old.pty.last_seq
    assert new.events.since(0).gap


def test_statefile_a_reservation_that_cannot_be_written_leaves_no_stale_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = StateDir.open(tmp_path)
    writer = StateWriter(state)
    old = SessionRecord("sess1", 0.0, 10_000_000, reserver=writer.reserver("sess1", None))
    old.output(b"first")
    writer.flush_sync()
    # The next reservation cannot be written (here: its temporary file's name
    # is taken by a directory; in life a full disk): the older file on disk
    # would let a successor reuse every seq issued from here on.
    (tmp_path / ".sess1.json.tmp").mkdir()
    for _ in range(BLOCK + 10):
        old.output(b"more")
        writer.flush_sync()
    assert "cannot write the session's state file" in caplog.text
    new = SessionRecord("sess1", 0.0, 10_000_000, reserver=None, resumed=state.resume("sess1"))
    new.output(b"after")
    assert new.pty.last_seq > old.pty.last_seq  # a SIGKILL's successor skips ahead


def test_statefile_a_detached_replay_continues_with_no_gap(tmp_path: Path) -> None:
    state = StateDir.open(tmp_path)
    writer = StateWriter(state)
    reserver = writer.reserver("sess1", None)
    old = SessionRecord("sess1", 0.0, 10_000_000, reserver=reserver)
    old.set_status(running(), 1.0)
    old.output(b"one")
    old.output(b"two")
    writer.finish(reserver, replay_of(old))  # replaces the reservation not yet written
    writer.flush_sync()
    resumed = state.resume("sess1")
    new = SessionRecord(
        "sess1", 0.0, 10_000_000, reserver=writer.reserver("sess1", None), resumed=resumed
    )
    assert new.pty.since(0) == old.pty.since(0)
    assert new.events.since(0) == old.events.since(0)
    assert new.pty.since(1).gap is False


def test_statefile_a_detached_replay_keeps_each_lost_output_mark_in_place(tmp_path: Path) -> None:
    state = StateDir.open(tmp_path)
    old = SessionRecord("sess1", 0.0, 10_000_000)
    old.output_lost()  # before any output: at the floor
    old.output(b"one")
    old.output_lost()
    old.output(b"two")
    assert state.write("sess1", replay_of(old))
    new = SessionRecord("sess1", 0.0, 10_000_000, resumed=state.resume("sess1"))
    assert new.pty.lost_places() == old.pty.lost_places() == [0, 1]
    assert new.pty.since(0).in_order() == old.pty.since(0).in_order()


def test_statefile_no_reader_is_given_an_id_the_file_on_disk_does_not_reserve(
    tmp_path: Path,
) -> None:
    state = StateDir.open(tmp_path)
    writer = StateWriter(state)
    record = SessionRecord("sess1", 0.0, 10_000_000, reserver=writer.reserver("sess1", None))
    rng = random.Random(18)
    for n in range(6 * BLOCK):
        if rng.random() < 0.7:
            record.output(b"x" * rng.randint(1, 3 * CHUNK_BYTES))
        else:
            record.emit(progress_event("boot", str(n)))
        if rng.random() < 0.002:
            writer.flush_sync()  # the writer runs now and then, as a disk allows
        # A SIGKILL here: the successor continues above the file's floors
        # (no file: far above). Nothing a reader was given is at or above them.
        on_disk = state.load("sess1") if state.session_ids() else None
        if on_disk is not None:
            assert record.events.published <= on_disk.event_floor
            assert record.pty.published <= on_disk.seq_floor
    writer.flush_sync()
    assert not record.holding  # once written, everything is readable


def test_statefile_a_reservation_asked_for_twice_is_written_once(tmp_path: Path) -> None:
    state = StateDir.open(tmp_path)
    writer = StateWriter(state)
    record = SessionRecord("sess1", 0.0, 10_000_000, reserver=writer.reserver("sess1", None))
    for _ in range(3 * BLOCK):
        record.output(b"x")
    assert writer.pending == 1  # one job for the session, the latest floors
    writer.flush_sync()
    on_disk = state.load("sess1")
    assert on_disk is not None and on_disk.seq_floor >= record.pty.last_seq


def test_statefile_an_older_file_without_lost_places_still_resumes() -> None:
    raw = b'{"format":1,"session_id":"a","event_floor":2,"seq_floor":3,"events":[],"chunks":[]}'
    assert decode(raw).resumed == Resumed(2, 3)


def test_statefile_missing_or_garbled_resumes_above_every_plausible_id(tmp_path: Path) -> None:
    state = StateDir.open(tmp_path)
    assert state.resume("nosuch") == Resumed(UNKNOWN_FLOOR, UNKNOWN_FLOOR)
    (tmp_path / "bad.json").write_text("{not json")
    assert state.resume("bad") == Resumed(UNKNOWN_FLOOR, UNKNOWN_FLOOR)
    assert UNKNOWN_FLOOR + BLOCK < 2**32  # still a 4-byte seq on the wire


def test_statefile_prune_keeps_only_the_named_sessions(tmp_path: Path) -> None:
    state = StateDir.open(tmp_path)
    for session_id in ("keep1", "gone1", "gone2"):
        state.write(session_id, Resumed(0, 0))
    assert state.prune({"keep1"}) == ["gone1", "gone2"]
    assert state.session_ids() == ["keep1"]
    state.remove("keep1")
    state.remove("keep1")  # idempotent
    assert state.session_ids() == []
