"""WebSocket frames at the byte level (pure): a client's declared lengths,
the server's binary frames.

Owns `binary_frame_pieces`, the server's output frames of the PTY channel
as the heads and payloads one gathering socket write sends (several frames
in one write, the payloads never copied; `binary_frames` joins them), and
`FrameLengths`, which follows the frame boundaries of one client's
byte stream (RFC 6455 §5.2: a 2-byte head, a 2- or 8-byte extended length,
a 4-byte mask, then the payload) and reports a frame that declares more
payload than the limit. wsproto only learns that from the payload itself,
so a head declaring 2^63 - 1 bytes left the connection waiting for them;
this sees it in the head. Payload bytes are skipped, never read.
"""

from __future__ import annotations

import struct

_LENGTH_16 = 126  # the 7-bit length saying "a 16-bit length follows"
_LENGTH_64 = 127  # ... "a 64-bit length follows"
_MASKED = 0x80


def _head_size(head: bytes | bytearray) -> int:
    """Bytes in the frame head that starts with `head` (2 until its second
    byte says what follows)."""
    if len(head) < 2:
        return 2
    extended = {_LENGTH_16: 2, _LENGTH_64: 8}.get(head[1] & 0x7F, 0)
    return 2 + extended + (4 if head[1] & _MASKED else 0)


def _declared(head: bytes | bytearray) -> int:
    short = head[1] & 0x7F
    if short == _LENGTH_16:
        return int.from_bytes(head[2:4], "big")
    if short == _LENGTH_64:
        return int.from_bytes(head[2:10], "big")
    return short


_BINARY_FIN = 0x82  # FIN, opcode 2 (binary); a server's frames are unmasked
_HEAD_16 = struct.Struct(">BBHI")  # head with a 16-bit length, then the seq
_HEAD_64 = struct.Struct(">BBQI")  # ... a 64-bit length, then the seq
_HEAD_7 = struct.Struct(">BBI")


def binary_frames(entries: list[tuple[int, bytes]]) -> bytes:
    """`binary_frame_pieces` joined into one byte string."""
    return b"".join(binary_frame_pieces(entries))


def binary_frame_pieces(entries: list[tuple[int, bytes]]) -> list[bytes]:
    """One unfragmented binary frame per `(seq, payload)`, in order, each
    carrying the 4-byte big-endian seq then the payload (the contract's PTY
    output frame), as the pieces a gathering write sends in turn: each
    frame's head with the seq, then its payload, the very object given
    (nothing is copied)."""
    pieces: list[bytes] = []
    for seq, payload in entries:
        size = 4 + len(payload)
        if size < _LENGTH_16:
            pieces.append(_HEAD_7.pack(_BINARY_FIN, size, seq))
        elif size <= 0xFFFF:
            pieces.append(_HEAD_16.pack(_BINARY_FIN, _LENGTH_16, size, seq))
        else:
            pieces.append(_HEAD_64.pack(_BINARY_FIN, _LENGTH_64, size, seq))
        pieces.append(payload)
    return pieces


class FrameLengths:
    """Follows one client's frames; `feed` returns the declared payload
    length of the first frame over `limit_bytes` in the bytes fed so far,
    or None. Bytes must be fed in order, from the first after the
    handshake; once a frame is over the limit the stream should end (what
    follows is not followed)."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._head = bytearray()  # the head being read
        self._payload_left = 0  # payload bytes of the current frame still to come

    def feed(self, data: bytes) -> int | None:
        at = 0
        while at < len(data):
            if self._payload_left:
                step = min(self._payload_left, len(data) - at)
                self._payload_left -= step
                at += step
                continue
            need = _head_size(self._head) - len(self._head)
            self._head += data[at : at + need]
            at += need
            if len(self._head) < _head_size(self._head):
                continue  # more head to come (in this chunk or the next)
            declared = _declared(self._head)
            self._head.clear()
            if declared > self.limit_bytes:
                return declared
            self._payload_left = declared
        return None
