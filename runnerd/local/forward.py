"""The daemon's way into one session's network namespace.

Owns the daemon's end of the socket pair `nsinit`'s outer process serves
(see its docstring, `--sockets`): the go that starts the workload once the
namespace's outbound network is attached, TCP sockets created inside the
namespace on request (`dial`: a socket's network namespace is fixed at its
creation, so connecting one to 127.0.0.1 reaches the workload's loopback,
with no thread entering the namespace), and the host side of each published
port (`publish`: a listener on the host's 127.0.0.1:<port>, each connection
spliced to the same port inside).

Reachability probes through `dial`, so a port is `reachable` when the
workload listens, not merely because the host-side listener accepts. The
debug relay and the editor use the published inspect port like any client.

Resource handling: `open_session_network` owns the socket pair and the
outbound stack (`runnerd.local.network.open_outbound`); `publish` owns its
listener and every connection it spliced, all closed when it is cancelled.
"""

from __future__ import annotations

import array
import contextlib
import errno
import functools
import logging
import socket
import struct
from collections.abc import AsyncIterator

import trio

from runnerd.local.network import NetworkPlan, open_outbound

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
CHUNK_BYTES = 65536
_FD_SPACE = socket.CMSG_SPACE(array.array("i", [0]).itemsize)


class SessionNetwork:
    """One session's namespace as the daemon reaches it (see the module)."""

    def __init__(self, plan: NetworkPlan, stack: contextlib.AsyncExitStack, label: str) -> None:
        self._plan = plan
        self._stack = stack  # holds the outbound stack, once attached
        self._label = label
        ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock = trio.socket.from_stdlib_socket(ours)
        self._lock = trio.Lock()  # one request, one answer: never interleaved

    @property
    def child_fd(self) -> int:
        """The end `nsinit` gets (`--sockets`); closed by `attach`."""
        return self._theirs.fileno()

    async def attach(self, pid: int) -> None:
        """With `pid` in the namespace: attach the outbound stack (when the
        plan has one), then tell `nsinit` to start the workload.

        Raises:
            OSError: the outbound stack could not be attached.
        """
        self._theirs.close()
        if self._plan.outbound is not None:
            await self._stack.enter_async_context(open_outbound(self._plan, pid))
        await self._sock.send(b"g")

    async def new_socket(self) -> trio.socket.SocketType:
        """A fresh TCP socket of the namespace (unconnected, non-blocking).

        Raises:
            OSError: the session's namespace is gone, or no socket could be made.
        """
        # Shielded: an answer left unread would be taken for the next one's.
        # The outer answers at once (or is gone: EOF), so this is brief.
        async with self._lock:
            with trio.CancelScope(shield=True):
                await self._sock.send(b"s")
                data, ancdata, _, _ = await self._sock.recvmsg(
                    1, _FD_SPACE, socket.MSG_CMSG_CLOEXEC
                )
        fds = array.array("i")
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if data != b"s" or len(fds) != 1:
            for fd in fds:
                socket.close(fd)
            raise OSError(errno.ECONNRESET, "the session's network namespace is gone")
        return trio.socket.from_stdlib_socket(socket.socket(fileno=fds[0]))

    async def dial(self, host: str, port: int) -> trio.SocketStream:
        """A connection to `host:port` as seen inside the namespace.

        Raises:
            OSError: refused, or the namespace is gone.
        """
        sock = await self.new_socket()
        try:
            await sock.connect((host, port))
        except BaseException:
            sock.close()
            raise
        return trio.SocketStream(sock)

    async def publish(
        self, port: int, *, task_status: trio.TaskStatus[bool] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on the host's 127.0.0.1:`port` and splice every connection
        to the same port inside, until cancelled. Reports `started(True)`
        once listening, `started(False)` (and returns) when the host port is
        taken: the port then stays unpublished, with a warning."""
        try:
            listeners = await trio.open_tcp_listeners(port, host=LOOPBACK)
        except OSError as exc:
            log.warning(
                "port %s not published on the host's loopback: %s",
                port,
                exc.strerror,
                extra={"session_id": self._label},
            )
            task_status.started(False)
            return
        task_status.started(True)
        # serve_listeners closes the listener, and rides out EMFILE/ENFILE.
        await trio.serve_listeners(functools.partial(self._forward, port=port), listeners)

    async def _forward(self, client: trio.SocketStream, *, port: int) -> None:
        async with client:
            try:
                upstream = await self.dial(LOOPBACK, port)
            except OSError:
                # Nothing listens inside: reset, as a refused connect would.
                _reset(client)
                return
            async with upstream, trio.open_nursery() as nursery:
                nursery.start_soon(_pump, client, upstream, nursery.cancel_scope)
                nursery.start_soon(_pump, upstream, client, nursery.cancel_scope)

    def close(self) -> None:
        """Close the socket pair (idempotent); `nsinit` stops serving."""
        self._theirs.close()
        self._sock.close()


def _reset(stream: trio.SocketStream) -> None:
    with contextlib.suppress(OSError):
        stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def _pump(src: trio.SocketStream, dst: trio.SocketStream, both: trio.CancelScope) -> None:
    """Copy `src` to `dst`; EOF is passed on as a half-close. A broken side
    ends both directions."""
    try:
        while chunk := await src.receive_some(CHUNK_BYTES):
            await dst.send_all(chunk)
        await dst.send_eof()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        both.cancel()


@contextlib.asynccontextmanager
async def open_session_network(plan: NetworkPlan, label: str = "") -> AsyncIterator[SessionNetwork]:
    """The daemon's side of a new session's namespace (see `SessionNetwork`),
    for the session's lifetime: on exit the outbound stack is stopped and
    the socket pair closed (which ends `nsinit`'s serving). No nursery: what
    the body raises (a `StartError`) comes out as itself."""
    async with contextlib.AsyncExitStack() as stack:
        net = SessionNetwork(plan, stack, label)
        stack.callback(net.close)
        yield net
