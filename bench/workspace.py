"""`python -m bench workspace`: the local workspace and `streams` processes.

In-process, no daemon (the pieces are not wired to the API yet):

- `Workspace.list()` of a workspace of `FILES` files (`TOTAL_MB` MB in
  all), against a reference doing the same work the plain way (`os.walk`,
  `open`, SHA-256) without the fd-by-fd walk that keeps a workload's
  symlinks from leading out;
- `checkpoint()` and `restore()` (every tenth file changed, as after a
  session of edits) against an uncompressed `tarfile` of the same files
  and its `extractall`;
- a `streams` process's stdout read to the end (256 MiB), against the
  same workload on a PTY (`spawn_pty_process`), in the sandbox the daemon
  would use (the strongest containment this host allows).

Figures are ratios to the reference measured in the same run (best of 3),
printed, never asserted.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from runnerd.local.containment import probe_containment
from runnerd.local.identity import SessionIdentity
from runnerd.local.initpython import choose_init_python
from runnerd.local.spawn import Launch, spawn_pty_process, spawn_streams_process
from runnerd.local.workspace import Workspace, WorkspaceLimits

FILES = 2000
TOTAL_MB = 64
STREAM_MB = 256
Row = tuple[str, str, str]


def _fill(root: Path) -> None:
    size = TOTAL_MB * 1_000_000 // FILES
    for i in range(FILES):
        path = root / f"pkg{i % 40}" / f"sub{i % 7}" / f"file{i}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))


def _reference_list(root: Path) -> int:
    import hashlib

    count = 0
    for directory, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(directory, name), "rb") as f:
                hashlib.sha256(f.read()).hexdigest()
            count += 1
    return count


async def _best(fn: Callable[[], Awaitable[object]], runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        await fn()
        best = min(best, time.perf_counter() - start)
    return best


def _touch_tenth(root: Path) -> None:
    for i in range(0, FILES, 10):
        (root / f"pkg{i % 40}" / f"sub{i % 7}" / f"file{i}.bin").write_bytes(b"edited")


async def _workspace_rows(base: Path) -> list[Row]:
    root = base / "app"
    await trio.to_thread.run_sync(root.mkdir)
    await trio.to_thread.run_sync(_fill, root)
    limits = WorkspaceLimits(1 << 24, 1 << 24, 1 << 31)
    ws = Workspace(root, scratch=base / "scratch", owner=None, limits=limits)
    ckpt, tar = base / "ckpt", base / "ref.tar"

    def tar_write() -> None:
        with tarfile.open(tar, "w") as out:
            out.add(root, arcname=".")

    def tar_restore() -> None:
        _touch_tenth(root)
        with tarfile.open(tar) as archive:
            archive.extractall(root, filter="data")

    async def restore() -> None:
        _touch_tenth(root)
        await ws.restore(ckpt)

    listed = await _best(ws.list)
    ref_listed = await _best(lambda: trio.to_thread.run_sync(_reference_list, root))
    checkpointed = await _best(lambda: ws.checkpoint(ckpt))
    ref_tar = await _best(lambda: trio.to_thread.run_sync(tar_write))
    restored = await _best(restore)
    ref_untar = await _best(lambda: trio.to_thread.run_sync(tar_restore))
    what = f"{FILES} files, {TOTAL_MB} MB"
    return [
        (
            f"workspace list ({what})",
            f"{listed:.3f} s, {listed / ref_listed:.2f}× os.walk+hash",
            "—",
        ),
        (
            f"workspace checkpoint ({what})",
            f"{checkpointed:.3f} s, {checkpointed / ref_tar:.2f}× tar",
            "—",
        ),
        (
            "workspace restore (1/10 changed)",
            f"{restored:.3f} s, {restored / ref_untar:.2f}× untar",
            "—",
        ),
    ]


def _launch() -> Launch:
    uid = 0x70000000 + 11
    root = os.geteuid() == 0
    plan = probe_containment(allow_namespaces=True, session_uid=uid if root else None)
    identity = SessionIdentity(uid, uid) if plan.drops_root else None
    init_python, _ = choose_init_python(plan, None, identity)
    return Launch(plan=plan, identity=identity, init_python=init_python)


async def _drain(spawn: Callable[..., Awaitable[Any]], cwd: Path, launch: Launch) -> float:
    """Bytes per second from spawn to the end of the workload's output."""
    argv = ["/bin/sh", "-c", f"exec head -c {STREAM_MB * 1024 * 1024} /dev/zero"]
    received = 0

    def count(*args: Any) -> None:  # (chunk) on a PTY, (stream, chunk) on pipes
        nonlocal received
        received += len(args[-1])

    start = time.perf_counter()
    proc = await spawn(argv, cwd=cwd, env={"PATH": "/usr/bin:/bin"}, stop_grace_s=1, launch=launch)
    done = trio.Event()
    async with proc, trio.open_nursery() as nursery:
        nursery.start_soon(proc.run_reader, count, done)
        await done.wait()
        await proc.wait()
    return received / (time.perf_counter() - start)


async def _stream_rows(cwd: Path) -> list[Row]:
    launch = _launch()
    streams = pty = 0.0
    for _ in range(3):  # taking turns, best of each
        streams = max(streams, await _drain(spawn_streams_process, cwd, launch))
        pty = max(pty, await _drain(spawn_pty_process, cwd, launch))
    return [
        (
            f"streams app stdout → daemon ({STREAM_MB} MiB)",
            f"{streams / 1e6:.0f} MB/s, {streams / pty:.2f}× the same on a PTY",
            "—",
        )
    ]


async def bench_workspace() -> list[Row]:
    parent = "/run" if os.access("/run", os.W_OK) else None  # a session can reach it
    base = Path(tempfile.mkdtemp(prefix="rd-bench-ws-", dir=parent))
    try:
        os.chmod(base, 0o755)  # the session's uid must reach its cwd
        return await _workspace_rows(base) + await _stream_rows(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
