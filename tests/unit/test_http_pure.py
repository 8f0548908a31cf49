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
