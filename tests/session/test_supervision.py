"""The core's watchers of a started workload (`runnerd.workload.supervision`):
reachability through the address's dial, the debug relay only with an
inspect port, both started by the session machinery from `Started.address`,
and nothing of them outliving the run. Real loopback sockets; fake time
where only a dial is involved."""

from __future__ import annotations

import json
from typing import Any

import trio
import trio.testing

from runnerd.backend import Exited, ImageSpec, Limits, RunSpec, Sink, WorkloadAddress
from runnerd.contract import PortMapping, Reachability, exited, stopped
from runnerd.session.registry import SessionRecord
from runnerd.session.session import Session
from runnerd.session.sink import SessionReport
from runnerd.workload.supervision import supervise, tcp_ports

from .backends import InProcessBackend
from .test_manager import open_manager, wait_terminal

OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"


def sse(*frames: object) -> bytes:
    return b"".join(f"data: {json.dumps(f)}\n\n".encode() for f in frames)


class Recorded:
    """A `Report` that records, with a wake-up per report."""

    def __init__(self) -> None:
        self.states: list[tuple[int, Reachability]] = []
        self.frames: list[dict[str, Any]] = []
        self._lot = trio.lowlevel.ParkingLot()

    def reachability(self, port: int, state: Reachability) -> None:
        self.states.append((port, state))
        self._lot.unpark_all()

    def debug(self, frame: dict[str, Any]) -> None:
        self.frames.append(frame)
        self._lot.unpark_all()

    async def wait_for(self, condition: Any) -> None:
        while not condition():
            await self._lot.park()


