"""Unit tests for runnerd.session.paths: the bundle traversal guard."""

from __future__ import annotations

import pytest

from runnerd.session.paths import BundlePathError, normalise_bundle_path


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        ("telo.yaml", "telo.yaml"),
        ("/telo.yaml", "telo.yaml"),
        ("///abs/x.yaml", "abs/x.yaml"),
        ("a/./b//c.txt", "a/b/c.txt"),
        ("a/../b.txt", "b.txt"),
        ("dir/", "dir"),
        ("./x", "x"),
        ("..x/y", "..x/y"),
        ("a/..b", "a/..b"),
        ("spaces are fine.txt", "spaces are fine.txt"),
        ("ünïcode/файл", "ünïcode/файл"),
    ],
)
def test_paths_normalise_keeps_paths_inside_the_bundle(given: str, normal: str) -> None:
    assert normalise_bundle_path(given) == normal


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("../x", "bundle path '../x' escapes the bundle"),
        ("..", "bundle path '..' escapes the bundle"),
        ("/../etc/passwd", "bundle path '/../etc/passwd' escapes the bundle"),
        ("a/../../x", "bundle path 'a/../../x' escapes the bundle"),
        ("a/b/../../..", "bundle path 'a/b/../../..' escapes the bundle"),
        ("", "bundle path '' is empty"),
        ("/", "bundle path '/' is empty"),
        (".", "bundle path '.' names the bundle root, not a file"),
        ("a/..", "bundle path 'a/..' names the bundle root, not a file"),
        ("./", "bundle path './' names the bundle root, not a file"),
        ("a\0b", "bundle path 'a\\x00b' contains a NUL byte"),
        ("..\\x", "bundle path '..\\\\x' contains a backslash; use '/'"),
    ],
)
def test_paths_normalise_rejects_and_names_the_path(given: str, message: str) -> None:
    with pytest.raises(BundlePathError) as info:
        normalise_bundle_path(given)
    assert str(info.value) == message


def test_paths_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        normalise_bundle_path("../x")


def test_normalise_bundle_path_limits_depth_name_and_length() -> None:
    from runnerd.session.paths import MAX_NAME_BYTES, MAX_PATH_BYTES, MAX_PATH_DEPTH

    at_limits = "/".join(["d"] * (MAX_PATH_DEPTH - 1) + ["f" * MAX_NAME_BYTES])
    assert normalise_bundle_path(at_limits) == at_limits
    with pytest.raises(BundlePathError, match=f"deeper than {MAX_PATH_DEPTH}"):
        normalise_bundle_path("/".join(["d"] * MAX_PATH_DEPTH + ["f"]))
    with pytest.raises(BundlePathError, match=f"name longer than {MAX_NAME_BYTES}"):
        normalise_bundle_path("é" * 128)  # 256 bytes in UTF-8
    with pytest.raises(BundlePathError, match=f"longer than {MAX_PATH_BYTES} bytes"):
        normalise_bundle_path("/".join(["n" * 250] * 5))
    # Depth counts after normalising: `a/../` segments cost nothing.
    assert normalise_bundle_path("a/.." + "/a/.." * 100 + "/f") == "f"
