"""LocalBackend endpoints, reachability of declared ports, and the inspect relay."""

from __future__ import annotations

import os
import socket

import trio

from runnerd.contract import PortMapping
from runnerd.local import LocalBackend

from .recording import RecordingSink, start_session
from .specs import bundle_spec


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_running_lists_endpoints_and_reports_tcp_reachability(
    backend: LocalBackend,
) -> None:
    tcp, udp = free_port(), free_port()
    sink = RecordingSink()
    spec = bundle_spec(
        "python",
        f"""
        import socket, sys
        sock = socket.socket()
        sock.bind(("127.0.0.1", {tcp}))
        sock.listen()
        print("listening", flush=True)
        sys.stdin.readline()
        """,
        ports=(PortMapping(port=tcp, protocol="tcp"), PortMapping(port=udp, protocol="udp")),
    )
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            assert sink.statuses == [
                {
                    "kind": "running",
                    "endpoints": [
                        {"host": "", "port": tcp, "protocol": "tcp"},
                        {"host": "", "port": udp, "protocol": "udp"},
                    ],
                }
            ]
            await sink.wait_for(lambda: (tcp, "reachable") in sink.reachability_calls)
            session.handle.write(b"\n")
            await session.result()
    assert sink.reachability_calls[0] == (tcp, "checking")
    assert sink.reachability_calls[-1] == (tcp, "reachable")
    assert all(port == tcp for port, _ in sink.reachability_calls)


DEBUG_SERVER = """
import http.server, json, sys, time
port = int(sys.argv[sys.argv.index("--inspect-port") + 1])

class Events(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/events":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for frame in ({"kind": "event", "name": "boot"}, {"kind": "log", "line": "hi"}):
            self.wfile.write(("data: " + json.dumps(frame) + "\\n\\n").encode())
        self.wfile.flush()
        time.sleep(1000)

    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("127.0.0.1", port), Events)
print("debug server on", port, flush=True)
server.serve_forever()
"""


async def test_inspect_passes_a_port_and_relays_the_debug_stream(backend: LocalBackend) -> None:
    sink = RecordingSink()
    spec = bundle_spec("python", DEBUG_SERVER, inspect=True)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            (status,) = sink.statuses
            url = status["inspectUrl"]
            assert url.startswith("http://127.0.0.1:")
            await sink.wait_output(f"debug server on {url.rsplit(':', 1)[1]}".encode())
            await sink.wait_for(lambda: len(sink.frames) == 2)
            session.scope.cancel()
    assert sink.frames == [{"kind": "event", "name": "boot"}, {"kind": "log", "line": "hi"}]


async def test_no_inspect_url_without_inspect(backend: LocalBackend) -> None:
    sink = RecordingSink()
    spec = bundle_spec("python", "import sys; print(sys.argv[1:])")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            await session.result()
    assert sink.statuses == [{"kind": "running"}]
    assert b"[]" in sink.out


async def test_inspect_on_a_runtime_without_inspect_args_runs_plainly(
    backend: LocalBackend,
) -> None:
    sink = RecordingSink()
    spec = bundle_spec("sh", 'echo "args:$*"\n', inspect=True)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            await session.result()
    assert sink.statuses == [{"kind": "running"}]
    assert b"args:\r\n" in sink.out


async def _exchange(port: int) -> bytes:
    """Connect from the host, send a line, return what came back before EOF
    (b"" when the connection was refused, reset or closed unanswered)."""
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        return b""
    received = b""
    async with stream:
        try:
            await stream.send_all(b"ping\n")
            while chunk := await stream.receive_some(100):
                received += chunk
        except trio.BrokenResourceError:
            pass  # reset: nothing listened inside
    return received


async def test_a_declared_port_is_reachable_only_once_the_workload_listens(
    backend: LocalBackend,
) -> None:
    # With a network namespace the host side of the port is the daemon's
    # listener: it must not pass for the workload's (nor answer for it).
    tcp = free_port()
    sink = RecordingSink()
    spec = bundle_spec(
        "python",
        f"""
        import socket, sys
        sys.stdin.readline()
        server = socket.create_server(("127.0.0.1", {tcp}))
        print("listening", flush=True)
        while True:  # the reachability probe connects too, and sends nothing
            conn, _ = server.accept()
            data = conn.recv(100)
            if data:
                conn.sendall(b"pong " + data)
                conn.close()
                break
            conn.close()
        """,
        ports=(PortMapping(port=tcp, protocol="tcp"),),
    )
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            assert await _exchange(tcp) == b""
            assert sink.reachability_calls == [(tcp, "checking")]
            session.handle.write(b"\n")
            await sink.wait_output(b"listening")
            await sink.wait_for(lambda: (tcp, "reachable") in sink.reachability_calls)
            assert await _exchange(tcp) == b"pong ping\n"
            await session.result()


async def test_a_published_port_carries_bytes_both_ways_exactly_with_half_close(
    backend: LocalBackend,
) -> None:
    # An echo that answers only after the client's EOF: the half-close must
    # cross the forwarder, and every byte both ways, in order.
    tcp = free_port()
    sink = RecordingSink()
    spec = bundle_spec(
        "python",
        f"""
        import socket
        server = socket.create_server(("127.0.0.1", {tcp}))
        print("listening", flush=True)
        while True:
            conn, _ = server.accept()
            data = b""
            while chunk := conn.recv(1 << 16):
                data += chunk
            if data:
                conn.sendall(data[::-1])
                conn.close()
                break
            conn.close()
        """,
        ports=(PortMapping(port=tcp, protocol="tcp"),),
    )
    payload = os.urandom(8 << 20)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            await sink.wait_for(lambda: (tcp, "reachable") in sink.reachability_calls)
            stream = await trio.open_tcp_stream("127.0.0.1", tcp)
            async with stream:
                await stream.send_all(payload)
                await stream.send_eof()
                echoed = b""
                while chunk := await stream.receive_some(1 << 16):
                    echoed += chunk
            await session.result()
    assert echoed == payload[::-1]