class DebugServer:
    """A debug server's `/events` on loopback: every connection gets `body`,
    then is held open until the client goes (`closed` is set then)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.requests = 0
        self.closed = trio.Event()

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = await stream.receive_some()
                if not chunk:
                    return
                head += chunk
            self.requests += 1
            await stream.send_all(OK_HEAD + self.body)
            try:
                while await stream.receive_some():
                    pass
            except trio.BrokenResourceError:
                pass
            self.closed.set()


async def serve(nursery: trio.Nursery, handler: Any) -> int:
    """Serve `handler` on a loopback port in `nursery`; return the port."""
    listeners = await nursery.start(trio.serve_tcp, handler, 0)
    port: int = listeners[0].socket.getsockname()[1]
    return port


async def accept_and_close(stream: trio.SocketStream) -> None:
    await stream.aclose()


def spec_with(ports: tuple[PortMapping, ...]) -> RunSpec:
    return RunSpec.create(
        session_id="s00000000001",
        image=ImageSpec("sh", "missing"),
        env={},
        limits=Limits("50m", "100Mi", "512Mi", 60.0),
        ports=ports,
    )


def test_tcp_ports_are_the_declared_tcp_ones_each_once_in_order() -> None:
    ports = (PortMapping(8080, "tcp"), PortMapping(53, "udp"), PortMapping(81, "tcp"))
    assert tcp_ports((*ports, PortMapping(8080, "tcp"))) == [8080, 81]


async def test_supervise_probes_each_declared_port_through_the_given_dial() -> None:
    dialled: list[tuple[str, int]] = []

    async def dial(host: str, port: int) -> trio.abc.Stream:
        # The address's host means nothing to the runner's resolver: only
        # the backend's dial knows the way (as into a network namespace).
        dialled.append((host, port))
        return await trio.open_tcp_stream("127.0.0.1", port)

    report = Recorded()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await serve(nursery, accept_and_close)
            address = WorkloadAddress("workload.invalid", dial=dial)
            await supervise(address, [port], report)  # returns once all are reachable
            nursery.cancel_scope.cancel()
    assert dialled == [("workload.invalid", port)]
    assert report.states == [(port, "checking"), (port, "reachable")]
    assert report.frames == []


async def test_supervise_relays_the_debug_stream_only_with_an_inspect_port() -> None:
    server = DebugServer(sse({"kind": "event", "name": "boot"}, {"kind": "log", "line": "hi"}))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await serve(nursery, server.handle)
            without = Recorded()
            await supervise(WorkloadAddress("127.0.0.1"), [], without)  # nothing to watch
            assert server.requests == 0
            report = Recorded()
            async with trio.open_nursery() as watching:
                watching.start_soon(supervise, WorkloadAddress("127.0.0.1", port), [], report)
                await report.wait_for(lambda: len(report.frames) == 2)
                watching.cancel_scope.cancel()
            await server.closed.wait()  # cancelled: the relay's connection is gone
            nursery.cancel_scope.cancel()
    assert without.frames == [] and without.states == []
    assert report.frames == [{"kind": "event", "name": "boot"}, {"kind": "log", "line": "hi"}]
    assert report.states == []


async def test_the_core_relays_event_frames_and_reachability_of_a_started_address() -> None:
    # Moved from test_manager's sink test: the frames now come from the
    # relay the core starts, and only event frames become `debug` events.
    server = DebugServer(
        sse(
            {"kind": "log", "line": "same bytes as the PTY"},
            {"kind": "event", "name": "Kernel.Started"},
            {"name": "no kind is an event"},
        )
    )
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            inspect_port = await serve(nursery, server.handle)
            port = await serve(nursery, accept_and_close)
            backend = InProcessBackend(address=WorkloadAddress("127.0.0.1", inspect_port))
            async with open_manager(backend) as manager:
                session = manager.start(spec_with((PortMapping(port, "tcp"),)))
                reachable = {"type": "reachability", "port": port, "state": "reachable"}

                def events() -> list[dict[str, Any]]:
                    return [dict(e) for _, e in session.events.since(0).items]

                while not (
                    reachable in events() and sum(e["type"] == "debug" for e in events()) == 2
                ):
                    await session.wait_change()
                assert session.status["inspectUrl"] == f"http://127.0.0.1:{inspect_port}"
                await manager.stop(session.id)
                assert session.status == stopped()
                # Nothing of the watchers outlives the run: the relay has hung up.
                await server.closed.wait()
            nursery.cancel_scope.cancel()
    assert [e["frame"] for e in events() if e["type"] == "debug"] == [
        {"kind": "event", "name": "Kernel.Started"},
        {"name": "no kind is an event"},
    ]
    checks = [e for e in events() if e["type"] == "reachability"]
    assert checks == [{"type": "reachability", "port": port, "state": "checking"}, reachable]


async def test_nothing_the_core_watches_outlives_the_run(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0
    dials = 0
    lot = trio.lowlevel.ParkingLot()

    async def refused(host: str, port: int) -> trio.abc.Stream:
        nonlocal dials
        dials += 1
        lot.unpark_all()
        await trio.lowlevel.checkpoint()
        raise ConnectionRefusedError(host, port)

    async def body(sink: Sink) -> Exited:
        while dials < 3:  # probing, and retrying: the port never listens
            await lot.park()
        return Exited(0)

    address = WorkloadAddress("workload.invalid", dial=refused)
    spec = spec_with((PortMapping(8080, "tcp"),))
    async with open_manager(InProcessBackend(body, address=address)) as manager:
        session = manager.start(spec)
        assert await wait_terminal(session, timeout_s=1000) == exited(0)
        at_the_end = dials
        await trio.sleep(600)  # fake time: ten minutes of retries, had it outlived the run
        assert dials == at_the_end


async def test_no_watchers_without_an_address() -> None:
    async def body(sink: Sink) -> Exited:
        await trio.lowlevel.checkpoint()
        return Exited(0)

    async with open_manager(InProcessBackend(body)) as manager:
        session = manager.start(spec_with((PortMapping(8080, "tcp"),)))
        assert await wait_terminal(session) == exited(0)
    assert [e for _, e in session.events.since(0).items if e["type"] == "reachability"] == []
    assert "inspectUrl" not in [e for _, e in session.events.since(0).items][1]["status"]


def test_the_report_drops_log_frames_and_the_kernels_replay_of_relayed_ones() -> None:
    record = SessionRecord("s00000000002", 0.0, 1_000_000)
    session = Session(record, spec_with(()), wall_clock=lambda: 0.0)
    # What a previous daemon relayed: the kernel replays it to a new relay.
    session.relayed_debug.extend([{"kind": "event", "n": 1}, {"kind": "event", "n": 2}])
    report = SessionReport(session)
    for frame in (
        {"kind": "event", "n": 1},
        {"kind": "log", "line": "x"},
        {"kind": "event", "n": 2},
        {"kind": "event", "n": 3},
        {"kind": "event", "n": 1},  # past the replay: new, relayed again
    ):
        report.debug(frame)
    report.reachability(80, "unreachable")
    events = [e for _, e in session.events.since(0).items]
    assert [e["frame"] for e in events if e["type"] == "debug"] == [
        {"kind": "event", "n": 3},
        {"kind": "event", "n": 1},
    ]
    assert {"type": "reachability", "port": 80, "state": "unreachable"} in events
