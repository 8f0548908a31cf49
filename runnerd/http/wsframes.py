"""Frame lengths a WebSocket client declares, read as its bytes arrive (pure).

Owns `FrameLengths`, which follows the frame boundaries of one client's
byte stream (RFC 6455 §5.2: a 2-byte head, a 2- or 8-byte extended length,
a 4-byte mask, then the payload) and reports a frame that declares more
payload than the limit. wsproto only learns that from the payload itself,
so a head declaring 2^63 - 1 bytes left the connection waiting for them;
this sees it in the head. Payload bytes are skipped, never read.
"""

from __future__ import annotations

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
