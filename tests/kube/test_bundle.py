"""runnerd.kube.bundle: the reproducible tar.gz (unpacked by the real `tar`)
and the single-use, expiring, constant-time bundle tokens."""

from __future__ import annotations

import gzip
import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from runnerd.backend import BundleSpec
from runnerd.kube.bundle import (
    TOKEN_BYTES,
    TOKEN_TTL_S,
    BundleArchiveError,
    BundleTokens,
    build_bundle_archive,
)

FILES = (
    ("telo.yaml", "kind: Application\n"),
    ("lib/deep/x.txt", "ünïcode ✓\n"),
    ("lib/a.sh", "echo a\n"),
    ("z" * 120 + "/long-name.txt", "a path longer than ustar's 100 bytes\n"),
)


def test_archive_unpacks_with_the_real_tar(tmp_path: Path) -> None:
    archive = tmp_path / "b.tar.gz"
    archive.write_bytes(build_bundle_archive(BundleSpec("telo.yaml", FILES)))
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(out)], check=True)
    for path, contents in FILES:
        assert (out / path).read_text(encoding="utf-8") == contents
    assert (out / "lib/a.sh").stat().st_mode & 0o777 == 0o644


def test_archive_is_reproducible_whatever_the_file_order() -> None:
    one = build_bundle_archive(BundleSpec("telo.yaml", FILES))
    two = build_bundle_archive(BundleSpec("telo.yaml", tuple(reversed(FILES))))
    assert one == two
    assert one[4:8] == b"\0\0\0\0"  # gzip header mtime 0
    with tarfile.open(fileobj=io.BytesIO(one), mode="r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    dirs = {m.name: m.mode for m in members if m.isdir()}
    assert dirs == {"lib": 0o755, "lib/deep": 0o755, "z" * 120: 0o755}
    assert b"x.txt" in gzip.decompress(one)


@pytest.mark.parametrize(
    "path",
    [
        "../x",
        "/etc/passwd",
        "a/../../x",
        "a//b",
        "./a",
        "a/./b",
        "",
        ".",
        "..",
        "a\\b",
        "a\0b",
        "a/",
    ],
)
def test_archive_rechecks_every_path(path: str) -> None:
    with pytest.raises(BundleArchiveError, match="bundle path"):
        build_bundle_archive(BundleSpec("telo.yaml", (("telo.yaml", ""), (path, "x"))))


def test_archive_refuses_duplicates_and_file_directory_clashes() -> None:
    with pytest.raises(BundleArchiveError, match="twice"):
        build_bundle_archive(BundleSpec("a", (("a", "1"), ("a", "2"))))
    with pytest.raises(BundleArchiveError, match="both a file and a directory"):
        build_bundle_archive(BundleSpec("a", (("a", "1"), ("a/b", "2"))))


def test_tokens_are_single_use_and_per_session() -> None:
    tokens = BundleTokens()
    token = tokens.stage("s1", b"archive", now=0.0)
    assert len(token) == 2 * TOKEN_BYTES and int(token, 16) >= 0
    assert tokens.stage("s2", b"other", now=0.0) != token
    assert tokens.redeem("s2", token, now=1.0) is None  # another session's token
    assert tokens.redeem("s1", token[:-1] + "x", now=1.0) is None  # wrong token: still staged
    assert tokens.redeem("s1", "ü" * 48, now=1.0) is None  # non-ASCII never raises
    assert tokens.redeem("s1", token, now=1.0) == b"archive"
    assert tokens.redeem("s1", token, now=1.0) is None  # single use
    assert len(tokens) == 1


def test_tokens_expire_after_five_minutes() -> None:
    tokens = BundleTokens()
    token = tokens.stage("s1", b"a", now=100.0)
    assert TOKEN_TTL_S == 300.0
    assert tokens.redeem("s1", token, now=100.0 + TOKEN_TTL_S) is None
    assert len(tokens) == 0
    tokens.stage("s2", b"b", now=0.0)
    tokens.stage("s3", b"c", now=250.0)
    assert tokens.expire(now=320.0) == 1
    assert len(tokens) == 1


def test_tokens_drop_when_the_session_ends_and_restage_replaces() -> None:
    tokens = BundleTokens()
    first = tokens.stage("s1", b"a", now=0.0)
    second = tokens.stage("s1", b"b", now=0.0)
    assert tokens.redeem("s1", first, now=1.0) is None
    tokens.drop("s1")
    tokens.drop("s1")
    assert tokens.redeem("s1", second, now=1.0) is None
