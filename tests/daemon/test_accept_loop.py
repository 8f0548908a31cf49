"""Running out of file descriptors is logged once per burst, not per retry.

In-process, with a real listening socket and a real EMFILE: the test lowers
its own RLIMIT_NOFILE to the lowest free descriptor while clients wait in
the backlog, so every `accept()` fails until the limit is restored. (Before,
`trio.serve_listeners` logged a traceback every 0.1 s: 279 lines in 10 s.)
"""

from __future__ import annotations

import logging
import os
import resource
import socket

import pytest
import trio

from runnerd.http.server import _AcceptLoop


def _lowest_free_fd() -> int:
    fd = os.dup(0)
    os.close(fd)
    return fd


async def test_emfile_is_logged_once_per_burst(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runnerd.http.server")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server_sock:
        server_sock.bind(f"\0runnerd-test-accept-{os.getpid()}")  # abstract: no file
        server_sock.listen(16)
        listener = trio.SocketListener(trio.socket.from_stdlib_socket(server_sock.dup()))
        loop = _AcceptLoop(listener, cap=4, name="test")
        clients = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(3)]
        served = trio.Event()

        class Served:
            """Stands in for a hypercorn connection: it only records that
            a connection got through."""

            def __init__(self, stream: trio.SocketStream) -> None:
                self.stream = stream
                self.on_idle = None

            def __await__(self):  # type: ignore[no-untyped-def]
                return self.serve().__await__()

            async def serve(self) -> None:
                served.set()
                await trio.lowlevel.checkpoint()

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        try:
            for client in clients:
                client.connect(server_sock.getsockname())
            async with trio.open_nursery() as nursery:
                resource.setrlimit(resource.RLIMIT_NOFILE, (_lowest_free_fd(), hard))
                try:
                    nursery.start_soon(loop.run, nursery, Served)
                    # 5 s of virtual time (MockClock): ~50 retries, 0.1 s apart.
                    await trio.sleep(5)
                    assert loop.failures >= 20
                finally:
                    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
                with trio.fail_after(60):
                    await served.wait()
                nursery.cancel_scope.cancel()
            await listener.aclose()
        finally:
            for client in clients:
                client.close()
    messages = [record.getMessage() for record in caplog.records]
    assert messages.count("cannot accept connections, retrying until it clears") == 1
    assert messages.count("accepting connections again") == 1
    recovered = next(r for r in caplog.records if r.getMessage() == "accepting connections again")
    assert recovered.failed_attempts >= 20  # type: ignore[attr-defined]
