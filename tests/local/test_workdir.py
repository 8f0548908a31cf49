"""The session directory: layout, modes, refusals and deletion."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from runnerd.backend import BundleSpec
from runnerd.local.workdir import (
    LOCK_NAME,
    WorkdirError,
    claim_workdir,
    prepare_session_dir,
    remove_session_dir,
    remove_tree,
    sweep_workdir,
)


def test_prepare_without_bundle_makes_empty_private_app_and_work(tmp_path: Path) -> None:
    layout = prepare_session_dir(tmp_path / "w", "s1", None)
    assert layout.entry is None
    for directory in (layout.root, layout.app, layout.work):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert list(layout.app.iterdir()) == [] and list(layout.work.iterdir()) == []


@pytest.mark.parametrize("bad", ["/etc/passwd", "a/../../x", "", ".", "a//b", "./a", "..", "a\0b"])
def test_prepare_refuses_paths_that_are_not_plain_and_cleans_up(tmp_path: Path, bad: str) -> None:
    bundle = BundleSpec(entry="main", files=(("main", "x"), (bad, "y")))
    with pytest.raises(WorkdirError, match="is not a plain relative path"):
        prepare_session_dir(tmp_path, "s1", bundle)
    assert not (tmp_path / "s1").exists()


def test_prepare_refuses_an_existing_session_dir(tmp_path: Path) -> None:
    (tmp_path / "s1").mkdir()
    (tmp_path / "s1" / "theirs").write_text("keep")
    with pytest.raises(WorkdirError, match="cannot create the session directory"):
        prepare_session_dir(tmp_path, "s1", None)
    assert (tmp_path / "s1" / "theirs").read_text() == "keep"


def test_prepare_refuses_a_duplicate_file(tmp_path: Path) -> None:
    bundle = BundleSpec(entry="main", files=(("main", "x"), ("main", "y")))
    with pytest.raises(WorkdirError, match="cannot write bundle file 'main'"):
        prepare_session_dir(tmp_path, "s1", bundle)
    assert not (tmp_path / "s1").exists()


def test_remove_deletes_readonly_trees_and_tolerates_absence(tmp_path: Path) -> None:
    layout = prepare_session_dir(tmp_path, "s1", BundleSpec(entry="a/b", files=(("a/b", "x"),)))
    (layout.app / "a").chmod(0o500)
    layout.app.chmod(0o500)
    remove_session_dir(layout.root)
    assert not layout.root.exists()
    remove_session_dir(layout.root)


def test_prepare_refuses_contents_that_are_not_valid_unicode(tmp_path: Path) -> None:
    bundle = BundleSpec(entry="main", files=(("main", "ok \ud800 lone surrogate"),))
    with pytest.raises(WorkdirError, match="bundle file 'main' is not valid Unicode text"):
        prepare_session_dir(tmp_path, "s1", bundle)
    assert not (tmp_path / "s1").exists()


def make_deep_tree(root: Path, depth: int) -> None:
    """`root/dd/dd/...` `depth` levels deep (past PATH_MAX), a file in each."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("dd", dir_fd=fd)
            os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
            sub = os.open("dd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = sub
    finally:
        os.close(fd)


def test_remove_deletes_a_tree_2000_directories_deep(tmp_path: Path) -> None:
    root = tmp_path / "abcdefghijkl"
    make_deep_tree(root, 2000)
    remove_tree(root)
    assert not root.exists()


def test_remove_deletes_symlinks_and_never_follows_them(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    root = tmp_path / "s1"
    (root / "app").mkdir(parents=True)
    (root / "app" / "link").symlink_to(outside)
    (root / "app" / "file-link").symlink_to(outside / "keep")
    remove_session_dir(root)
    assert not root.exists()
    assert (outside / "keep").read_text() == "keep"
    (tmp_path / "root-link").symlink_to(outside)
    remove_session_dir(tmp_path / "root-link")
    assert (outside / "keep").exists() and not (tmp_path / "root-link").exists()


def test_sweep_removes_session_dirs_only(tmp_path: Path) -> None:
    workdir = tmp_path / "w"
    lock = claim_workdir(workdir)
    try:
        make_deep_tree(workdir / "aaaabbbbcccc", 50)
        (workdir / "zzzz2222yyyy").mkdir()
        (workdir / "not-a-session").mkdir()
        (workdir / "abcdefghijkl").write_text("a file, not a session dir")
        assert sweep_workdir(workdir) == ["aaaabbbbcccc", "zzzz2222yyyy"]
        assert sorted(os.listdir(workdir)) == [LOCK_NAME, "abcdefghijkl", "not-a-session"]
    finally:
        os.close(lock)


def test_sweep_empties_the_trash_a_killed_daemon_left(tmp_path: Path) -> None:
    workdir = tmp_path / "w"
    lock = claim_workdir(workdir)
    try:
        (workdir / ".trash").mkdir(mode=0o700)
        make_deep_tree(workdir / ".trash" / "aaaabbbbcccc", 50)
        (workdir / ".trash" / "zzzz2222yyyy" / "app").mkdir(parents=True)
        (workdir / ".trash" / "zzzz2222yyyy" / "app").chmod(0o000)
        assert sweep_workdir(workdir) == ["aaaabbbbcccc", "zzzz2222yyyy"]
        assert os.listdir(workdir) == [LOCK_NAME]
    finally:
        os.close(lock)


def test_a_second_claim_on_a_workdir_is_refused(tmp_path: Path) -> None:
    lock = claim_workdir(tmp_path / "w")
    try:
        with pytest.raises(WorkdirError, match="in use by another runnerd"):
            claim_workdir(tmp_path / "w")
    finally:
        os.close(lock)
    os.close(claim_workdir(tmp_path / "w"))  # released with its fd
