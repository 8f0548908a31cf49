"""The session directory: layout, modes, refusals and deletion."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from runnerd.backend import BundleSpec
from runnerd.local.workdir import WorkdirError, prepare_session_dir, remove_session_dir


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
