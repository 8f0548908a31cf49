"""The PTY bridge: a session container's terminal over `pods/attach` WebSockets.

Owns `run_attach` (one attach, from handshake to its end) and `Terminal`
(the handle stdin and resizes go through). Any container of the pod can be
attached (`container=`: a run pod's `session`, a watch pod's `app-<name>`):
a TTY container (`tty=True`) has one output stream on channel 1; a
container without one (a watch session's `streams` app) has its stdout on
channel 1 and its stderr on channel 2, kept apart (`on_stderr`). The
channel protocol is
Kubernetes' `v5.channel.k8s.io` (k/k `wsstream/conn.go`): every message
starts with a channel byte; 1 (and 2) carry output, 0 stdin, 4 resizes as
`{"Width":W,"Height":H}` JSON, 3 the final `Status` (v5's `[255, 0]`
half-close of stdin is never sent: a session's stdin is open until it ends).

Protocol choice: the handshake offers `v5.channel.k8s.io` then
`v4.channel.k8s.io`. The server walks the client's list and takes the first
it speaks, so a v5 apiserver answers v5 and a kubelet reached on the legacy
proxied path (v4 only) answers v4: the fallback costs no second handshake.

End of an attach (`AttachEnd`):
- `ENDED`: a `Success` Status arrived on channel 3 (the container's streams
  closed: it exited). An abrupt TCP close right after it is tolerated.
- `DROPPED`: the connection closed or broke without a Status (an apiserver
  restart, a network cut, or no pong to a ping for `PONG_TIMEOUT_S`); the
  caller decides whether to re-attach.
Errors: a refused handshake (401/403/404/400, or a 403 with an empty body
when no subprotocol matched) and a `Failure` Status on channel 3 (the kubelet
could not attach: the container is not running) raise a classified
`errors.KubeError`. A 401 re-reads the credentials and is retried once.

Resource handling: everything the attach opens (TCP, TLS, the WebSocket and
its reader task) lives in `run_attach`'s frame; it returns or raises only
after they are closed (shielded, bounded). Cancelling it closes the socket.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any
from urllib.parse import urlencode, urlsplit

import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
    wrap_client_stream,
)

import runnerd.kube.errors as errors
from runnerd.kube.client import KubeClient

log = logging.getLogger(__name__)

OPERATION = "could not attach to the session terminal"
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, STATUS, RESIZE = 0, 1, 2, 3, 4
# Stdin not yet sent; beyond this it is dropped (and logged) rather than
# growing the daemon without bound behind a stalled apiserver.
MAX_PENDING_STDIN_BYTES = 4 * 1024 * 1024
CLOSE_TIMEOUT_S = 1.0
# client-go pings every 5 s. A peer that stops answering (a dead node, a
# black-holed route: no FIN, no RST) would otherwise leave a silently dead
# terminal forever; after this long without a pong the attach is DROPPED.
PING_INTERVAL_S = 5.0
PONG_TIMEOUT_S = 30.0


class AttachEnd(Enum):
    ENDED = "ended"
    DROPPED = "dropped"


class Terminal:
    """The attached terminal's input side. Every method is synchronous, never
    blocks, never raises, and is a no-op once the attach has ended."""

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self._send, self._receive = trio.open_memory_channel[bytes](float("inf"))
        self._pending_bytes = 0

    def write(self, data: bytes) -> None:
        if not data:
            return
        if self._pending_bytes + len(data) > MAX_PENDING_STDIN_BYTES:
            log.warning("stdin dropped: %d bytes pending", self._pending_bytes)
            return
        self._pending_bytes += len(data)
        self._put(bytes([STDIN]) + data)

    def resize(self, cols: int, rows: int) -> None:
        # Go's TerminalSize has no JSON tags: the keys are capitalised.
        self._put(bytes([RESIZE]) + json.dumps({"Width": cols, "Height": rows}).encode())

    def _put(self, frame: bytes) -> None:
        try:
            self._send.send_nowait(frame)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    async def _pump(self, ws: WebSocketConnection) -> None:
        async with self._receive:
            async for frame in self._receive:
                if frame[0] == STDIN:
                    self._pending_bytes -= len(frame) - 1
                try:
                    await ws.send_message(frame)
                except ConnectionClosed:
                    return

    def _close(self) -> None:
        self._send.close()


def attach_resource(client: KubeClient, pod: str, container: str, *, tty: bool = True) -> str:
    """The attach URL: stdin and stdout always; stderr only without a TTY
    (the kubelet drops it with one: a TTY has one stream)."""
    streams = {"stdin": "true", "stdout": "true"}
    streams.update({"tty": "true"} if tty else {"stderr": "true", "tty": "false"})
    query = urlencode({"container": container, **streams})
    return f"{client.pods_path(pod)}/attach?{query}"


def parse_status_end(payload: bytes) -> errors.KubeError | None:
    """None for a `Success` Status on channel 3, else the classified failure."""
    try:
        status: Any = json.loads(payload)
    except ValueError:
        status = None
    if isinstance(status, dict) and status.get("status") == "Success":
        return None
    code = status.get("code") if isinstance(status, dict) else None
    return errors.classify_answer(OPERATION, code if isinstance(code, int) else 500, payload)


OutputCallbacks = tuple[Callable[[bytes], None], Callable[[bytes], None]]


async def _read(ws: WebSocketConnection, outputs: OutputCallbacks) -> AttachEnd:
    """Deliver channel 1 to `outputs[0]` and channel 2 to `outputs[1]` until
    the attach ends."""
    while True:
        try:
            message = await ws.get_message()
        except ConnectionClosed:
            return AttachEnd.DROPPED
        data = message.encode() if isinstance(message, str) else message
        if len(data) < 2:
            continue  # the empty "connected" frame, or nothing at all
        channel, payload = data[0], data[1:]
        if channel == STDOUT:
            outputs[0](payload)
        elif channel == STDERR:
            outputs[1](payload)
        elif channel == STATUS:
            failure = parse_status_end(payload)
            if failure is not None:
                raise failure
            return AttachEnd.ENDED


_EXPECTED = (ConnectionRejected, HandshakeError, errors.KubeError, OSError, trio.TooSlowError)


async def _heartbeat(
    ws: WebSocketConnection, stream: trio.abc.AsyncResource, interval_s: float, timeout_s: float
) -> None:
    """Ping every `interval_s`; without a pong in `timeout_s`, cut the stream
    (the reader then ends as DROPPED)."""
    while True:
        await trio.sleep(interval_s)
        with trio.move_on_after(timeout_s):
            try:
                await ws.ping()
            except ConnectionClosed:
                return
            continue
        log.info("attach: no pong in %.0f s; dropping the connection", timeout_s)
        await trio.aclose_forcefully(stream)
        return


def _single(group: BaseExceptionGroup[Any]) -> BaseException | None:
    """The one non-cancellation exception in a group, if that is all it holds."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    real = [e for e in leaves if not isinstance(e, trio.Cancelled)]
    return real[0] if len(real) == 1 and len(leaves) == 1 else None


