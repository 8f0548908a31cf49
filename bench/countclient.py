"""The leanest `/io` reader a benchmark can have: a blocking socket that
counts the server's payload bytes without ever reading them.

Owns `drain_counting` (run it in a thread: it blocks) and `FrameCounter`,
the frame-boundary follower it uses. `harness.drain_pty_raw`, the trio
client the benchmarks started with, receives each read as a fresh `bytes`,
appends it to a growing `bytearray` and cuts the parsed part off the front:
two copies of every byte in Python, page faults on the growing buffer, and
a trio checkpoint per read, on the same two cores the daemon and the
workload share. This one `recv_into`s one preallocated buffer, looks only
at frame heads (~16 per MiB) and skips payloads by arithmetic, so what is
left is the kernel's copy into that buffer: a throughput figure read
through it is the daemon's, not the client's.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from bench.harness import masked_binary, upgrade_request

BUFFER_BYTES = 1 << 20
_CLOSE, _TEXT, _BINARY, _CONTINUATION = 0x8, 0x1, 0x2, 0x0


class FrameCounter:
    """Follows a server's unmasked frames, fed in order: `received` counts
    output bytes (each data frame's payload less `head_bytes`, its seq and
    any stream byte), `gaps` the text frames saying `"gap"`, `closed` the
    Close frame. `first_output_at`: `time.perf_counter()` when the first
    data frame's head arrived."""

    def __init__(self, head_bytes: int = 4) -> None:
        self.head_bytes = head_bytes
        self.received = self.gaps = 0
        self.closed = False
        self.first_output_at: float | None = None
        self._skip = 0  # payload bytes of the current data frame still to come

    def feed(self, view: memoryview) -> int:
        """Take what `view` holds; return how many of its bytes were used.
        The rest (a frame head, or a text or close frame, cut short) must be
        fed again at the front of the next view, followed by more bytes."""
        at, end = 0, len(view)
        while at < end and not self.closed:
            if self._skip:
                step = min(self._skip, end - at)
                self._skip -= step
                at += step
                continue
            used = self._frame(view[at:end])
            if not used:
                break
            at += used
        return at

    def _frame(self, view: memoryview) -> int:
        """One frame at the start of `view`: the bytes consumed (its head,
        and its whole payload unless it is output, whose payload is skipped
        as it comes), or 0 when its head (or a control payload) is not all
        there yet."""
        if len(view) < 2:
            return 0
        opcode, length, head = view[0] & 0x0F, view[1] & 0x7F, 2
        if length >= 126:
            head = 4 if length == 126 else 10
            if len(view) < head:
                return 0
            length = int.from_bytes(view[2:head], "big")
        if opcode in (_BINARY, _CONTINUATION):
            if self.first_output_at is None:
                self.first_output_at = time.perf_counter()
            self.received += length - self.head_bytes
            self._skip = length
            return head
        if len(view) < head + length:
            return 0
        if opcode == _CLOSE:
            self.closed = True
        elif opcode == _TEXT:
            self.gaps += b'"gap"' in view[head : head + length].tobytes()
        return head + length


def drain_counting(
    socket_path: Path, sid: str, *, send: bytes = b"", head_bytes: int = 4
) -> tuple[int, int, float]:
    """Read the session's `/io` to its Close (blocking): (output bytes, gap
    messages, seconds from the first output frame to the Close), as
    `harness.drain_pty_raw` returns them. `send` goes to the workload's
    stdin right after the handshake."""
    counter = FrameCounter(head_bytes)
    buffer = bytearray(BUFFER_BYTES)
    view = memoryview(buffer)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(socket_path))
        sock.sendall(upgrade_request(f"/v1/sessions/{sid}/io"))
        held = _read_response_head(sock, buffer)
        if send:
            sock.sendall(masked_binary(send))
        while True:
            used = counter.feed(view[:held])
            if counter.closed:
                break
            left = held - used
            buffer[:left] = buffer[used:held]  # a cut-short head: a few bytes
            got = sock.recv_into(view[left:])
            if not got:
                raise RuntimeError("connection ended without a close frame")
            held = left + got
    end = time.perf_counter()
    return counter.received, counter.gaps, end - (counter.first_output_at or end)


def _read_response_head(sock: socket.socket, buffer: bytearray) -> int:
    """Read the upgrade's answer; leave what follows its head at the front
    of `buffer` and return its length."""
    head = b""
    while b"\r\n\r\n" not in head:
        more = sock.recv(65536)
        if not more:
            raise RuntimeError("connection ended during the upgrade")
        head += more
    status, _, rest = head.partition(b"\r\n\r\n")
    if not status.startswith(b"HTTP/1.1 101"):
        raise RuntimeError(f"no upgrade: {status[:80]!r}")
    buffer[: len(rest)] = rest
    return len(rest)
