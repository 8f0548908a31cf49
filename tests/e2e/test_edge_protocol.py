"""Protocol corners an attacker reaches with raw bytes, each answered at once.

A real daemon, its TCP listener, raw sockets. The daemon's idle and request
timeouts are set far beyond each test's bound, so an answer that arrives
within it came from the fix, not from a timeout (before: the chunk size and
the frame head got no answer until one fired; the absolute-form target got
a 200).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import trio

from tests.e2e.contract_client import start_session
from tests.e2e.edge import raw_exchange, tcp_daemon

SLOW = {"server": {"idle_timeout_seconds": 600, "request_timeout_seconds": 600}}
WITHIN_S = 30.0  # generous, and far below the daemon's own timeouts
HANDSHAKE = (
    b"GET /v1/sessions/{sid}/io HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)


async def _until_closed(stream: trio.abc.Stream) -> bytes:
    received = bytearray()
    with trio.fail_after(WITHIN_S):
        while chunk := await stream.receive_some(65536):
            received += chunk
    return bytes(received)


async def test_an_absolute_form_target_is_judged_by_its_authority(tmp_path: Path) -> None:
    async with tcp_daemon(tmp_path) as (daemon, port):
        evil = await raw_exchange(
            port, b"GET http://evil.example/v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        )
        head, _, body = evil.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n"), evil
        refusal = json.loads(body)
        assert refusal["error"] == "forbidden_host"
        assert "'evil.example'" in refusal["message"]
        # RFC 9112 §3.2.2: the target's authority is the host, whatever Host says.
        own = await raw_exchange(
            port, f"GET http://127.0.0.1:{port}/v1/health HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        assert own.startswith(b"HTTP/1.1 200 OK\r\n"), own


@pytest.mark.parametrize(
    "chunk",
    [
        b"ffffffffffffffffffff\r\n",  # 2^80 - 1: h11 reads 20 hex digits
        # Just over 2^63 with body bytes in the same write: the reader hands
        # those out at once, and what is left of the chunk is under the bound.
        b"8000000000000001\r\n{}",
        b"8000000000000000\r\n{",
    ],
)
async def test_a_chunk_size_over_2_63_is_a_400_at_once(tmp_path: Path, chunk: bytes) -> None:
    async with tcp_daemon(tmp_path, SLOW) as (daemon, port):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(
                b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk
            )
            answer = await _until_closed(stream)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
        assert json.loads(body)["error"] == "invalid_request"
        async with daemon.client() as client:
            assert (await client.get("/v1/sessions")).json() == {"sessions": []}  # nothing started


@pytest.mark.parametrize("declared", [2**63, 2**63 - 1, 16 * 2**20 + 1])
async def test_a_frame_head_declaring_more_than_the_message_limit_closes_1009(
    tmp_path: Path, declared: int
) -> None:
    # hypercorn's websocket_max_message_size is 16 MiB.
    async with tcp_daemon(tmp_path, SLOW) as (daemon, port):
        async with daemon.client() as client:
            sid = await start_session(client, "exec sleep 300")
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(HANDSHAKE.replace(b"{sid}", sid.encode()))
            head = b""
            with trio.fail_after(WITHIN_S):
                while b"\r\n\r\n" not in head:
                    head += await stream.receive_some(65536)
            assert head.startswith(b"HTTP/1.1 101 "), head
            # A masked binary frame head with a 64-bit length, and no payload.
            await stream.send_all(b"\x82\xff" + struct.pack("!Q", declared) + b"\0\0\0\0")
            rest = await _until_closed(stream)
        close = b"\x88\x02" + struct.pack("!H", 1009)
        assert rest.endswith(close), rest
        async with daemon.client() as client:
            assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
