"""The bundler's `.gitignore` rules and entry choice (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runnerd.client.bundle import BundleError, collect_bundle, is_ignored, parse_gitignore


@pytest.mark.parametrize(
    ("pattern", "path", "is_dir", "ignored"),
    [
        ("*.log", "a.log", False, True),
        ("*.log", "deep/er/a.log", False, True),
        ("/top.txt", "top.txt", False, True),
        ("/top.txt", "sub/top.txt", False, False),
        ("dist/", "dist", True, True),
        ("dist/", "dist", False, False),
        ("docs/*.md", "docs/a.md", False, True),
        ("docs/*.md", "docs/sub/a.md", False, False),
        ("**/cache", "a/b/cache", True, True),
        ("a/**/z", "a/b/c/z", False, True),
        ("file[0-9]", "file7", False, True),
        ("\\#hash", "#hash", False, True),
    ],
)
def test_gitignore_patterns_match_as_git_does(
    pattern: str, path: str, is_dir: bool, ignored: bool
) -> None:
    assert is_ignored(parse_gitignore(pattern), path, is_dir) is ignored


def test_the_last_matching_rule_wins_and_nested_files_apply_below_them() -> None:
    rules = parse_gitignore("*.txt\n!keep.txt\n") + parse_gitignore("keep.txt\n", "sub")
    assert is_ignored(rules, "a.txt", False)
    assert not is_ignored(rules, "keep.txt", False)
    assert is_ignored(rules, "sub/keep.txt", False)
    assert not is_ignored(rules, "other/keep.txt", False)


def test_the_entry_is_the_only_file_a_default_name_or_asked_for(tmp_path: Path) -> None:
    (tmp_path / "solo").mkdir()
    (tmp_path / "solo" / "job.sh").write_text("true")
    assert collect_bundle(tmp_path / "solo").entry == "job.sh"
    (tmp_path / "two").mkdir()
    for name in ("main.py", "helper.py"):
        (tmp_path / "two" / name).write_text("")
    assert collect_bundle(tmp_path / "two").entry == "main.py"
    assert collect_bundle(tmp_path / "two", "./helper.py").entry == "helper.py"
    with pytest.raises(BundleError, match="not a file of the bundle"):
        collect_bundle(tmp_path / "two", "missing.py")
    (tmp_path / "two" / "main.py").rename(tmp_path / "two" / "other.py")
    with pytest.raises(BundleError, match=r"give --entry FILE \(top-level files: helper.py, other"):
        collect_bundle(tmp_path / "two")
    single = collect_bundle(tmp_path / "solo" / "job.sh")
    assert (single.entry, single.files) == ("job.sh", [("job.sh", "true")])
