"""No loss or duplication between SSE replay and live delivery.

The production app (`create_app`, `runnerd.http.events.stream_events`) serves
over hypercorn on a UNIX socket; real httpx clients read the stream. The
session's backend emits thousands of `progress` events (the local backend
emits only a handful of statuses), in small bursts with checkpoints between
them so the readers' writers run while events keep arriving. Two readers join
late: one while the session is paused after the first part (its replay is
still going out when the second part starts), one in the middle of the
second part. Every reader must see ids 1..N exactly once, in order, with
every event's content.

Not run per backend: the scripted backend here is the point (neither real
backend emits events at this rate); the replay and live paths under test are
the session registry's and the SSE route's, the same whatever the backend.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.lowlevel

from runnerd.backend import Exited, ImageSpec, Outcome, RunSpec, Sink, Started
from runnerd.contract import AvailabilityReport, ready
from tests.e2e.contract_client import SSE_TIMEOUT, start_session
from tests.e2e.in_process import open_app, open_client
from tests.harness import SseFrame, iter_sse
from tests.session.backends import NullHandle

BEFORE = 2_000  # emitted before the pause
TOTAL = 12_000  # progress events "n 0".."n 11999", plus a "half" marker at the pause
BURST = 50  # events between checkpoints in the second part
# No reader got a frame for this long: the stream is stuck (the whole test
# takes ~1 s on a quiet machine; its deadline moves with every frame).
STALL_S = 30.0


class ProgressBurstBackend:
    """Emits `BEFORE` progress events, a "half" marker, waits for `go`, then
    the rest in bursts of `BURST`, and exits 0."""

    name = "progress-bursts"
    notices: tuple[str, ...] = ()
    watch_io: tuple[str, ...] = ()  # no watch sessions

    def __init__(self) -> None:
        self.go = trio.Event()

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        task_status.started(Started(NullHandle()))
        for n in range(BEFORE):
            sink.progress("boot", f"n {n}")
        sink.progress("boot", "half")
        await self.go.wait()
        for n in range(BEFORE, TOTAL):
            sink.progress("boot", f"n {n}")
            if n % BURST == 0:
                await trio.lowlevel.checkpoint()
        return Exited(0)


def expected_events() -> list[tuple[str, str]]:
    """(event type, status kind or progress message) for ids 1..N."""
    progress = [("progress", f"n {n}") for n in range(TOTAL)]
    progress.insert(BEFORE, ("progress", "half"))
    return [("status", "starting"), ("status", "running"), *progress, ("status", "exited")]


def summarise(frame: SseFrame) -> tuple[str, str]:
    assert frame.event is not None
    if frame.event == "status":
        return frame.event, frame.data["status"]["kind"]
    return frame.event, frame.data["message"]


async def read_stream(
    client: httpx.AsyncClient,
    session_id: str,
    frames: list[SseFrame],
    *,
    first_frame: trio.Event,
    deadline: trio.CancelScope,
    marks: dict[str, trio.Event] | None = None,
) -> None:
    """Read the session's SSE stream to its end; set `marks[message]` when a
    progress event with that message arrives. Each frame moves `deadline`
    to `STALL_S` from now: the test fails on a stall, never on slowness."""
    marks = marks or {}
    async with client.stream(
        "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
    ) as response:
        assert response.status_code == 200
        async with contextlib.aclosing(iter_sse(response)) as stream:
            async for frame in stream:
                deadline.deadline = trio.current_time() + STALL_S
                frames.append(frame)
                first_frame.set()
                if frame.event == "progress" and frame.data["message"] in marks:
                    marks[frame.data["message"]].set()


async def test_late_sse_readers_see_every_event_exactly_once(tmp_path: Path) -> None:
    backend = ProgressBurstBackend()
    readers: dict[str, list[SseFrame]] = {"first": [], "at_pause": [], "mid_live": []}
    connected = {name: trio.Event() for name in readers}
    paused, mid_live = trio.Event(), trio.Event()
    async with open_app(tmp_path, backend=backend) as (_, socket_path):
        async with open_client(socket_path) as client:
            session_id = await start_session(client, "unused by this backend")
            with trio.fail_after(STALL_S) as deadline:
                async with trio.open_nursery() as nursery:
                    marks = {"half": paused, f"n {TOTAL // 2}": mid_live}
                    nursery.start_soon(
                        lambda: read_stream(
                            client,
                            session_id,
                            readers["first"],
                            first_frame=connected["first"],
                            deadline=deadline,
                            marks=marks,
                        )
                    )
                    await paused.wait()
                    nursery.start_soon(
                        lambda: read_stream(
                            client,
                            session_id,
                            readers["at_pause"],
                            first_frame=connected["at_pause"],
                            deadline=deadline,
                        )
                    )
                    # Its replay has begun; the second part now pours in behind it.
                    await connected["at_pause"].wait()
                    backend.go.set()
                    await mid_live.wait()
                    nursery.start_soon(
                        lambda: read_stream(
                            client,
                            session_id,
                            readers["mid_live"],
                            first_frame=connected["mid_live"],
                            deadline=deadline,
                        )
                    )
    expected = expected_events()
    for name, frames in readers.items():
        ids = [frame.id for frame in frames]
        assert ids == list(range(1, len(expected) + 1)), f"{name}: ids not exactly 1..N once"
        assert [summarise(frame) for frame in frames] == expected, f"{name}: content differs"
