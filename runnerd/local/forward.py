"""The daemon's way into one session's network namespace.

Owns the daemon's end of the socket pair `nsinit`'s outer process serves
(see its docstring, `--sockets`): the go that starts the workload once the
namespace's outbound network is attached, TCP sockets created inside the
namespace on request (`dial`: a socket's network namespace is fixed at its
creation, so connecting one to 127.0.0.1 reaches the workload's loopback,
with no thread entering the namespace), and the host side of each published
port (`serve_ports`: a listener on the host's 127.0.0.1:<port>, each connection
spliced to the same port inside).

Reachability probes through `dial`, so a port is `reachable` when the
workload listens, not merely because the host-side listener accepts. The
debug relay and the editor use the published inspect port like any client.

Resource handling: `open_session_network` owns the socket pair and the
outbound stack (`runnerd.local.outbound.open_outbound`); `serve_ports` owns its
listeners and every connection they spliced: the listeners close on
`drain` (the workload exited), the connections once they have passed on
what the workload sent; everything closes when it is cancelled.
"""

from __future__ import annotations

import array
import contextlib
import errno
import functools
import logging
import os
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import trio

from runnerd.local.network import NetworkPlan
from runnerd.local.outbound import open_outbound

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
# A pipe holds 64 KiB by default: one splice moves at most that much.
SPLICE_BYTES = 1 << 16
_SPLICE_FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
_FD_SPACE = socket.CMSG_SPACE(array.array("i", [0]).itemsize)


