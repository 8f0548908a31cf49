"""LocalBackend.run: real processes under a real PTY, driven through the Sink seam."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from runnerd.backend import Exited
from runnerd.local import LocalBackend

from .recording import RecordingSink, start_session
from .specs import bundle_spec


async def test_run_output_reaches_sink_and_exit_code_is_returned(
    backend: LocalBackend,
) -> None:
    sink = RecordingSink()
    spec = bundle_spec("sh", "echo hello from sh\nexit 3\n")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            assert await session.result() == Exited(3)
    assert sink.statuses == [{"kind": "running"}]
    assert b"hello from sh\r\n" in sink.out  # ONLCR: it went through a terminal


async def test_run_drains_all_output_written_just_before_exit(backend: LocalBackend) -> None:
    sink = RecordingSink()
    size = 3_000_000
    spec = bundle_spec(
        "python",
        f"""
        import os, sys
        sys.stdout.buffer.write(b"x" * {size} + b"END")
        sys.stdout.flush()
        os._exit(0)
        """,
    )
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            assert await session.result() == Exited(0)
    assert sink.out.count(b"x") == size
    assert sink.out.endswith(b"END")
    # Coalesced into chunks of at most 64 KiB, so downstream splits nothing.
    assert sink.largest_output <= 64 * 1024


async def test_run_killed_by_signal_exits_128_plus_signal(backend: LocalBackend) -> None:
    sink = RecordingSink()
    spec = bundle_spec("sh", "kill -KILL $$\n")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            assert await session.result() == Exited(137)


async def test_run_cancelled_stops_workload_and_deletes_session_dir(
    backend: LocalBackend, workdir: Path
) -> None:
    sink = RecordingSink()
    spec = bundle_spec("sh", "echo ready\nexec sleep 1000\n")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            await sink.wait_output(b"ready")
            assert (workdir / spec.session_id / "app" / "main").is_file()
            pid = session.handle.pid
            session.scope.cancel()
            assert await session.result() is None
    assert not (workdir / spec.session_id).exists()
    with pytest.raises(ProcessLookupError):
        import os

        os.kill(pid, 0)


async def test_run_stdin_reaches_program(backend: LocalBackend) -> None:
    sink = RecordingSink()
    spec = bundle_spec(
        "python",
        """
        print("prompt>", flush=True)
        line = input()
        print("got:" + line[::-1])
        """,
    )
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            await sink.wait_output(b"prompt>")
            session.handle.write(b"ping\n")
            assert await session.result() == Exited(0)
    assert b"got:gnip" in sink.out
