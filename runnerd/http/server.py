"""Serving the app on hypercorn's trio protocol stack, with bounded connections.

Owns the accept loop (the per-connection wrapper is `runnerd.http.connection`).
It replaces `hypercorn.trio.serve` (whose `worker_serve` is mirrored here:
lifespan, accept, graceful stop) because what the issue needs is not
configurable there:

- **A connection cap per listener.** At `max_connections` the connection
  idle the longest (no request in flight) is closed to make room; when all
  are busy we stop calling `accept()`, and new clients wait in the kernel's
  listen backlog (4096) until a slot frees. Streams (SSE, WebSocket) hold a
  slot like any connection and are never cut to make room; they may hold
  only `stream_share(cap)` of the slots (`runnerd.http.streams`), so the
  rest always serves plain requests.
- **Running out of file descriptors** (`EMFILE`, `ENFILE`, ...) is logged once
  when it starts and once when it clears, with a count, not once per retry
  (`trio.serve_listeners` logs every 0.1 s, with a traceback).
- **Each connection is hypercorn's, fixed** (`runnerd.http.connection`):
  its keep-alive timeout applies, closing never races a send nor resets a
  WebSocket peer, runnerd's HTTP/1.1 protocol replaces hypercorn's, and
  answers get reason phrases and JSON protocol error bodies.
- **A connection fails alone.** Whatever one connection raises (an h11 or
  wsproto state error, a handler bug that escapes hypercorn) is logged once
  with the connection's peer and ends that connection only: it escaped
  through the connections nursery before, and ended the daemon and every
  session with it.

Patching hypercorn was the alternative; subclassing its `TCPServer` keeps its
protocol code (h11, wsproto, the ASGI glue) as shipped.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ConnectionState, LifespanState
from hypercorn.utils import repr_socket_addr, wrap_app

from runnerd.http.connection import Connection
from runnerd.http.connection_probe import CONNECTION_PROBE, ConnectionProbe
from runnerd.http.streams import ListenerApp, ListenerStreams

log = logging.getLogger(__name__)

# Errors that mean "no resources to accept right now", not "the listener is broken".
_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_CAPACITY_RETRY_S = 0.1
# Reaching the connection cap is logged at most this often per listener.
CAP_WARNING_INTERVAL_S = 60.0
# Told (listener, "evicted" | "queued") each time a listener reaches its cap.
OnCap = Callable[[str, str], None]
# File descriptors kept free for sessions (a PTY, a pidfd, pipes each) and
# the daemon itself when the connection cap is sized against RLIMIT_NOFILE.
_FDS_PER_SESSION = 8
_FDS_RESERVED = 64
# The connection cap never goes below this (nor above `max_connections`):
# health checks, a few streams and a CLI must always fit, even when the
# open files limit is too low to also leave room for every session.
MIN_CONNECTIONS = 16
# struct ucred, as SO_PEERCRED returns it: pid, uid, gid.
_UCRED = struct.Struct("3i")


def connection_cap(configured: int, listeners: int, nofile: int, max_sessions: int) -> int:
    """Connections per listener: `configured`, lowered so that every listener
    at its cap still leaves file descriptors for the sessions, but never
    below `MIN_CONNECTIONS` (a daemon that serves one connection is not
    usable; `fds_needed` says what the limit should be)."""
    spare = nofile - _FDS_RESERVED - _FDS_PER_SESSION * max_sessions
    fitted = max(MIN_CONNECTIONS, spare // max(listeners, 1))
    return min(configured, fitted)


def fds_needed(connections: int, listeners: int, max_sessions: int) -> int:
    """The open files limit at which `connections` per listener and
    `max_sessions` sessions all fit."""
    return _FDS_RESERVED + _FDS_PER_SESSION * max_sessions + connections * max(listeners, 1)


class _AcceptLoop:
    """Accept on one listener while it has fewer than `cap` connections.

    At the cap, the connection idle the longest (no request in flight, so
    never a stream) is closed to make room, as its keep-alive timeout would;
    when every connection is busy, accepting waits for one to end.
    """

    def __init__(
        self, listener: trio.SocketListener, cap: int, name: str, on_cap: OnCap | None = None
    ) -> None:
        self.listener = listener
        self.cap = cap
        self.slots = trio.Semaphore(cap)
        self.name = name
        # Streams may hold only part of the cap (`runnerd.http.streams`).
        self.streams = ListenerStreams(name, cap)
        self.failures = 0
        self.on_cap = on_cap
        self.warned_at: float | None = None
        # Idle connections, oldest first (dicts keep insertion order).
        self.idle: dict[Connection, None] = {}

    async def run(
        self, nursery: trio.Nursery, make: Callable[[trio.SocketStream], Connection]
    ) -> None:
        while True:
            if self.slots.value == 0:
                self._note_cap("evicted" if self.idle else "queued")
            if self.slots.value == 0 and self.idle:
                oldest = next(iter(self.idle))
                del self.idle[oldest]
                nursery.start_soon(self._evict, oldest)
            await self.slots.acquire()
            try:
                stream = await self.listener.accept()
            except OSError as exc:
                self.slots.release()
                if exc.errno not in _CAPACITY_ERRNOS:
                    raise
                self._note_failure(exc)
                await trio.sleep(_CAPACITY_RETRY_S)
                continue
            self._note_recovery()
            # The peer now: once a connection failed, its socket is closed.
            nursery.start_soon(self._serve_one, make(stream), peer_name(stream))

    def _set_idle(self, connection: Connection, idle: bool) -> None:
        if idle:
            self.idle[connection] = None
        else:
            self.idle.pop(connection, None)

    async def _serve_one(self, connection: Connection, peer: str) -> None:
        connection.on_idle = self._set_idle
        connection.peer = peer
        self.idle[connection] = None  # idle until its first request arrives
        try:
            await connection
        except* Exception as failure:
            # This connection's alone: it is closed below, and the daemon,
            # every other connection and every session go on. Cancellation
            # (a BaseException) is not caught and goes on up.
            self._log_failure(connection, failure)
        finally:
            self.idle.pop(connection, None)
            self.slots.release()
            await trio.aclose_forcefully(connection.stream)

    async def _evict(self, connection: Connection) -> None:
        """Close an idle connection to make room (a task of the connections
        nursery, so contained like the connection's own)."""
        try:
            await connection.evict()
        except* Exception as failure:
            self._log_failure(connection, failure)
            await trio.aclose_forcefully(connection.stream)

    def _log_failure(self, connection: Connection, failure: BaseException) -> None:
        log.error(
            "connection failed; closed it",
            exc_info=failure,
            extra={"listener": self.name, "peer": connection.peer},
        )

    def _note_cap(self, action: str) -> None:
        """Count reaching the cap; warn once per burst (at most once every
        `CAP_WARNING_INTERVAL_S`), never once per connection."""
        if self.on_cap is not None:
            self.on_cap(self.name, action)
        now = trio.current_time()
        if self.warned_at is not None and now - self.warned_at < CAP_WARNING_INTERVAL_S:
            return
        self.warned_at = now
        log.warning(
            "connection cap reached: the longest-idle connection is closed to make room, "
            "or new clients wait in the backlog while every connection is busy "
            "(server.max_connections)",
            extra={"listener": self.name, "max_connections": self.cap, "action": action},
        )

    def _note_failure(self, exc: OSError) -> None:
        if self.failures == 0:
            log.error(
                "cannot accept connections, retrying until it clears",
                extra={"listener": self.name, "error": errno.errorcode.get(exc.errno or 0, "?")},
            )
        self.failures += 1

    def _note_recovery(self) -> None:
        if self.failures:
            log.warning(
                "accepting connections again",
                extra={"listener": self.name, "failed_attempts": self.failures},
            )
            self.failures = 0


def _connection_factory(
    app: Any, config: HypercornConfig, context: WorkerContext, lifespan_state: LifespanState
) -> Callable[[trio.SocketStream], Connection]:
    def make(stream: trio.SocketStream) -> Connection:
        # Each connection gets its own copy, as in hypercorn's worker_serve.
        state = ConnectionState(lifespan_state.copy())
        state[CONNECTION_PROBE] = ConnectionProbe(stream)  # for runnerd.http.io
        return Connection(app, config, context, state, stream)

    return make


def peer_name(stream: trio.SocketStream) -> str:
    """Who is on the other end, for the log: `host:port` over TCP, the
    peer's `pid`/`uid` over a UNIX socket (SO_PEERCRED: a session's workload
    shows up with its pid)."""
    sock = stream.socket
    try:
        if sock.family == socket.AF_UNIX:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
            pid, uid, _ = _UCRED.unpack(creds)
            return f"pid {pid} uid {uid}"
        return repr_socket_addr(sock.family, sock.getpeername())
    except OSError:
        return "unknown (gone)"


def listener_name(sock: socket.socket) -> str:
    return repr_socket_addr(sock.family, sock.getsockname())


async def serve_app(
    app: Any,
    config: HypercornConfig,
    sockets: list[socket.socket],
    *,
    max_connections: int,
    shutdown_trigger: Callable[[], Awaitable[None]],
    on_cap: OnCap | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `app` on `sockets` (already listening; closed here at the end)
    until `shutdown_trigger` returns, then let in-flight requests finish for
    `config.graceful_timeout` and run the app's shutdown.

    `task_status` gets the listeners' addresses once accepting; `on_cap`
    hears each time a listener reaches `max_connections`.
    """
    wrapped: AppWrapper = wrap_app(app, config.wsgi_max_body_size, "asgi")
    context = WorkerContext(None)
    lifespan_state: LifespanState = {}
    lifespan = Lifespan(wrapped, config, lifespan_state)
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as connections:
            loops = [
                _AcceptLoop(trio.SocketListener(trio.socket.from_stdlib_socket(sock)),
                            max_connections, listener_name(sock), on_cap)
                for sock in sockets
            ]  # fmt: skip
            try:
                async with trio.open_nursery() as accepting:
                    for loop in loops:
                        # Each request on a listener gets a slot on its streams.
                        app = ListenerApp(wrapped, loop.streams)
                        make = _connection_factory(app, config, context, lifespan_state)
                        accepting.start_soon(loop.run, connections, make)
                    task_status.started([loop.name for loop in loops])
                    await shutdown_trigger()
                    accepting.cancel_scope.cancel()
            finally:
                for loop in loops:
                    await trio.aclose_forcefully(loop.listener)
                await context.terminated.set()
                connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()


def open_files_limit() -> int:
    """The soft RLIMIT_NOFILE (a large number when unlimited)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def dup_socket(sock: socket.socket) -> socket.socket:
    """A second socket object on a dup of `sock`'s fd: closing it (as the
    accept loop does at the end) leaves the daemon's own `sock` open."""
    return socket.socket(fileno=os.dup(sock.fileno()))
