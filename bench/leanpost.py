"""The leanest `POST /v1/sessions` a burst benchmark can send: one kept-alive
HTTP/1.1 connection per client over the daemon's UNIX socket, the request's
bytes built once, the answer cut at its head and Content-Length.

Owns `post_sessions`. Why: the 1,000-session burst's 8 httpx clients took
1.2-1.8 ms of the bench's CPU per session (request models, header
normalisation, the transport's pool), on the two cores the daemon, the
inits and slirp4netns share: the burst's figure was partly the client's.
What is left here is a `send` and one or two `recv`s per session.

Error handling: an answer other than 201 raises RuntimeError with its
status line and body, as `harness.start_session` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

_HEAD_END = b"\r\n\r\n"


def _request(body: dict[str, Any], headers: dict[str, str]) -> bytes:
    payload = json.dumps(body).encode()
    lines = [
        "POST /v1/sessions HTTP/1.1",
        "Host: runnerd",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


async def _answer(stream: trio.SocketStream, pending: bytearray) -> tuple[bytes, bytes]:
    """One answer's status line and body; what came after it stays in `pending`."""
    while (end := pending.find(_HEAD_END)) < 0:
        pending += await _more(stream)
    head = bytes(pending[:end]).split(b"\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in head if line.lower().startswith(b"content-length:")
    )
    start = end + len(_HEAD_END)
    while len(pending) < start + length:
        pending += await _more(stream)
    body = bytes(pending[start : start + length])
    del pending[: start + length]
    return head[0], body


async def _more(stream: trio.SocketStream) -> bytes:
    data = await stream.receive_some(65536)
    if not data:
        raise RuntimeError("runnerd closed the connection mid-answer")
    return data


async def post_sessions(
    socket_path: Path,
    body: dict[str, Any],
    headers: dict[str, str],
    count: int,
    ids: set[str],
) -> None:
    """`count` sessions of `body` started on one connection, one after the
    other; each new session's id added to `ids` as its 201 arrives."""
    request = _request(body, headers)
    stream = await trio.open_unix_socket(str(socket_path))
    async with stream:
        pending = bytearray()
        for _ in range(count):
            await stream.send_all(request)
            status, answer = await _answer(stream, pending)
            if b" 201 " not in status:
                raise RuntimeError(f"POST /v1/sessions: {status.decode()} {answer.decode()}")
            ids.add(str(json.loads(answer)["sessionId"]))
