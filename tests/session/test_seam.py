"""The backend seam as the manager drives it: `running` is the manager's to
publish once it holds the workload's handle."""

from __future__ import annotations

import math

import trio

from runnerd.backend import Exited, Outcome, Sink
from runnerd.contract import exited

from .backends import InProcessBackend
from .test_manager import build_spec, open_manager, status_kinds, wait_terminal


async def test_seam_stdin_sent_on_seeing_running_reaches_the_workload() -> None:
    received = trio.open_memory_channel[bytes](math.inf)

    async def body(sink: Sink) -> Outcome:
        sink.progress("boot", "reported right after started")
        return Exited(0) if await received[1].receive() == b"hi" else Exited(1)

    backend = InProcessBackend(body)
    backend.handle.stdin = received[0]
    async with open_manager(backend) as manager:
        session = manager.start(build_spec())
        with trio.fail_after(10):
            while session.status["kind"] != "running":
                await session.wait_change()
        # No checkpoint since `running` was seen: the handle is already there.
        session.write_stdin(b"hi")
        assert await wait_terminal(session) == exited(0)
    # `running` comes before anything the backend reports after `started`.
    events = [event for _, event in session.events.since(0).items]
    kinds = [(e["type"], e["status"]["kind"] if e["type"] == "status" else None) for e in events]
    assert kinds[:3] == [("status", "starting"), ("status", "running"), ("progress", None)]
    assert status_kinds(session) == ["starting", "running", "exited"]