class SessionNetwork:
    """One session's namespace as the daemon reaches it (see the module)."""

    def __init__(self, plan: NetworkPlan, stack: contextlib.AsyncExitStack, label: str) -> None:
        self._plan = plan
        self._stack = stack  # holds the outbound stack, once attached
        self._outbound: trio.Process | None = None  # slirp4netns, once attached
        self.label = label  # the session id of its log lines
        ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock = trio.socket.from_stdlib_socket(ours)
        self._lock = trio.Lock()  # one request, one answer: never interleaved
        self._closing = trio.Event()  # the workload is gone: stop listening
        self._drained = trio.Event()  # every published port closed, its connections ended

    @property
    def child_fd(self) -> int:
        """The end `nsinit` gets (`--sockets`); closed by `attach`."""
        return self._theirs.fileno()

    async def attach(self, pid: int, contained: Callable[[], Awaitable[None]]) -> None:
        """With `pid` in the namespace: attach the outbound stack (when the
        plan has one) while `contained()` waits for the rest of the
        session's set-up, then, both done, tell `nsinit` to start the
        workload (`spawn.Attach`).

        Raises:
            OSError: the outbound stack could not be attached, or from
                `contained()`.
        """
        await self.attach_warm(pid, contained)
        await self._sock.send(b"g")

    async def attach_warm(self, pid: int, contained: Callable[[], Awaitable[None]]) -> None:
        """`attach` without the go: a warm sandbox's (`runnerd.local.warm`),
        which gets its go from `go` once a session takes it."""
        self._theirs.close()
        if self._plan.outbound is not None:
            outbound = open_outbound(self._plan, pid, meanwhile=contained)
            self._outbound = await self._stack.enter_async_context(outbound)
        else:
            await contained()

    async def go(self, go_fd: int) -> None:
        """A warm sandbox's go: `G` with `go_fd` (`sessioninit.go_file`)
        passed along, which `nsinit --warm` reads its workload from.

        Raises:
            OSError: `nsinit` is gone (its end closed).
        """
        fds = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [go_fd]))]
        try:
            await self._sock.sendmsg([b"G"], fds)
        except trio.ClosedResourceError as exc:
            raise OSError(errno.ECONNRESET, "the sandbox's socket is closed") from exc

    def alive(self) -> bool:
        """Whether the outbound stack (if any) still runs; never blocks."""
        return self._outbound is None or self._outbound.poll() is None

    async def new_socket(self) -> trio.socket.SocketType:
        """A fresh TCP socket of the namespace (unconnected, non-blocking).

        Raises:
            OSError: the session's namespace is gone, or no socket could be made.
        """
        # Shielded: an answer left unread would be taken for the next one's.
        # The outer answers at once (or is gone: EOF), so this is brief.
        async with self._lock:
            with trio.CancelScope(shield=True):
                try:
                    await self._sock.send(b"s")
                    data, ancdata, _, _ = await self._sock.recvmsg(
                        1, _FD_SPACE, socket.MSG_CMSG_CLOEXEC
                    )
                except trio.ClosedResourceError as exc:
                    # Closed under a probe in flight: the core's reachability
                    # probes run until the session's run returns, past `close`.
                    gone = "the session's network namespace is gone"
                    raise OSError(errno.ECONNRESET, gone) from exc
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

    async def serve_ports(
        self, ports: Sequence[int], *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Publish each of `ports` (see `_publish`); started once all listen.
        Returns after `drain` once every forwarded connection has ended (or
        when cancelled)."""
        try:
            async with trio.open_nursery() as nursery:
                for port in dict.fromkeys(ports):
                    await nursery.start(self._publish, port)
                task_status.started()
        finally:
            self._drained.set()

    async def drain(self) -> None:
        """The workload has exited: stop listening, and wait until the
        connections still open have passed on what the workload sent (its
        bytes are still in the namespace's socket buffers) and ended."""
        self._closing.set()
        await self._drained.wait()

    async def _publish(self, port: int, *, task_status: trio.TaskStatus[None]) -> None:
        """Listen on the host's 127.0.0.1:`port` and splice every connection
        to the same port inside, until `drain`. When the host port is taken
        it stays unpublished, with a warning."""
        try:
            listeners = await trio.open_tcp_listeners(port, host=LOOPBACK)
        except OSError as exc:
            log.warning(
                "port %s not published on the host's loopback: %s",
                port,
                exc.strerror,
                extra={"session_id": self.label},
            )
            task_status.started()
            return
        forward = functools.partial(self._forward, port=port)
        async with trio.open_nursery() as connections:
            with trio.CancelScope() as accepting:
                connections.start_soon(self._cancel_on_closing, accepting)
                task_status.started()
                # serve_listeners closes the listener, and rides out EMFILE.
                await trio.serve_listeners(forward, listeners, handler_nursery=connections)

    async def _cancel_on_closing(self, scope: trio.CancelScope) -> None:
        await self._closing.wait()
        scope.cancel()

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


def free_loopback_port() -> int:
    """A tcp port free on the host's loopback now. The workload binds it
    moments later; a race with another process is possible but harmless
    (the debug relay just never connects). Host-wide, so the apps of one
    watch sandbox (one loopback) never get the same one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _reset(stream: trio.SocketStream) -> None:
    with contextlib.suppress(OSError):
        stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def _pump(src: trio.SocketStream, dst: trio.SocketStream, both: trio.CancelScope) -> None:
    """Copy `src` to `dst` in the kernel (splice(2) through a pipe: the bytes
    never enter the daemon); EOF is passed on as a half-close. A broken side
    ends both directions."""
    pipe_r, pipe_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        while moved := await _splice(src.socket.fileno(), pipe_w, trio.lowlevel.wait_readable):
            while moved:
                moved -= await _splice(pipe_r, dst.socket.fileno(), trio.lowlevel.wait_writable)
            await trio.lowlevel.checkpoint()  # a busy stream must not starve the loop
        dst.socket.shutdown(socket.SHUT_WR)
    except OSError:
        both.cancel()
    finally:
        os.close(pipe_r)
        os.close(pipe_w)


async def _splice(src: int, dst: int, wait: Callable[[int], Awaitable[None]]) -> int:
    """One non-blocking splice(2) of up to SPLICE_BYTES, waiting (with
    `wait` on the socket end) until it can move something; 0 at EOF."""
    sock = src if wait is trio.lowlevel.wait_readable else dst
    while True:
        try:
            return os.splice(src, dst, SPLICE_BYTES, flags=_SPLICE_FLAGS)
        except BlockingIOError:
            await wait(sock)


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
