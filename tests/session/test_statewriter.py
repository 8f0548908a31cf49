"""runnerd.session.statewriter: state files are written off the event loop.

A real `SessionManager` over real files in a temp dir, with a disk that
hangs (each write blocks until the test lets it go, and records the thread
it ran on): `start()` and every `Sink` call return with the write stuck,
output still reaches readers up to what the reservation in flight covers,
and a detach's saved replay is on disk when the manager has returned.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import trio

from runnerd.backend import EndIntent, Outcome, Sink
from runnerd.session.registry import RegistryFull, Resumed
from runnerd.session.statefile import BLOCK, StateDir

from .backends import InProcessBackend
from .test_manager import build_spec, open_manager, wait_for

LOOP_THREAD = threading.get_ident()


class HangingDisk(StateDir):
    """Every write waits for `release` (a disk that hangs) and records the
    thread it was made on; one made on the event loop fails at once."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.release = threading.Event()
        self.entered = threading.Event()
        self.threads: list[int] = []

    def write(self, session_id: str, resumed: Resumed) -> bool:
        self.threads.append(threading.get_ident())
        if threading.get_ident() == LOOP_THREAD:  # it would hang the whole daemon
            raise AssertionError("a state file written on the event loop")
        self.entered.set()
        self.release.wait()
        return super().write(session_id, resumed)


async def test_statewriter_sink_and_start_never_wait_for_a_hanging_disk(tmp_path: Path) -> None:
    disk = HangingDisk.open(tmp_path)
    chunks = 2 * BLOCK
    written = trio.Event()

    async def body(sink: Sink) -> Outcome | None:
        for n in range(chunks):
            sink.output(b"%d\n" % n)
        written.set()
        return None

    with trio.fail_after(30):
        async with open_manager(InProcessBackend(body), state=disk) as manager:
            try:
                session = manager.start(build_spec())  # its reservation: asked, not written
                await written.wait()
                await trio.to_thread.run_sync(disk.entered.wait)  # the write is stuck
                assert session.pty.last_seq == chunks
                assert disk.threads and LOOP_THREAD not in disk.threads
                # Readers get what the reservation in flight covers, in order;
                # the rest waits for the disk.
                shown = [seq for seq, _ in session.pty.since(0).items]
                assert 0 < len(shown) < chunks and shown == list(range(1, len(shown) + 1))
                disk.release.set()
                await wait_for(session, lambda s: s.pty.published == chunks)
            finally:
                disk.release.set()
    assert LOOP_THREAD not in disk.threads
    assert disk.session_ids() == []  # ended for good: its file removed


async def test_statewriter_a_detach_leaves_its_replay_on_disk_before_the_manager_returns(
    tmp_path: Path,
) -> None:
    disk = HangingDisk.open(tmp_path)

    async def body(sink: Sink) -> Outcome | None:
        sink.output(b"hello")
        return None

    backend = InProcessBackend(body)
    backend.detach_supported = True  # type: ignore[attr-defined]
    with trio.fail_after(30):
        async with open_manager(backend, state=disk) as manager:
            try:
                session = manager.start(build_spec())
                await wait_for(session, lambda s: s.pty.published == 1)
                # The detach does not wait for the disk either (the first
                # reservation is still stuck) ...
                assert await manager.stop_all(EndIntent.DETACH) == []
                assert disk.session_ids() == []
            finally:
                disk.release.set()
        # ... and its replay is there once the manager has returned.
    saved = disk.load(session.id)
    assert saved is not None and saved.chunks == (b"hello",)
    assert [e["type"] for e in saved.events] == ["status", "status"]  # starting, running
    assert LOOP_THREAD not in disk.threads


async def test_statewriter_a_start_refused_for_capacity_leaves_no_state_file(
    tmp_path: Path,
) -> None:
    state = StateDir.open(tmp_path)
    with trio.fail_after(30):
        async with open_manager(InProcessBackend(), state=state, max_sessions=1) as manager:
            live = manager.start(build_spec())
            # The writer idle (its first job done), so the refusal wakes it.
            await wait_for(live, lambda s: (tmp_path / f"{s.id}.json").exists())
            with pytest.raises(RegistryFull):
                manager.start(build_spec())
            await manager.stop(live.id)
    # The live one's file went at its end; the refused one never had one.
    assert state.session_ids() == []
