"""Workspace paths: the contract's normal form, every `invalid_path` rule,
the listing filter and order, the file route's query."""

from __future__ import annotations

import posixpath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runnerd.watch.errors import WatchError, WorkspacePathError
from runnerd.watch.paths import (
    MAX_PATH_BYTES,
    MAX_SEGMENT_BYTES,
    is_listed,
    is_pruned,
    listing_order,
    normalise_workspace_path,
    parse_file_query,
)


@pytest.mark.parametrize(
    ("path", "normal"),
    [
        ("./a//b", "a/b"),
        ("a", "a"),
        ("a/b/c.txt", "a/b/c.txt"),
        ("a/./b/", "a/b"),
        ("././x", "x"),
        (".hidden/..dots/...", ".hidden/..dots/..."),
        ("a\\b", "a\\b"),  # a backslash is a legal POSIX name
        ("é/ü.txt", "é/ü.txt"),
    ],
)
def test_paths_normal_form_drops_empty_and_dot_segments(path: str, normal: str) -> None:
    assert normalise_workspace_path(path) == normal


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/etc/passwd", "is absolute"),
        ("//a", "is absolute"),
        ("..", "has a '..' segment"),
        ("a/../b", "has a '..' segment"),
        ("a/..", "has a '..' segment"),
        ("a\0b", "contains a NUL byte"),
        ("", "is empty"),
        (".", "is empty"),
        ("./", "is empty"),
        (".//./", "is empty"),
        ("a" * (MAX_SEGMENT_BYTES + 1), f"has a segment longer than {MAX_SEGMENT_BYTES} bytes"),
        ("é" * 128, f"has a segment longer than {MAX_SEGMENT_BYTES} bytes"),  # 256 bytes
        ("/".join(["a" * 200] * 6), f"is longer than {MAX_PATH_BYTES} bytes"),
    ],
)
def test_paths_every_invalid_path_rule(path: str, reason: str) -> None:
    with pytest.raises(WorkspacePathError) as info:
        normalise_workspace_path(path)
    assert (info.value.status_hint, info.value.code) == (400, "invalid_path")
    assert reason in info.value.message


def test_paths_limits_are_inclusive() -> None:
    segment = "a" * MAX_SEGMENT_BYTES
    assert normalise_workspace_path(segment) == segment
    # 255 * 3 + 254 + 1 bytes of names and 4 separators: exactly 1024.
    longest = "/".join([segment] * 3 + ["a" * 254, "b"])
    assert len(longest.encode()) == MAX_PATH_BYTES
    assert normalise_workspace_path(longest) == longest
    with pytest.raises(WorkspacePathError):
        normalise_workspace_path(longest + "c")


def test_paths_lengths_are_measured_on_the_normal_form() -> None:
    # Dropped segments do not count: `./` repeated is still the short path.
    assert normalise_workspace_path("./" * 1000 + "a") == "a"


def test_paths_long_paths_are_shortened_in_messages() -> None:
    with pytest.raises(WorkspacePathError) as info:
        normalise_workspace_path("x" * 5000)
    assert len(info.value.message) < 200


SEGMENTS = st.one_of(
    st.sampled_from(["", ".", "..", "a", "b.txt", "node_modules", ".git", "...", "é"]),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
)
PATHS = st.lists(SEGMENTS, max_size=8).map("/".join) | st.text(max_size=60)


@settings(max_examples=500, deadline=None)
@given(PATHS)
def test_paths_property_a_normal_form_stays_inside_and_is_stable(path: str) -> None:
    try:
        normal = normalise_workspace_path(path)
    except WorkspacePathError:
        return
    # Idempotent, and equal to what the client meant once empty and `.` are dropped.
    assert normalise_workspace_path(normal) == normal
    segments = normal.split("/")
    assert all(s not in ("", ".", "..") for s in segments)
    assert "\0" not in normal and not normal.startswith("/")
    # Joined to any root, the path stays under it.
    joined = posixpath.normpath(posixpath.join("/root/ws", normal))
    assert joined.startswith("/root/ws/")
    assert len(normal.encode("utf-8", "surrogateescape")) <= MAX_PATH_BYTES


@settings(max_examples=300, deadline=None)
@given(st.lists(SEGMENTS, min_size=1, max_size=8))
def test_paths_property_doubled_slashes_and_dots_change_nothing(segments: list[str]) -> None:
    plain, padded = "/".join(segments), "./" + "//".join(segments) + "/."
    results = []
    for path in (plain, padded):
        try:
            results.append(normalise_workspace_path(path))
        except WorkspacePathError as exc:
            results.append(exc.code)
    if not plain.startswith("/"):
        assert results[0] == results[1]


# --- the listing


@pytest.mark.parametrize(
    ("path", "listed"),
    [
        ("a.txt", True),
        ("src/main.ts", True),
        ("node_modules/x/index.js", False),
        ("a/node_modules/b", False),
        (".git/HEAD", False),
        ("deep/er/.telo/cache", False),
        (".git", True),  # a file named .git (a worktree's) is not under the directory
        ("node_modules", True),
        ("my_node_modules/x", True),
        (".github/workflows/ci.yml", True),
    ],
)
def test_paths_listing_skips_excluded_directories_at_any_depth(path: str, listed: bool) -> None:
    assert is_listed(path) is listed


def test_paths_a_walk_prunes_excluded_directories() -> None:
    assert is_pruned("a/node_modules") and is_pruned(".git") and is_pruned("x/.telo")
    assert not is_pruned("a/src") and not is_pruned("node_modules_x")


def test_paths_listing_is_sorted_by_bytes() -> None:
    paths = ["b", "a/z", "B", "é", "a.txt", "a/b", "node_modules/x", "Z"]
    assert listing_order(paths) == ["B", "Z", "a.txt", "a/b", "a/z", "b", "é"]


# --- the file route's query


def test_paths_file_query_defaults_to_utf8() -> None:
    assert parse_file_query("./src//a.ts", None) == ("src/a.ts", "utf8")
    assert parse_file_query("a", "base64") == ("a", "base64")


def test_paths_file_query_checks_the_path_before_the_encoding() -> None:
    for path in (None, "../x"):
        with pytest.raises(WorkspacePathError):
            parse_file_query(path, "hex")
    with pytest.raises(WatchError) as info:
        parse_file_query("a", "hex")
    assert (info.value.status_hint, info.value.code) == (400, "invalid_request")
    assert "'hex'" in info.value.message
