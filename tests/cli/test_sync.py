"""The sync of `runnerd watch`: a directory's edits as change sets (pure parts)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from runnerd.client.bundle import collect_bundle, collect_tree
from runnerd.client.sync import (
    Changes,
    Scanner,
    SyncState,
    Write,
    describe,
    plan_change_sets,
    sha256_hex,
)


def tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def test_sync_the_bundle_as_first_state_writes_nothing(tmp_path: Path) -> None:
    root = tree(tmp_path, {"main.sh": "echo hi", "lib/a.sh": "a", ".gitignore": "*.log\n"})
    state = SyncState.seed_from_bundle(collect_bundle(root))
    assert not Scanner(root).changes(state)


def test_sync_finds_edits_new_files_and_deletes(tmp_path: Path) -> None:
    root = tree(tmp_path, {"main.sh": "echo hi", "old.txt": "x"})
    state = SyncState.seed_from_bundle(collect_bundle(root))
    (root / "main.sh").write_text("echo bye")
    (root / "old.txt").unlink()
    tree(root, {"new/b.txt": "b"})
    changes = Scanner(root).changes(state)
    assert [(w.path, w.data) for w in changes.writes] == [
        ("main.sh", b"echo bye"),
        ("new/b.txt", b"b"),
    ]
    assert changes.deletes == ("old.txt",)


def test_sync_respects_gitignore_and_skips_git_and_node_modules(tmp_path: Path) -> None:
    root = tree(tmp_path, {"main.sh": "", ".gitignore": "*.log\nbuild/\n"})
    state = SyncState.seed_from_bundle(collect_bundle(root))
    tree(root, {"debug.log": "x", "build/out": "x", ".git/HEAD": "x", "node_modules/d/i.js": "x"})
    assert not Scanner(root).changes(state)
    # A .gitignore edit re-includes what it stops excluding.
    (root / ".gitignore").write_text("build/\n")
    changes = Scanner(root).changes(state)
    assert [w.path for w in changes.writes] == [".gitignore", "debug.log"]


def test_sync_leaves_a_local_telo_cache_out_of_the_workspace(tmp_path: Path) -> None:
    # A workspace never lists `.telo` (the kernel's cache there): a local one
    # is neither bundled for a watch session nor synced over the kernel's.
    root = tree(tmp_path, {"telo.yaml": "kind: x", ".telo/cache/m.json": "{}"})
    bundle = collect_tree(root, "telo.yaml")
    assert [p for p, _ in bundle.files] == ["telo.yaml"]
    state = SyncState.seed_from_bundle(bundle)
    tree(root, {".telo/cache/n.json": "{}"})
    assert not Scanner(root).changes(state)
    run_bundle = sorted(p for p, _ in collect_bundle(root).files)  # `run` keeps sending it
    assert run_bundle == [".telo/cache/m.json", ".telo/cache/n.json", "telo.yaml"]


def test_sync_sends_binary_files_as_base64(tmp_path: Path) -> None:
    root = tree(tmp_path, {"main.sh": "", "img.bin": b"\xff\x00\xfe"})
    bundle = collect_bundle(root)
    assert bundle.skipped == ["img.bin"]  # a bundle carries text only
    changes = Scanner(root).changes(SyncState.seed_from_bundle(bundle))
    (entry,) = [w.entry() for w in changes.writes]
    assert entry == {"path": "img.bin", "content": base64.b64encode(b"\xff\x00\xfe").decode(),
                     "encoding": "base64"}  # fmt: skip


def test_sync_rereads_a_file_only_when_its_stat_changed(tmp_path: Path) -> None:
    root = tree(tmp_path, {"a.txt": "one"})
    scanner = Scanner(root)
    state = SyncState()
    (write,) = scanner.changes(state).writes
    state.applied(plan_change_sets(Changes((write,)), None).sets[0])
    assert not scanner.changes(state)
    (root / "a.txt").write_text("two, longer")
    assert [w.data for w in scanner.changes(state).writes] == [b"two, longer"]


def test_sync_state_from_the_workspace_listing(tmp_path: Path) -> None:
    root = tree(tmp_path, {"a.txt": "one", "b.txt": "two"})
    listing = {"files": [{"path": "a.txt", "hash": sha256_hex(b"one")},
                         {"path": "gone.txt", "hash": sha256_hex(b"x")}]}  # fmt: skip
    changes = Scanner(root).changes(SyncState.seed_from_listing(listing))
    assert [w.path for w in changes.writes] == ["b.txt"]
    assert changes.deletes == ("gone.txt",)


def test_sync_plan_splits_under_the_body_limit_and_names_what_cannot_fit() -> None:
    writes = tuple(Write(f"f{i}.txt", b"x" * 100) for i in range(5))
    changes = Changes((*writes, Write("huge.txt", b"y" * 1000)), ("old.txt",))
    plan = plan_change_sets(changes, 400)
    assert [p for p, _ in plan.too_big] == ["huge.txt"]
    assert [s.paths() for s in plan.sets] == [
        ["f0.txt", "f1.txt"], ["f2.txt", "f3.txt"], ["f4.txt", "old.txt"]
    ]  # fmt: skip
    for change_set in plan.sets:
        assert len(json.dumps(change_set.body())) <= 400
    assert plan_change_sets(Changes(), 400).sets == ()


def test_sync_describe_names_a_few_paths() -> None:
    writes = tuple(Write(f"f{i}", b"") for i in range(5))
    (change_set,) = plan_change_sets(Changes(writes, ("x",)), None).sets
    assert describe(change_set) == "wrote f0, f1, f2 +2; deleted x"
