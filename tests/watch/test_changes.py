"""`ChangeSet` parsing: the schema first (strict base64 included, `400
invalid_request` naming the field), then every path (`400 invalid_path`),
one bad path refusing the whole set."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runnerd.contract import RequestError
from runnerd.watch.changes import (
    ChangeSet,
    Write,
    decode_base64,
    normalise_change_set,
    parse_change_set,
)
from runnerd.watch.errors import WorkspacePathError


def parse(body: Any) -> ChangeSet:
    return parse_change_set(json.dumps(body).encode())


def test_changes_writes_then_deletes_in_order_with_contents_decoded() -> None:
    changes = parse({
        "write": [
            {"path": "a.txt", "content": "héllo"},
            {"path": "bin/x", "content": "AAEC/w==", "encoding": "base64"},
            {"path": "u", "content": "plain", "encoding": "utf8"},
        ],
        "delete": ["old", "dir/"],
        "extra": "ignored",
    })  # fmt: skip
    assert changes.writes == (
        Write("a.txt", "héllo".encode()),
        Write("bin/x", b"\x00\x01\x02\xff"),
        Write("u", b"plain"),
    )
    assert changes.deletes == ("old", "dir/")
    assert not changes.touches_nothing


@pytest.mark.parametrize("body", [{}, {"write": [], "delete": []}, {"write": None}])
def test_changes_an_empty_set_touches_nothing(body: dict[str, Any]) -> None:
    assert parse(body).touches_nothing


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"write": {"path": "a"}}, "body.write"),
        ({"write": [{"path": "a"}]}, "body.write[0].content is required"),
        ({"write": [{"content": "x"}]}, "body.write[0].path is required"),
        ({"write": [{"path": 1, "content": "x"}]}, "body.write[0].path must be a string"),
        (
            {"write": [{"path": "a", "content": "x", "encoding": "hex"}]},
            "body.write[0].encoding must be one of 'utf8' or 'base64'",
        ),
        ({"delete": "a"}, "body.delete must be an array"),
        ({"delete": ["a", 3]}, "body.delete[1] must be a string"),
    ],
)
def test_changes_schema_errors_name_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(RequestError) as info:
        parse(body)
    assert info.value.code == "invalid_request"
    assert field in info.value.message


def test_changes_not_json_or_not_an_object_is_invalid_request() -> None:
    for raw in (b"{", b"[]", b""):
        with pytest.raises(RequestError):
            parse_change_set(raw)


@pytest.mark.parametrize(
    "content",
    ["YQ", "YQ=", "YQ===", "Y Q==", "YQ==\n", "YR==", "-_8=", "YWJj!", "=", "a"],
    ids=["no-pad", "short-pad", "excess-pad", "space", "newline", "nonzero-bits",
         "urlsafe-alphabet", "bad-char", "only-pad", "one-char"],
)  # fmt: skip
def test_changes_base64_is_decoded_strictly(content: str) -> None:
    with pytest.raises(RequestError) as info:
        parse({"write": [{"path": "a", "content": "ok"}, {"path": "b", "content": content,
                                                           "encoding": "base64"}]})  # fmt: skip
    assert info.value.code == "invalid_request"
    assert "body.write[1].content is not valid base64" in info.value.message


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_changes_property_every_byte_string_has_one_accepted_spelling(data: bytes) -> None:
    text = base64.b64encode(data).decode()
    assert decode_base64(text) == data


def test_changes_paths_are_normalised_after_the_schema() -> None:
    changes = normalise_change_set(parse({
        "write": [{"path": "./src//a.ts", "content": ""}], "delete": ["x/./y/"],
    }))  # fmt: skip
    assert changes == ChangeSet((Write("src/a.ts", b""),), ("x/y",))


def test_changes_a_bad_path_is_only_found_by_the_path_step() -> None:
    # The schema step accepts it (the route checks the budget in between).
    changes = parse({"write": [{"path": "../x", "content": ""}]})
    with pytest.raises(WorkspacePathError):
        normalise_change_set(changes)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"write": [{"path": "ok", "content": ""}, {"path": "/abs", "content": ""}]},
         "body.write[1].path"),
        ({"write": [{"path": "ok", "content": ""}], "delete": ["fine", "a/../b"]},
         "body.delete[1]"),
        ({"write": [{"path": "", "content": ""}]}, "body.write[0].path"),
    ],
)  # fmt: skip
def test_changes_one_bad_path_refuses_the_whole_set(body: dict[str, Any], field: str) -> None:
    changes = parse(body)
    with pytest.raises(WorkspacePathError) as info:
        normalise_change_set(changes)
    assert (info.value.status_hint, info.value.code) == (400, "invalid_path")
    assert info.value.message.startswith(f"{field}: path ")
