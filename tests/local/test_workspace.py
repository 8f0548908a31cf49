"""The local workspace directory: the contract's listing, reads, change sets
and checkpoints on real directories, against a workload's tricks
(symlinks out, FIFOs, a directory swapped for a symlink mid-write)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import threading
from pathlib import Path

import pytest
import trio

from runnerd.local.checkpoint import MAGIC
from runnerd.local.workdir import remove_tree
from runnerd.local.workspace import (
    CheckpointError,
    ListedFile,
    Workspace,
    WorkspaceError,
    WorkspaceLimits,
)
from runnerd.watch.changes import ChangeSet, Write
from runnerd.watch.errors import WatchError

LIMITS = WorkspaceLimits(
    max_change_bytes=1 << 20, max_read_bytes=1 << 20, max_workspace_bytes=1 << 22
)


def make(
    tmp_path: Path, limits: WorkspaceLimits = LIMITS, owner: tuple[int, int] | None = None
) -> Workspace:
    root = tmp_path / "app"
    root.mkdir(exist_ok=True)
    return Workspace(root, scratch=tmp_path / "scratch", owner=owner, limits=limits)


def put(root: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def changes(
    writes: dict[str, bytes] | list[tuple[str, bytes]] = (), deletes: tuple[str, ...] = ()
) -> ChangeSet:
    items = writes.items() if isinstance(writes, dict) else writes
    return ChangeSet(tuple(Write(p, d) for p, d in items), tuple(deletes))


async def test_the_listing_is_every_regular_file_by_path_bytes_hashed(tmp_path: Path) -> None:
    ws = make(tmp_path)
    binary = bytes(range(256)) * 10
    put(ws.root, {
        "a/b": b"nested", "a.txt": b"dot", "B": b"upper", "bin/blob": binary,
        "src/node_modules": b"a file of that name is listed",
        "node_modules/x.js": b"", "deep/er/.git/HEAD": b"", "deep/.telo/cache": b"",
    })  # fmt: skip
    (ws.root / "empty-dir").mkdir()
    listed = await ws.list()
    assert [f.path for f in listed] == ["B", "a.txt", "a/b", "bin/blob", "src/node_modules"]
    assert listed[3] == ListedFile("bin/blob", sha(binary), len(binary))


async def test_names_that_are_not_utf8_are_neither_listed_nor_checkpointed(
    tmp_path: Path,
) -> None:
    ws = make(tmp_path)
    put(ws.root, {"ok.txt": b"ok", "d/ok": b"ok"})
    root = os.fsencode(ws.root)
    put_bytes_named(root, {b"bad\xffname": b"made by the workload", b"d/\xfe/inner": b""})
    listed = [f.path for f in await ws.list()]
    info = await ws.checkpoint(tmp_path / "ckpt")
    await ws.restore(tmp_path / "ckpt")
    assert listed == ["d/ok", "ok.txt"]
    assert info.files == 2
    assert b"bad\xffname" in os.listdir(root)  # a restore leaves it as it is


def put_bytes_named(root: bytes, files: dict[bytes, bytes]) -> None:
    """Files whose names are raw bytes (not UTF-8), as a workload makes them."""
    for path, data in files.items():
        os.makedirs(os.path.dirname(root + b"/" + path), exist_ok=True)
        with open(root + b"/" + path, "wb") as file:
            file.write(data)


async def test_symlinks_and_fifos_are_neither_listed_nor_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    put(outside, {"secret": b"host data"})
    ws = make(tmp_path)
    put(ws.root, {"real": b"r"})
    (ws.root / "dir-link").symlink_to(outside)
    (ws.root / "file-link").symlink_to(outside / "secret")
    os.mkfifo(ws.root / "fifo")
    with trio.fail_after(10):  # a FIFO opened for reading would block forever
        assert [f.path for f in await ws.list()] == ["real"]
        for path in ("dir-link/secret", "file-link", "fifo", "missing", "dir-link"):
            with pytest.raises(WatchError) as refused:
                await ws.read(path)
            assert (refused.value.status_hint, refused.value.code) == (404, "file_not_found")
        assert await ws.read("real") == b"r"


async def test_a_file_over_the_read_limit_is_refused_not_read(tmp_path: Path) -> None:
    ws = make(tmp_path, WorkspaceLimits(1 << 20, 1000, 1 << 20))
    put(ws.root, {"big": b"x" * 1001, "fits": b"x" * 1000})
    assert len(await ws.read("fits")) == 1000
    with pytest.raises(WatchError) as refused:
        await ws.read("big")
    assert (refused.value.status_hint, refused.value.code) == (413, "file_too_large")


async def test_writes_apply_in_order_then_deletes_count_what_existed(tmp_path: Path) -> None:
    ws = make(tmp_path)
    put(ws.root, {"old/a": b"1", "old/sub/b": b"2", "gone.txt": b"3", "keep": b"old"})
    (ws.root / "keep").chmod(0o750)
    before = os.open(ws.root / "keep", os.O_RDONLY)
    try:
        result = await ws.apply(changes(
            [("new/deep/file", b"\x00\xff"), ("keep", b"first"), ("keep", b"second")],
            deletes=("old", "gone.txt", "never-was", "gone.txt/below"),
        ))  # fmt: skip
        assert result == (3, 2)
        # Replaced by a rename: a reader holding the old file still reads it whole.
        assert os.read(before, 100) == b"old"
    finally:
        os.close(before)
    assert (ws.root / "new/deep/file").read_bytes() == b"\x00\xff"
    assert (ws.root / "keep").read_bytes() == b"second"
    assert stat.S_IMODE((ws.root / "keep").stat().st_mode) == 0o750  # its mode is kept
    assert stat.S_IMODE((ws.root / "new/deep/file").stat().st_mode) == 0o600
    assert not (ws.root / "old").exists() and not (ws.root / "gone.txt").exists()
    assert os.listdir(tmp_path / "scratch") == []  # no temporary left anywhere
    assert sorted(f.path for f in await ws.list()) == ["keep", "new/deep/file"]


@pytest.mark.parametrize(
    ("writes", "named"),
    [
        ({"ok": b"1", "link/x": b"2"}, "'link' is not a directory"),
        ({"ok": b"1", "file/x": b"2"}, "'file' is not a directory"),
        ({"ok": b"1", "dir": b"2"}, "it is a directory"),
        ({"ok": b"1", "ok/x": b"2"}, "'ok' is a file"),
        ({"ok": b"1", "n/x": b"2", "n": b"3"}, "it is a directory"),
    ],
)
async def test_a_write_through_a_non_directory_refuses_the_whole_set(
    tmp_path: Path, writes: dict[str, bytes], named: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    ws = make(tmp_path)
    put(ws.root, {"file": b"f", "dir/inner": b"i"})
    (ws.root / "link").symlink_to(outside)
    with pytest.raises(WatchError) as refused:
        await ws.apply(changes(writes, deletes=("file",)))
    assert (refused.value.status_hint, refused.value.code) == (409, "path_conflict")
    assert named in refused.value.message and "body.write[" in refused.value.message
    assert not (ws.root / "ok").exists() and (ws.root / "file").exists()  # nothing applied
    assert os.listdir(outside) == []


async def test_a_symlink_at_the_path_is_replaced_and_its_target_untouched(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    put(outside, {"secret": b"host data"})
    ws = make(tmp_path)
    (ws.root / "link").symlink_to(outside / "secret")
    (ws.root / "dir-link").symlink_to(outside)
    assert await ws.apply(changes({"link": b"mine"}, deletes=("dir-link/secret", "dir-link"))) == (
        1,
        1,
    )
    assert not (ws.root / "link").is_symlink() and (ws.root / "link").read_bytes() == b"mine"
    link = ws.root / "dir-link"
    assert not link.is_symlink() and not link.exists()  # the link itself deleted
    assert (outside / "secret").read_bytes() == b"host data"


async def test_a_change_set_over_the_cap_is_refused_before_anything(tmp_path: Path) -> None:
    ws = make(tmp_path, WorkspaceLimits(100, 100, 1000))
    with pytest.raises(WatchError) as refused:
        await ws.apply(changes({"a": b"x" * 60, "b": b"x" * 41}))
    assert (refused.value.status_hint, refused.value.code) == (413, "payload_too_large")
    assert os.listdir(ws.root) == []


async def test_a_directory_swapped_for_a_symlink_mid_write_never_leads_out(tmp_path: Path) -> None:
    # The workload flips `d` between a directory and a symlink to a host
    # directory as fast as it can while the daemon writes `d/x` and deletes
    # `d/y`: every write lands in the workspace or is refused, and nothing
    # outside is ever created or deleted.
    outside = tmp_path / "outside"
    put(outside, {"y": b"host file"})
    ws = make(tmp_path)
    (ws.root / "d").mkdir()
    stop = threading.Event()

    def flip() -> None:
        d, aside = ws.root / "d", ws.root / "d.real"
        while not stop.is_set():
            # Each step may meet what the daemon just did (it makes `d` anew
            # when it finds none): the flipper carries on regardless.
            with contextlib.suppress(OSError):
                os.rename(d, aside)
            with contextlib.suppress(OSError):
                d.symlink_to(outside)
            with contextlib.suppress(OSError):
                d.unlink()
            if d.is_dir() and not d.is_symlink():
                shutil.rmtree(d, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.rename(aside, d)

    flipper = threading.Thread(target=flip)
    flipper.start()
    outcomes = set()
    try:
        with trio.fail_after(60):
            for _ in range(150):
                try:
                    await ws.apply(changes({"d/x": b"w"}, deletes=("d/y",)))
                    outcomes.add("written")
                except WatchError as exc:
                    assert exc.code == "path_conflict"
                    outcomes.add("refused")
                except WorkspaceError:
                    outcomes.add("failed")  # `d` kept vanishing under the write
    finally:
        stop.set()
        flipper.join()
    assert sorted(os.listdir(outside)) == ["y"] and (outside / "y").read_bytes() == b"host file"
    assert "written" in outcomes


async def test_a_checkpoint_restores_exactly_the_listed_files(tmp_path: Path) -> None:
    ws = make(tmp_path)
    binary = os.urandom(70000)
    put(ws.root, {
        "app.py": b"print(1)\n", "lib/bin.dat": binary, "lib/sub/deep.txt": "ünï\n".encode(),
        "node_modules/dep/index.js": b"cache",
    })  # fmt: skip
    (ws.root / "app.py").chmod(0o755)
    listed = await ws.list()
    checkpoint = tmp_path / "ckpt"
    info = await ws.checkpoint(checkpoint)
    assert (info.files, info.bytes) == (3, sum(f.size for f in listed))
    assert checkpoint.read_bytes().startswith(MAGIC)
    # The workload (or the editor) changes everything meanwhile.
    await ws.apply(changes({"extra/new": b"n", "app.py": b"changed"}, deletes=("lib/sub",)))
    (ws.root / "lib/bin.dat").unlink()
    (ws.root / "lib/bin.dat").mkdir()  # a directory where a file was
    (ws.root / "lib/bin.dat/inner").write_bytes(b"x")
    (ws.root / "lib/sub").write_bytes(b"a file where a directory was")
    assert await ws.restore(checkpoint) == info
    assert await ws.list() == listed
    assert stat.S_IMODE((ws.root / "app.py").stat().st_mode) == 0o755
    assert (ws.root / "node_modules/dep/index.js").read_bytes() == b"cache"  # left as it was


async def test_restoring_an_intact_workspace_rewrites_nothing(tmp_path: Path) -> None:
    ws = make(tmp_path)
    put(ws.root, {"a/b": b"1", "c": b"2"})
    await ws.checkpoint(tmp_path / "ckpt")
    inodes = {p: (ws.root / p).stat().st_ino for p in ("a/b", "c")}
    mode = stat.S_IMODE((ws.root / "c").stat().st_mode)
    (ws.root / "c").chmod(0o601)  # only its mode differs: it is rewritten
    await ws.restore(tmp_path / "ckpt")
    assert (ws.root / "a/b").stat().st_ino == inodes["a/b"]
    assert (ws.root / "c").stat().st_ino != inodes["c"]
    assert stat.S_IMODE((ws.root / "c").stat().st_mode) == mode


async def test_restore_recreates_a_workspace_that_is_gone(tmp_path: Path) -> None:
    ws = make(tmp_path)
    put(ws.root, {"a/b": b"1"})
    await ws.checkpoint(tmp_path / "ckpt")
    os.unlink(ws.root / "a/b")
    os.rmdir(ws.root / "a")
    os.rmdir(ws.root)
    await ws.restore(tmp_path / "ckpt")
    assert (ws.root / "a/b").read_bytes() == b"1"


async def test_a_workspace_over_its_storage_limit_is_a_checkpoint_error(tmp_path: Path) -> None:
    ws = make(tmp_path, WorkspaceLimits(1000, 1000, 1000))
    put(ws.root, {"a": b"x" * 600, "b": b"x" * 600})
    with pytest.raises(CheckpointError, match="more than 1000 bytes"):
        await ws.checkpoint(tmp_path / "ckpt")
    assert sorted(os.listdir(tmp_path)) == ["app"]  # no checkpoint, no temporary


@pytest.mark.parametrize("damage", ["escape", "truncate", "magic", "twice", "data"])
async def test_a_damaged_checkpoint_is_refused_and_changes_nothing(
    tmp_path: Path, damage: str
) -> None:
    ws = make(tmp_path)
    put(ws.root, {"aa": b"content-of-aa", "bb": b"2"})
    checkpoint = tmp_path / "ckpt"
    await ws.checkpoint(checkpoint)
    data = checkpoint.read_bytes()
    damaged = {
        "escape": data.replace(b"aa", b".."),
        "truncate": data[:-5],
        "magic": b"x" + data[1:],
        "twice": data.replace(b"bb", b"aa"),
        "data": data.replace(b"content-of-aa", b"content-of-zz"),
    }[damage]
    checkpoint.write_bytes(damaged)
    put(ws.root, {"cc": b"3"})
    before = await ws.list()
    with pytest.raises(CheckpointError):
        await ws.restore(checkpoint)
    assert await ws.list() == before


@pytest.mark.skipif(
    os.geteuid() != 0, reason="only a root daemon's sessions have a uid of their own"
)
async def test_a_root_daemon_creates_the_sessions_files_as_the_session(tmp_path: Path) -> None:
    owner = (0x70000000 + 9, 0x70000000 + 9)
    ws = make(tmp_path, owner=owner)
    await ws.apply(changes({"new/dir/file": b"x"}))
    for path in ("new", "new/dir", "new/dir/file"):
        st = (ws.root / path).lstat()
        assert (st.st_uid, st.st_gid) == owner, path
    await ws.checkpoint(tmp_path / "ckpt")
    (ws.root / "new/dir/file").unlink()
    await ws.restore(tmp_path / "ckpt")
    st = (ws.root / "new/dir/file").lstat()
    assert (st.st_uid, st.st_gid) == owner
    assert (tmp_path / "scratch").stat().st_uid == 0  # the daemon's own, not the session's


def make_deep(root: Path, depth: int) -> None:
    """`root/d/d/...` `depth` levels deep, a file `f` in each level."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = sub
            os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
    finally:
        os.close(fd)


async def test_a_tree_deeper_than_any_path_is_listed_to_the_path_limit_and_deleted(
    tmp_path: Path,
) -> None:
    # 600 levels: the listing stops where paths pass 1024
    # bytes (no route could name them) and holds one fd per level it
    # enters; a delete removes all of it.
    ws = make(tmp_path)
    make_deep(ws.root, 600)
    try:
        listed = [f.path for f in await ws.list()]
        assert sorted(listed) == sorted("d/" * k + "f" for k in range(1, 512))  # ≤ 1023 bytes
        assert await ws.apply(changes(deletes=("d",))) == (0, 1)
        assert os.listdir(ws.root) == [] and os.listdir(tmp_path / "scratch") == []
    finally:
        remove_tree(ws.root)  # too deep for pytest's recursive clean-up


async def test_a_fifo_at_a_write_path_is_replaced_without_blocking(tmp_path: Path) -> None:
    ws = make(tmp_path)
    os.mkfifo(ws.root / "fifo")
    with trio.fail_after(10):
        assert await ws.apply(changes({"fifo": b"now a file"})) == (1, 0)
    assert await ws.read("fifo") == b"now a file"
