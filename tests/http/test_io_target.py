"""A watch app's `/io` framing and reader path, without sockets: a real
`AppChannel` (its ring of stream-byte chunks) read by the stream reader and
framed by `wsframes.binary_frames`, as the route sends it; and the route's
`?app=` rule (`io_target`). End to end through a daemon: tests/e2e/test_io_watch.py."""

from __future__ import annotations

import json
import struct

import trio
import trio.lowlevel
import trio.testing

from runnerd.backend.watch import OutputStream
from runnerd.http.io_target import io_target
from runnerd.http.wsframes import binary_frames
from runnerd.session.apps import AppChannel
from runnerd.session.reader import LOST, Items, StreamReader
from runnerd.session.rings import CHUNK_BYTES
from runnerd.watch.apps import AppSpec
from runnerd.watch.runs import AppRuns


class Wakes:
    """The `Changes` a session is (every change wakes every parked reader)."""

    def __init__(self) -> None:
        self.is_terminal = False
        self._changed = trio.Event()

    async def wait_change(self) -> None:
        if self.is_terminal:
            await trio.lowlevel.checkpoint()
            return
        await self._changed.wait()

    def notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()


def channel(wakes: Wakes, name: str = "web", io: str = "streams") -> AppChannel:
    spec = AppSpec(name, "main.sh", io=io)  # type: ignore[arg-type]
    return AppChannel(spec, AppRuns(name), slot=0, ring_bytes=1 << 20, notify=wakes.notify)


def parse_frames(data: bytes) -> list[tuple[int, int, bytes]]:
    """Server binary frames (unmasked, FIN) → (seq, stream byte, payload)."""
    out, at = [], 0
    while at < len(data):
        assert data[at] == 0x82
        size, at = data[at + 1] & 0x7F, at + 2
        if size == 126:
            size, at = struct.unpack(">H", data[at : at + 2])[0], at + 2
        elif size == 127:
            size, at = struct.unpack(">Q", data[at : at + 8])[0], at + 8
        body, at = data[at : at + size], at + size
        out.append((struct.unpack(">I", body[:4])[0], body[4], body[5:]))
    return out


async def test_io_watch_frames_carry_seq_then_one_stream_byte() -> None:
    wakes = Wakes()
    app = channel(wakes)
    app.output(b"out 1\n", OutputStream.STDOUT)
    app.output(b"err 1\n", OutputStream.STDERR)
    app.output(b"x" * (CHUNK_BYTES + 10), OutputStream.STDOUT)  # two chunks, both stdout
    reader = StreamReader(app.ring, wakes, 0)
    part = await reader.next()
    assert isinstance(part, Items)
    frames = parse_frames(binary_frames(part.entries))
    assert [(seq, stream) for seq, stream, _ in frames] == [(1, 1), (2, 2), (3, 1), (4, 1)]
    assert frames[0][2] == b"out 1\n" and frames[1][2] == b"err 1\n"
    assert frames[2][2] + frames[3][2] == b"x" * (CHUNK_BYTES + 10)


async def test_io_watch_a_loss_in_an_app_s_output_is_told_in_its_place() -> None:
    wakes = Wakes()
    app = channel(wakes)
    app.output(b"before", OutputStream.STDOUT)
    app.output_lost()
    app.output(b"after", OutputStream.STDERR)
    reader = StreamReader(app.ring, wakes, 0)
    parts = [await reader.next() for _ in range(3)]
    assert parts[1] is LOST
    assert [p.entries for p in (parts[0], parts[2]) if isinstance(p, Items)] == [
        [(1, b"\x01before")],
        [(2, b"\x02after")],
    ]


async def test_io_watch_reader_follows_the_app_across_generations_until_terminal() -> None:
    wakes = Wakes()
    app = channel(wakes, io="tty")
    got: list[bytes] = []

    async def read() -> None:
        async for part in StreamReader(app.ring, wakes, 0):
            assert isinstance(part, Items)
            got.extend(chunk for _, chunk in part.entries)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            app.output(b"gen 1", OutputStream.TTY)
            await trio.testing.wait_all_tasks_blocked()
            app.output(b"gen 2", OutputStream.TTY)  # after a restart: same ring, next seq
            await trio.testing.wait_all_tasks_blocked()
            wakes.is_terminal = True
            wakes.notify()
    assert got == [b"\x00gen 1", b"\x00gen 2"]


class _Session:
    """The route's view of a session: mode, apps, and a run session's PTY."""

    def __init__(self, mode: str, apps: list[AppChannel]) -> None:
        self.mode, self._apps = mode, {a.name: a for a in apps}
        self.pty = object()
        self.is_terminal = False

    def app_channels(self) -> list[AppChannel]:
        return list(self._apps.values())

    def app_channel(self, name: str | None) -> AppChannel | None:
        if name is None:
            return next(iter(self._apps.values())) if len(self._apps) == 1 else None
        return self._apps.get(name)

    def write_stdin(self, data: bytes) -> None: ...

    def resize(self, cols: int, rows: int) -> None: ...


def test_io_target_the_app_rule_of_the_contract() -> None:
    wakes = Wakes()
    web, worker = channel(wakes, "web", "tty"), channel(wakes, "worker", "streams")
    two = _Session("watch", [web, worker])
    one = _Session("watch", [worker])
    run = _Session("run", [])
    target = io_target(two, "web")  # type: ignore[arg-type]
    assert not isinstance(target, str) and target.ring is web.ring
    assert json.loads(target.seq_frame(3)) == {"type": "seq", "seq": 3, "app": "web", "io": "tty"}
    assert target.resize is not None
    streams = io_target(one, None)  # type: ignore[arg-type]
    assert not isinstance(streams, str) and streams.ring is worker.ring
    assert streams.resize is None  # answered resize_unsupported
    assert io_target(two, None) == "this watch session has 2 apps: name one with ?app="  # type: ignore[arg-type]
    assert io_target(two, "nope") == "no app 'nope' in this session"  # type: ignore[arg-type]
    assert io_target(two, "") == "no app '' in this session"  # type: ignore[arg-type]
    for app in (None, "app"):
        plain = io_target(run, app)  # type: ignore[arg-type]
        assert not isinstance(plain, str) and plain.ring is run.pty
        assert plain.seq_frame(0) == '{"type":"seq","seq":0}'  # the run session's, unchanged
    refused = io_target(run, "x" * 500)  # type: ignore[arg-type]
    assert isinstance(refused, str) and len(refused.encode()) <= 123


def test_io_target_an_app_that_left_the_set_ends_its_stream() -> None:
    wakes = Wakes()
    web = channel(wakes, "web", "tty")
    session = _Session("watch", [web])
    target = io_target(session, "web")  # type: ignore[arg-type]
    assert not isinstance(target, str)
    assert (target.changes.is_terminal, target.gone_reason()) == (False, None)
    web.gone = True  # what `PUT /apps` does to a dropped app
    assert target.changes.is_terminal
    assert target.gone_reason() == "app 'web' left the session"
    run = io_target(_Session("run", []), None)  # type: ignore[arg-type]
    assert not isinstance(run, str) and run.gone_reason() is None
