"""`python -m bench.kubeworkspace`: the watch pod's workspace API, end to end.

`runnerd.kube.workspaceapi.WorkspaceApi` against the test cluster's stand-in
workspace server (tests/kubesim/workspace_server.py, a real process on
127.0.0.1, as a watch pod's `workspace` container runs it) over a workspace
of `FILES` files (`TOTAL_MB` MB in all), each against a reference doing the
same work on the same disk without HTTP, in the same run (best of 3):

- `seed` (bounded POSTs, base64 JSON) against writing the files with `open`;
- `list` against `os.walk` + SHA-256;
- `snapshot_to` (the streamed tar) against an uncompressed `tarfile` of it;
- `seed_from_tar` into an empty workspace against `tarfile.extractall`.

Figures are ratios to the reference, printed, never asserted; runnerd's
own share is the client's CPU time beside each (the rest of the wall time
is the stand-in server's, a Python program standing in for the Telo one).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from runnerd.kube.workspaceapi import WorkspaceApi

FILES = 2000
TOTAL_MB = 64
SERVER = Path(__file__).resolve().parents[1] / "tests" / "kubesim" / "workspace_server.py"
TOKEN = "bench-token"


def _files() -> list[tuple[str, bytes]]:
    size = TOTAL_MB * 1_000_000 // FILES
    return [(f"pkg{i % 40}/sub{i % 7}/file{i}.bin", os.urandom(size)) for i in range(FILES)]


@asynccontextmanager
async def _server(root: Path) -> AsyncIterator[WorkspaceApi]:
    os.makedirs(root, exist_ok=True)
    env = {"WORKSPACE_DIR": str(root), "WORKSPACE_PORT": "0", "RUNNERD_WORKSPACE_TOKEN": TOKEN}
    process = await trio.lowlevel.open_process(
        [sys.executable, "-I", str(SERVER)], env=env, stdout=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        line = b""
        while b"\n" not in line:
            line += await process.stdout.receive_some(256)
        port = int(line.split(b"\n")[0].rsplit(b":", 1)[1])
        async with WorkspaceApi("127.0.0.1", port, TOKEN) as api:
            yield api
    finally:
        process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


CPU: dict[str, float] = {}


async def _best(fn: Callable[[], Awaitable[object]], runs: int = 3, name: str = "") -> float:
    """The best wall time of `runs`; with `name`, that run's client CPU in `CPU`."""
    best = float("inf")
    for _ in range(runs):
        start, cpu = time.perf_counter(), time.process_time()
        await fn()
        took = time.perf_counter() - start
        if took < best:
            best = took
            CPU[name] = time.process_time() - cpu
    return best


def _write_plain(root: Path, files: list[tuple[str, bytes]]) -> None:
    for path, data in files:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _walk_hash(root: Path) -> int:
    count = 0
    for directory, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(directory, name), "rb") as f:
                hashlib.sha256(f.read()).hexdigest()
            count += 1
    return count


def _tar(root: Path, dest: Path) -> None:
    with tarfile.open(dest, "w") as out:
        out.add(root, arcname=".")


def _untar(source: Path, root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    with tarfile.open(source) as archive:
        archive.extractall(root, filter="data")


async def _rows(base: Path) -> list[tuple[str, float, float, str, float]]:
    files = await trio.to_thread.run_sync(_files)
    plain, ref_tar = base / "plain", base / "ref.tar"
    snapshot = base / "snapshot.tar"
    await trio.to_thread.run_sync(lambda: plain.mkdir())
    async with _server(base / "ws") as api:
        seeded = await _best(lambda: api.seed(files), name="seed")
        ref_seed = await _best(lambda: trio.to_thread.run_sync(_write_plain, plain, files))
        listed = await _best(api.list, name="list")
        ref_list = await _best(lambda: trio.to_thread.run_sync(_walk_hash, plain))
        snapped = await _best(lambda: api.snapshot_to(snapshot), name="snapshot")
        ref_snap = await _best(lambda: trio.to_thread.run_sync(_tar, plain, ref_tar))
    restored_root = base / "restored"
    ref_restore = await _best(lambda: trio.to_thread.run_sync(_untar, ref_tar, base / "untarred"))
    restored = float("inf")
    for _ in range(3):
        await trio.to_thread.run_sync(shutil.rmtree, restored_root, True)
        async with _server(restored_root) as api:
            start, cpu = time.perf_counter(), time.process_time()
            await api.seed_from_tar(snapshot)
            if (took := time.perf_counter() - start) < restored:
                restored, CPU["restore"] = took, time.process_time() - cpu
    return [
        ("seed (bounded POSTs)", seeded, ref_seed, "open+write", CPU["seed"]),
        ("list (hashed)", listed, ref_list, "os.walk+hash", CPU["list"]),
        ("snapshot_to (streamed tar)", snapped, ref_snap, "tarfile", CPU["snapshot"]),
        ("seed_from_tar (empty workspace)", restored, ref_restore, "extractall", CPU["restore"]),
    ]


async def _main() -> None:
    with tempfile.TemporaryDirectory(prefix="runnerd-bench-ws-") as tmp:
        rows = await _rows(Path(tmp))
    print(f"workspace API on the stand-in server, {FILES} files, {TOTAL_MB} MB (best of 3)")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'operation':<34} {'time':>9} {'reference':>10} {'ratio':>6} {'client CPU':>10}")
    for name, took, ref, what, cpu in rows:
        ratio = f"{took / ref:.2f}x"
        print(f"{name:<34} {took:>8.3f}s {ref:>9.3f}s {ratio:>6} {cpu:>9.3f}s  vs {what}")


def main() -> None:
    trio.run(_main)


if __name__ == "__main__":
    main()