async def _connect(client: KubeClient) -> trio.SSLStream[trio.SocketStream]:
    url = urlsplit(client.connection.server)
    host, port = url.hostname or "localhost", url.port or 443
    tcp = await trio.open_tcp_stream(host, port)
    stream = trio.SSLStream(
        tcp,
        client.ssl_context,
        https_compatible=True,
        server_hostname=client.connection.tls_server_name or host,
    )
    # Handshaken here, not by the WebSocket's first send: trio-websocket
    # waits forever for a handshake whose request could not be sent (a peer
    # that resets at once, as a restarting apiserver's port does).
    try:
        await stream.do_handshake()
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return stream


async def _attach_once(
    client: KubeClient,
    pod: str,
    container: str,
    tty: bool,
    protocols: Sequence[str],
    outputs: OutputCallbacks,
    heartbeat: tuple[float, float],
    task_status: trio.TaskStatus[Terminal],
) -> AttachEnd:
    headers = await client.headers(OPERATION)
    extra = [(k.encode(), v.encode()) for k, v in headers.items() if k == "Authorization"]
    host = urlsplit(client.connection.server).netloc
    try:
        with trio.fail_after(client.policy.deadline_s):
            stream = await _connect(client)
    except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
        raise errors.classify(OPERATION, None) from exc
    async with stream, trio.open_nursery() as nursery:
        with trio.fail_after(client.policy.deadline_s):
            ws = await wrap_client_stream(
                nursery,
                stream,
                host,
                attach_resource(client, pod, container, tty=tty),
                subprotocols=list(protocols),
                extra_headers=extra,
            )
        terminal = Terminal(ws.subprotocol or protocols[0])
        nursery.start_soon(terminal._pump, ws)
        nursery.start_soon(_heartbeat, ws, stream, *heartbeat)
        task_status.started(terminal)
        try:
            return await _read(ws, outputs)
        finally:
            terminal._close()
            # Cancelled (a stop: the pod is being deleted), the close
            # handshake would only wait on a peer that is going away.
            stopping = trio.current_effective_deadline() == -math.inf
            with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT_S):
                if stopping:
                    await trio.aclose_forcefully(stream)
                else:
                    await ws.aclose()
            nursery.cancel_scope.cancel()


async def run_attach(
    client: KubeClient,
    pod: str,
    *,
    on_output: Callable[[bytes], None],
    on_stderr: Callable[[bytes], None] | None = None,
    container: str = "session",
    tty: bool = True,
    protocols: Sequence[str] = PROTOCOLS,
    ping_interval_s: float = PING_INTERVAL_S,
    pong_timeout_s: float = PONG_TIMEOUT_S,
    task_status: trio.TaskStatus[Terminal] = trio.TASK_STATUS_IGNORED,
) -> AttachEnd:
    """Attach to `pod`'s `container` until it ends; see the module docstring.

    `on_output` gets the terminal's bytes (with `tty=False`: the stdout's)
    in order, `on_stderr` the stderr's (None: `on_output` gets those too);
    both synchronous, must not block. `task_status.started(terminal)` once
    the WebSocket is up.

    Raises:
        errors.KubeError: the attach was refused or failed (client-safe text).
    """
    for attempt in range(2):
        try:
            return await _attach_once(
                client,
                pod,
                container,
                tty,
                protocols,
                (on_output, on_stderr or on_output),
                (ping_interval_s, pong_timeout_s),
                task_status,
            )
        except BaseExceptionGroup as group:
            single = _single(group)
            if not isinstance(single, _EXPECTED):
                raise
            error: BaseException = single
        except _EXPECTED as exc:
            error = exc
        if isinstance(error, ConnectionRejected):
            if error.status_code == 401 and attempt == 0:
                client.invalidate_credentials()
                continue
            raise errors.classify_answer(OPERATION, error.status_code, error.body or b"")
        if isinstance(error, errors.KubeError):
            raise error
        raise errors.classify(OPERATION, None) from error
    raise AssertionError("unreachable")
