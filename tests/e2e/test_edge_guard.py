"""The browser guard, hit the way a web page or a rebinding attacker would.

A real daemon with a loopback TCP listener (what `make run` serves), real
TCP clients. A refused request must change nothing: the workload of a
refused start never runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import trio

from tests.e2e.contract_client import bundle_body, wait_terminal
from tests.e2e.edge import raw_exchange, tcp_daemon
from tests.shared_daemon import OnBackend

EDITOR = "https://editor.example"
EVIL = "http://evil.example"


# A workload that ran says so by its exit code: a session has no way to
# leave a file on the host (its /tmp is its own: tests/daemon/test_privileges.py),
# so a refused start is shown to run nothing by no session being registered.
RAN = bundle_body("exit 7")


async def test_drive_by_simple_post_from_another_origin_runs_nothing(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    async with tcp_daemon(
        tmp_path, on_backend.overrides({"server": {"cors_origins": [EDITOR]}})
    ) as (daemon, port):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            body = httpx.Request("POST", "/", json=RAN).content
            # What a page can send with no preflight: a text/plain "simple" POST.
            drive_by = await client.post(
                "/v1/sessions",
                content=body,
                headers={"origin": EVIL, "content-type": "text/plain"},
            )
            # Even a well-formed JSON POST from that origin (after a preflight
            # the browser would not pass) is refused.
            json_post = await client.post(
                "/v1/sessions", content=body,
                headers={"origin": EVIL, "content-type": "application/json"},
            )  # fmt: skip
            # No Origin (curl) but text/plain: still not a JSON request.
            plain = await client.post(
                "/v1/sessions", content=body, headers={"content-type": "text/plain"}
            )
            replay = await client.get("/v1/sessions/whatever/events", headers={"origin": EVIL})
            # The listed editor may start sessions (its workload runs: exit 7).
            allowed = await client.post(
                "/v1/sessions", json=RAN,
                headers={"origin": EDITOR, "content-type": "application/json"},
            )  # fmt: skip
            ended = await wait_terminal(client, allowed.json()["sessionId"])
            listed = (await client.get("/v1/sessions")).json()["sessions"]
            refused_ran = await client.post(
                "/v1/probe",
                json={"config": {"image": "sh", "pullPolicy": "missing"}},
                headers={"origin": EVIL},
            )
    for response in (drive_by, json_post, replay, refused_ran):
        assert response.status_code == 403, response.text
        assert response.json()["error"] == "forbidden_origin"
        assert "access-control-allow-origin" not in response.headers
    assert plain.status_code == 415 and plain.json()["error"] == "unsupported_media_type"
    assert "application/json" in plain.json()["message"]
    assert allowed.status_code == 201 and ended == {"kind": "exited", "code": 7}
    assert allowed.headers["access-control-allow-origin"] == EDITOR
    # Exactly one session was ever registered, the allowed one: no refused
    # request's workload ran.
    assert [session["sessionId"] for session in listed] == [allowed.json()["sessionId"]]


async def test_dns_rebinding_host_is_refused_on_tcp_only(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    overrides = {"server": {"allowed_hosts": ["runner.example"]}}
    async with tcp_daemon(tmp_path, on_backend.overrides(overrides)) as (daemon, port):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            answers = {
                host: await client.get("/v1/health", headers={"host": host})
                for host in (f"evil.example:{port}", "evil.example", f"localhost:{port}",
                             f"127.0.0.1:{port}", "runner.example", "127.0.0.1.evil.example")
            }  # fmt: skip
            started = await client.post(
                "/v1/sessions",
                json=RAN,
                headers={"host": f"evil.example:{port}"},
            )
        async with daemon.client() as unix:
            over_unix = await unix.get("/v1/health", headers={"host": "evil.example"})
            listed = (await unix.get("/v1/sessions")).json()["sessions"]
    for host in (f"evil.example:{port}", "evil.example", "127.0.0.1.evil.example"):
        assert answers[host].status_code == 403, host
        assert answers[host].json()["error"] == "forbidden_host"
        assert "server.allowed_hosts" in answers[host].json()["message"]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "runner.example"):
        assert answers[host].status_code == 200, host
    assert started.status_code == 403 and listed == []
    assert over_unix.status_code == 200  # a UNIX socket is out of any page's reach


async def test_websocket_from_a_rebound_host_closes_4403(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    async with tcp_daemon(tmp_path, on_backend.overrides()) as (_daemon, port):
        handshake = (
            "GET /v1/sessions/nosuchsession/io HTTP/1.1\r\n"
            f"Host: evil.example:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
        answer = await raw_exchange(port, handshake, until=b"forbidden_host")
    head, _, frames = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
    # A close frame: opcode 8, then the code 4403 and the reason.
    assert frames[0] == 0x88 and int.from_bytes(frames[2:4], "big") == 4403
    assert frames[4:] == b"forbidden_host"


async def test_private_network_preflight_is_granted_to_listed_origins_only(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    preflight = {
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type",
        "access-control-request-private-network": "true",
    }
    async with tcp_daemon(
        tmp_path, on_backend.overrides({"server": {"cors_origins": [EDITOR]}})
    ) as (_d, port):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            listed = await client.options("/v1/sessions", headers={**preflight, "origin": EDITOR})
            other = await client.options("/v1/sessions", headers={**preflight, "origin": EVIL})
    assert listed.status_code == 204
    assert listed.headers["access-control-allow-private-network"] == "true"
    assert listed.headers["access-control-allow-origin"] == EDITOR
    assert "content-type" not in listed.headers and "content-length" not in listed.headers
    assert other.status_code == 403
    assert "access-control-allow-private-network" not in other.headers


async def test_status_lines_carry_reason_phrases_and_204_has_no_body_headers(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    async with tcp_daemon(tmp_path, on_backend.overrides()) as (_daemon, port):
        host = f"Host: 127.0.0.1:{port}\r\nConnection: close\r\n"
        health = await raw_exchange(port, f"GET /v1/health HTTP/1.1\r\n{host}\r\n".encode())
        deleted = await raw_exchange(
            port, f"DELETE /v1/sessions/nosuchsession HTTP/1.1\r\n{host}\r\n".encode()
        )
        slashes = await raw_exchange(
            port, f"GET /v1/sessions//events HTTP/1.1\r\n{host}\r\n".encode()
        )
        text_delete = await raw_exchange(
            port,
            f"DELETE /v1/sessions/x HTTP/1.1\r\n{host}content-type: text/plain\r\n"
            "content-length: 2\r\n\r\nhi".encode(),
        )
    assert health.startswith(b"HTTP/1.1 200 OK\r\n")
    head = deleted.partition(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 204 no content\r\n")
    assert b"content-type" not in head and b"content-length" not in head
    # Merged slashes are no redirect to an HTML page: a JSON 404.
    assert slashes.startswith(b"HTTP/1.1 404 Not Found\r\n")
    assert b"application/json" in slashes and b"<html" not in slashes.lower()
    assert b'"error":"not_found"' in slashes
    assert text_delete.startswith(b"HTTP/1.1 415 Unsupported Media Type\r\n")


async def test_a_host_werkzeug_cannot_parse_is_a_json_400(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    async with tcp_daemon(tmp_path, on_backend.overrides()) as (daemon, port):
        answers = [
            await raw_exchange(port, f"GET /v1/health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            for host in ("a..b", "x" * 70 + ".example", ".")
        ]
        upgrade = (
            "GET /v1/sessions/x/io HTTP/1.1\r\nHost: a..b\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        )
        answers.append(await raw_exchange(port, upgrade.encode()))
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
        assert b'"error":"invalid_request"' in answer and b"not a valid host name" in answer
    assert "Traceback" not in daemon.stderr_text()


async def test_a_second_origin_or_host_header_is_refused(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    # The guard read the first Origin and passed the allowed one, while a
    # proxy or a browser-side check may act on the last one.
    async with tcp_daemon(
        tmp_path, on_backend.overrides({"server": {"cors_origins": [EDITOR]}})
    ) as (_, port):
        head = "GET /v1/health HTTP/1.1\r\nConnection: close\r\nHost: 127.0.0.1\r\n"
        origins = await raw_exchange(
            port, f"{head}Origin: {EDITOR}\r\nOrigin: {EVIL}\r\n\r\n".encode()
        )
        hosts = await raw_exchange(port, f"{head}Host: evil.example\r\n\r\n".encode())
        single = await raw_exchange(port, f"{head}Origin: {EDITOR}\r\n\r\n".encode())
    status, _, body = origins.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 400 "), origins
    assert json.loads(body) == {
        "error": "invalid_request",
        "message": "the request carries more than one Origin header",
    }
    # h11 refuses a second Host itself, before runnerd sees the request.
    assert hosts.startswith(b"HTTP/1.1 400 "), hosts
    assert json.loads(hosts.partition(b"\r\n\r\n")[2])["error"] == "invalid_request"
    assert single.startswith(b"HTTP/1.1 200 ")


async def test_what_h11_refuses_still_gets_a_json_error_body(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    head = "Host: 127.0.0.1\r\nconnection: close\r\n"
    requests = {
        "garbage": b"GARBAGE\r\n\r\n",
        "content-length": f"POST /v1/probe HTTP/1.1\r\n{head}Content-Length: abc\r\n\r\n".encode(),
        "chunk": f"POST /v1/probe HTTP/1.1\r\n{head}content-type: application/json\r\n"
        "transfer-encoding: chunked\r\n\r\nZZ\r\n{}\r\n0\r\n\r\n".encode(),
        "long-url": f"GET /v1/health?{'a' * 70_000} HTTP/1.1\r\n{head}\r\n".encode(),
    }
    async with tcp_daemon(tmp_path, on_backend.overrides()) as (_, port):
        answers = {name: await raw_exchange(port, data) for name, data in requests.items()}
    for name, answer in answers.items():
        status, _, body = answer.partition(b"\r\n\r\n")
        expected = b"HTTP/1.1 431 " if name == "long-url" else b"HTTP/1.1 400 "
        assert status.startswith(expected), (name, answer[:300])
        assert b"content-type: application/json" in status.lower(), (name, status)
        problem = json.loads(body)
        assert set(problem) == {"error", "message"}, (name, problem)
        assert problem["message"], name
    assert json.loads(answers["long-url"].partition(b"\r\n\r\n")[2])["error"] == "headers_too_large"


async def test_a_bodyless_post_needs_no_content_type_and_a_text_body_still_does(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    """`curl -X POST .../resume` sends neither a body nor a type: it reaches
    the route (whose own answer here is 404 not_suspended); a text/plain
    body, which a page can send without a preflight, is still refused."""
    async with tcp_daemon(tmp_path, on_backend.overrides()) as (_daemon, port):
        host = f"Host: 127.0.0.1:{port}\r\nConnection: close\r\n"
        bare = await raw_exchange(
            port, f"POST /v1/sessions/nosuchsession/resume HTTP/1.1\r\n{host}\r\n".encode()
        )
        text = await raw_exchange(
            port,
            f"POST /v1/sessions/nosuchsession/resume HTTP/1.1\r\n{host}"
            "content-type: text/plain\r\ncontent-length: 2\r\n\r\nhi".encode(),
        )
    assert bare.startswith(b"HTTP/1.1 404 Not Found\r\n"), bare[:200]
    assert b'"error":"not_suspended"' in bare
    assert text.startswith(b"HTTP/1.1 415 Unsupported Media Type\r\n"), text[:200]


async def test_a_body_sent_to_a_bodyless_route_is_read_before_the_answer(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    """A client that sends `{}` to `POST .../resume` or DELETE (as an editor
    may) after `Expect: 100-continue` is asked for it and then answered, on
    a connection it can go on using. Before, the route answered without
    reading it: the client's body then met a connection closing under it
    (EPIPE, or a reset that could cost the answer)."""
    async with tcp_daemon(tmp_path, on_backend.overrides()) as (_daemon, port):
        host = f"Host: 127.0.0.1:{port}\r\n"
        head = "content-type: application/json\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\n"
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            heads = []
            for request in (
                "POST /v1/sessions/nosuchsession/resume HTTP/1.1",
                "DELETE /v1/sessions/nosuchsession HTTP/1.1",
            ):
                await stream.send_all(f"{request}\r\n{host}{head}".encode())
                heads.append(await _receive_until(stream, b"\r\n\r\n"))
                await stream.send_all(b"{}")
                heads.append(await _receive_until(stream, b"\r\n\r\n"))
    assert [h.split(b"\r\n", 1)[0] for h in heads] == [
        b"HTTP/1.1 100 Continue", b"HTTP/1.1 404 Not Found",
        b"HTTP/1.1 100 Continue", b"HTTP/1.1 204 No Content",
    ], heads  # fmt: skip


async def _receive_until(stream: trio.SocketStream, end: bytes) -> bytes:
    """One response's head (up to and including `end`); its body, by its
    content-length, is read and dropped, so the next read starts at the next
    response."""
    data = bytearray()
    with trio.fail_after(10):
        while end not in data:
            chunk = await stream.receive_some(1)
            if not chunk:
                return bytes(data)
            data += chunk
        length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", bytes(data))
        left = int(length.group(1)) if length else 0
        while left > 0:
            chunk = await stream.receive_some(left)
            if not chunk:
                break
            left -= len(chunk)
    return bytes(data)
