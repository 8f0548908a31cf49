"""The pure readers of the HTTP edge: resume cursors and WebSocket resize messages."""

from __future__ import annotations

import json

import pytest

from runnerd.http.events import parse_cursor
from runnerd.http.io import parse_resize


@pytest.mark.parametrize(
    ("raw", "cursor"),
    [(None, 0), ("", 0), ("7", 7), (" 12 ", 12), ("-3", 0), ("abc", 0), ("1.5", 0)],
)
def test_parse_cursor_reads_non_negative_integers_and_falls_back_to_zero(
    raw: str | None, cursor: int
) -> None:
    assert parse_cursor(raw) == cursor


def _resize(cols: object, rows: object) -> str:
    return json.dumps({"type": "resize", "cols": cols, "rows": rows})


def test_parse_resize_floors_and_clamps_to_the_contract_bounds() -> None:
    assert parse_resize(_resize(80, 24)) == (80, 24)
    assert parse_resize(_resize(80.9, 24.2)) == (80, 24)
    assert parse_resize(_resize(20_000, 10_000)) == (10_000, 10_000)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        json.dumps({"type": "hello", "cols": 80, "rows": 24}),
        _resize("80", 24),
        _resize(True, 24),
        _resize(0.5, 24),
        _resize(80, 0),
        _resize(80, None),
        '{"type":"resize","cols":1e999,"rows":24}',
    ],
)
def test_parse_resize_ignores_anything_else(text: str) -> None:
    assert parse_resize(text) is None


@pytest.mark.parametrize(
    ("header", "name"),
    [("LocalHost:8062", "localhost"), ("[::1]:8062", "::1"), ("[::1]", "::1"),
     ("127.0.0.1", "127.0.0.1"), ("evil.example.:80", "evil.example"), ("::1", "::1")],
)  # fmt: skip
def test_host_name_strips_port_brackets_and_case(header: str, name: str) -> None:
    from runnerd.http.guard import host_name

    assert host_name(header) == name


def test_host_refusal_allows_loopback_own_address_and_listed_names_only() -> None:
    from runnerd.http.guard import host_refusal

    server = ("10.0.0.5", 8062)
    for ok in ("localhost:8062", "127.0.0.1:8062", "127.9.9.9", "[::1]:1", "10.0.0.5:8062",
               "runner.example"):  # fmt: skip
        assert host_refusal(ok, server, ("runner.example",)) is None, ok
    for bad in ("evil.example", "localhost.evil.example", "10.0.0.6", "runner.example.evil", ""):
        assert host_refusal(bad, server, ("runner.example",)) is not None, bad
    assert host_refusal("evil.example", None, ()) is None  # a UNIX socket: no page reaches it


def test_request_host_is_an_absolute_targets_authority_else_the_host_header() -> None:
    from runnerd.http.guard import request_host

    assert request_host({"path": "/v1/sessions"}, "127.0.0.1") == "127.0.0.1"
    assert request_host({"path": "http://evil.example/v1/sessions"}, "127.0.0.1") == (
        "evil.example"
    )
    assert request_host({"path": "http://127.0.0.1:8062/v1"}, "evil.example") == "127.0.0.1:8062"
    assert request_host({"path": "*"}, "127.0.0.1") is None  # names no host: refused on TCP


def test_with_reason_fills_only_a_bare_status_line() -> None:
    from runnerd.http.protocol import with_reason

    head = b"HTTP/1.1 204 \r\nx: y\r\n\r\n"
    assert with_reason(head) == b"HTTP/1.1 204 No Content\r\nx: y\r\n\r\n"
    assert with_reason(b"HTTP/1.1 101 \r\n") == b"HTTP/1.1 101 Switching Protocols\r\n"
    for untouched in (b'{"a":1}', b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 599 \r\n", b"1a\r\nHTTP"):
        assert with_reason(untouched) == untouched


def test_connection_cap_leaves_descriptors_for_sessions() -> None:
    from runnerd.http.server import MIN_CONNECTIONS, connection_cap

    assert connection_cap(1000, 2, 1 << 20, 32) == 1000
    # nofile 1024: 64 reserved, 8 per session for 32 sessions, the rest split.
    assert connection_cap(1000, 2, 1024, 32) == (1024 - 64 - 256) // 2
    # Never below the floor: health checks and a few streams always fit.
    assert connection_cap(1000, 1, 100, 32) == MIN_CONNECTIONS
    assert connection_cap(4, 1, 100, 32) == 4


@pytest.mark.parametrize(
    ("address", "remote"),
    [("tcp:127.0.0.1:8062", False), ("tcp:[::1]:1", False), ("unix:/run/x.sock", False),
     ("tcp:0.0.0.0:8062", True), ("tcp:[::]:8062", True), ("tcp:192.168.1.5:80", True)],
)  # fmt: skip
def test_an_inherited_listener_off_loopback_counts_as_remote(address: str, remote: bool) -> None:
    # What `refuse_remote` checks on sockets adopted from systemd or `fd:N`,
    # which config parsing cannot see.
    from runnerd.daemon.listeners import is_remote_address

    assert is_remote_address(address) is remote
