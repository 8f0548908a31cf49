"""runnerd.kube.workspaceapi against the real stand-in workspace server
(tests/kubesim/workspace_server.py, run as the process a watch pod's
`workspace` container is, on 127.0.0.1): the token, the refusals mapped to
the contract's codes, the snapshot → seed round trip byte for byte, a
planted symlink never followed, a hung server and a down one bounded.
Also the stand-in kernel's dispatch to it for runnerd's manifest."""

from __future__ import annotations

import functools
import hashlib
import os
import socket
import subprocess
import sys
import tarfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trio

from runnerd.backend.watch import ChangeSet, CheckpointFailed, Write
from runnerd.kube.workspaceapi import ApiLimits, WorkspaceApi, WorkspaceApiError
from runnerd.watch.errors import WatchError

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "tests" / "kubesim" / "workspace_server.py"
KERNEL = REPO / "tests" / "kubesim" / "kernel.py"
MANIFEST = REPO / "runnerd" / "kube" / "workspace-app.telo.yaml"
TOKEN = "tok-0123456789abcdef"
# Generous: only a server that never answers meets them (and then always).
QUICK = ApiLimits(call_timeout_s=2.0, snapshot_timeout_s=2.0)
BINARY = bytes(range(256)) * 40 + b"\x00\xff\r\n"


@dataclass
class Served:
    root: Path
    port: int

    def api(self, token: str = TOKEN, limits: ApiLimits | None = None) -> WorkspaceApi:
        return WorkspaceApi("127.0.0.1", self.port, token, limits=limits)


@asynccontextmanager
async def open_server(
    root: Path, *, argv: tuple[str, ...] | None = None, env: Mapping[str, str] | None = None
) -> AsyncIterator[Served]:
    """The stand-in server on a free port of 127.0.0.1, over `root`; killed on exit."""
    os.makedirs(root, exist_ok=True)
    full_env = {
        "PATH": os.environ.get("PATH", ""),
        "WORKSPACE_DIR": str(root),
        "WORKSPACE_PORT": "0",
        "RUNNERD_WORKSPACE_TOKEN": TOKEN,
        **(env or {}),
    }
    command = argv or (sys.executable, "-I", str(SERVER))
    process = await trio.lowlevel.open_process(
        list(command), env=full_env, stdout=subprocess.PIPE, cwd=str(root)
    )
    try:
        assert process.stdout is not None
        seen = b""
        with trio.fail_after(60):
            while b"\n" not in seen:
                chunk = await process.stdout.receive_some(1024)
                assert chunk, f"the server exited: {process.returncode}"
                seen += chunk
        line = seen.split(b"\n", 1)[0].decode()
        assert line.startswith("workspace listening on 127.0.0.1:"), line
        yield Served(root, int(line.rsplit(":", 1)[1]))
    finally:
        process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    async with open_server(tmp_path / "workspace") as s:
        yield s


def changes(*writes: tuple[str, bytes], delete: tuple[str, ...] = ()) -> ChangeSet:
    return ChangeSet(writes=tuple(Write(p, d) for p, d in writes), deletes=delete)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_health_needs_no_token_and_everything_else_does(served: Served) -> None:
    async with served.api(token="wrong") as wrong, httpx.AsyncClient() as raw:
        with trio.fail_after(30):
            assert await wrong.healthy()
            with pytest.raises(WorkspaceApiError, match="refused runnerd's token") as caught:
                await wrong.list()
            assert "wrong" not in str(caught.value)
            url = f"http://127.0.0.1:{served.port}"
            for method, path in [("GET", "/workspace"), ("GET", "/workspace/snapshot")]:
                answer = await raw.request(method, url + path)
                assert answer.status_code == 401, path
                assert answer.json()["error"] == "unauthorized"
            answer = await raw.post(
                url + "/workspace", json={"write": [{"path": "x", "content": ""}]}
            )
            assert answer.status_code == 401
    assert not (served.root / "x").exists()


async def test_apply_list_and_read_agree_byte_for_byte(served: Served) -> None:
    async with served.api() as api:
        with trio.fail_after(30):
            assert await api.list() == []
            written = await api.apply(changes(("b.bin", BINARY), ("a/b/c.txt", b"hi\n")))
            assert written == (2, 0)
            listed = await api.list()
            assert [(f.path, f.hash) for f in listed] == [
                ("a/b/c.txt", sha(b"hi\n")),
                ("b.bin", sha(BINARY)),
            ]
            assert await api.read("b.bin") == BINARY
            assert await api.apply(changes(delete=("a", "nothing-here"))) == (0, 1)
            assert [f.path for f in await api.list()] == ["b.bin"]


async def test_listing_order_and_rules_match_the_local_backend(served: Served) -> None:
    root = served.root
    for path in ("a-b", "a/b", "a0", "node_modules/x", "deep/.git/y", ".telo/z", "keep/.git"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"x")
    os.mkfifo(root / "fifo")  # never waited on
    (root.joinpath(os.fsdecode(b"bad\xffname"))).write_bytes(b"x")
    deep = root.joinpath(*(c * 200 for c in "lmnop"))  # 1004 bytes: with a file, over 1024
    deep.mkdir(parents=True)
    (deep / ("q" * 30)).write_bytes(b"too long a path")
    async with served.api() as api:
        with trio.fail_after(30):
            paths = [f.path for f in await api.list()]
    assert paths == ["a-b", "a/b", "a0", "keep/.git"]


async def test_every_write_lands_even_with_unchanged_bytes(served: Served) -> None:
    async with served.api() as api:
        with trio.fail_after(30):
            await api.apply(changes(("telo.yaml", b"same")))
            (served.root / "telo.yaml").chmod(0o640)
            before = os.stat(served.root / "telo.yaml")
            await api.apply(changes(("telo.yaml", b"same")))
    after = os.stat(served.root / "telo.yaml")
    assert after.st_ino != before.st_ino  # a new file: a watching kernel sees the change
    assert after.st_mode & 0o777 == 0o640  # a replaced file keeps its bits


async def test_refusals_are_the_contracts_codes(tmp_path: Path) -> None:
    limits = {"WORKSPACE_MAX_FILE_BYTES": "100", "WORKSPACE_MAX_BODY_BYTES": "2000"}
    async with open_server(tmp_path / "w", env=limits) as s, s.api() as api:
        with trio.fail_after(30):
            await api.apply(changes(("a", b"file"), ("big", b"x" * 101)))
            with pytest.raises(WatchError) as missing:
                await api.read("nope/x")
            assert (missing.value.status_hint, missing.value.code) == (404, "file_not_found")
            with pytest.raises(WatchError) as large:
                await api.read("big")
            assert (large.value.status_hint, large.value.code) == (413, "file_too_large")
            with pytest.raises(WatchError) as conflict:
                await api.apply(changes(("fresh", b"1"), ("a/b", b"2")))
            assert (conflict.value.status_hint, conflict.value.code) == (409, "path_conflict")
            assert conflict.value.message == "body.write[1].path 'a/b': 'a' is not a directory"
            with pytest.raises(WatchError) as inner:
                await api.apply(changes(("x", b"1"), ("x/y", b"2")))
            assert inner.value.code == "path_conflict" and "body.write[1]" in inner.value.message
            with pytest.raises(WatchError) as payload:
                await api.apply(changes(("c", b"y" * 3000)))
            assert (payload.value.status_hint, payload.value.code) == (413, "payload_too_large")
            # The server stays usable after each refusal.
            assert [f.path for f in await api.list()] == ["a", "big"]
    assert not (tmp_path / "w" / "fresh").exists()  # checked before any write was made


async def test_the_clients_own_read_cap_is_a_413(served: Served) -> None:
    (served.root / "f").write_bytes(b"z" * 5000)
    async with served.api(limits=ApiLimits(max_read_bytes=4096)) as api:
        with trio.fail_after(30), pytest.raises(WatchError) as caught:
            await api.read("f")
    assert caught.value.code == "file_too_large"


async def test_a_planted_symlink_is_never_followed_out(served: Served, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"host secret")
    (served.root / "dir-link").symlink_to(outside)
    (served.root / "file-link").symlink_to(outside / "secret")
    async with served.api() as api:
        with trio.fail_after(30):
            assert await api.list() == []
            for path in ("dir-link/secret", "file-link"):
                with pytest.raises(WatchError) as caught:
                    await api.read(path)
                assert caught.value.code == "file_not_found"
            with pytest.raises(WatchError) as conflict:
                await api.apply(changes(("dir-link/new", b"x")))
            assert conflict.value.code == "path_conflict"
            assert await api.apply(changes(delete=("dir-link/secret",))) == (0, 0)
            # A symlink AT a write's path is replaced by the file, as locally.
            await api.apply(changes(("file-link", b"mine")))
            snapshot = tmp_path / "snap.tar"
            assert await api.snapshot_to(snapshot) == (1, 4)
    assert (outside / "secret").read_bytes() == b"host secret"
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert not (served.root / "file-link").is_symlink()


async def test_snapshot_then_seed_round_trips_byte_for_byte(served: Served, tmp_path: Path) -> None:
    files = {
        "telo.yaml": b"kind: Telo.Application\n",
        "bin/all-bytes.dat": BINARY,
        "empty": b"",
        "odd names/a b+c%d&e#f?g=h.txt": b"query-ish characters in a path",
        "d\u00e9j\u00e0/\u65e5\u672c.txt": "caf\u00e9\n".encode(),
        "/".join(["x" * 60] * 5) + "/long.bin": os.urandom(3000),
    }
    async with served.api() as api:
        with trio.fail_after(60):
            await api.seed(files.items())
            before = await api.list()
            snapshot = tmp_path / "checkpoint.tar"
            assert await api.snapshot_to(snapshot) == (len(files), sum(map(len, files.values())))
    assert snapshot.stat().st_mode & 0o777 == 0o600
    with tarfile.open(snapshot) as archive:
        assert all(m.isreg() for m in archive.getmembers())
    small_batches = ApiLimits(seed_batch_bytes=1024)
    async with open_server(tmp_path / "second") as second, second.api(limits=small_batches) as api:
        with trio.fail_after(60):
            assert await api.seed_from_tar(snapshot) == len(files)
            assert await api.list() == before
            for path, data in files.items():
                assert await api.read(path) == data


async def test_a_hung_server_is_bounded(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # accepts (the kernel's backlog), never answers
        port = listener.getsockname()[1]
        async with WorkspaceApi("127.0.0.1", port, TOKEN, limits=QUICK) as api:
            with trio.fail_after(60):
                assert not await api.healthy()
                with pytest.raises(WorkspaceApiError, match="did not answer in time"):
                    await api.list()
                with pytest.raises(CheckpointFailed, match="did not answer in time"):
                    await api.snapshot_to(tmp_path / "c.tar")
                # A write that got no answer may still land: the error says so.
                late = "did not answer in time; the change may still have been applied"
                with pytest.raises(WorkspaceApiError, match=late):
                    await api.apply(changes(("a.txt", b"x")))
    assert os.listdir(tmp_path) == []


async def test_a_server_that_is_down_is_a_client_safe_error(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    async with WorkspaceApi("127.0.0.1", port, TOKEN, limits=QUICK) as api:
        with trio.fail_after(60):
            assert not await api.healthy()
            with pytest.raises(WorkspaceApiError, match="could not be reached") as caught:
                await api.apply(changes(("a", b"1")))
            assert TOKEN not in str(caught.value)
            with pytest.raises(CheckpointFailed):
                await api.snapshot_to(tmp_path / "c.tar")
    assert os.listdir(tmp_path) == []


async def test_the_kernel_serves_runnerds_workspace_manifest(tmp_path: Path) -> None:
    argv = (sys.executable, "-I", str(KERNEL), "run", "--no-open", str(MANIFEST))
    async with open_server(tmp_path / "w", argv=argv) as s, s.api() as api:
        with trio.fail_after(30):
            assert await api.healthy()
            await api.apply(changes(("telo.yaml", b"print hi\n")))
            assert [f.path for f in await api.list()] == ["telo.yaml"]


@asynccontextmanager
async def open_raw_server(answer: bytes, *, hang: bool = False) -> AsyncIterator[int]:
    """A server on 127.0.0.1 that reads a request, sends `answer` as is and
    closes (or, with `hang`, goes silent): a workspace container whose
    stream broke, that sent nonsense, or that stopped mid-answer."""

    async def serve(stream: trio.SocketStream) -> None:
        async with stream:
            seen = b""
            while b"\r\n\r\n" not in seen and (chunk := await stream.receive_some(4096)):
                seen += chunk
            await stream.send_all(answer)
            if hang:
                await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        serving = functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1")
        [listener] = await nursery.start(serving)
        yield listener.socket.getsockname()[1]
        nursery.cancel_scope.cancel()


def chunked(body: bytes, *, finished: bool) -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    return (
        head + f"{len(body):x}\r\n".encode() + body + b"\r\n" + (b"0\r\n\r\n" if finished else b"")
    )


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (chunked(b"\x00" * 700, finished=False), "the stream broke"),  # cut before its last chunk
        (chunked(b"not a tar at all" * 64, finished=True), "unreadable"),
        (b"HTTP/1.1 500 Oops\r\nContent-Length: 2\r\n\r\n{}", "HTTP 500"),
    ],
)
async def test_a_broken_snapshot_fails_and_keeps_the_last_checkpoint(
    tmp_path: Path, answer: bytes, why: str
) -> None:
    dest = tmp_path / "checkpoint.tar"
    dest.write_bytes(b"the previous checkpoint")
    async with (
        open_raw_server(answer) as port,
        WorkspaceApi("127.0.0.1", port, TOKEN, limits=QUICK) as api,
    ):
        with trio.fail_after(60), pytest.raises(CheckpointFailed, match=why):
            await api.snapshot_to(dest)
    assert os.listdir(tmp_path) == ["checkpoint.tar"]
    assert dest.read_bytes() == b"the previous checkpoint"


async def test_seed_from_a_truncated_tar_is_a_checkpoint_failure(
    served: Served, tmp_path: Path
) -> None:
    async with served.api() as api:
        with trio.fail_after(60):
            await api.seed([("a", BINARY), ("b", BINARY)])
            snapshot = tmp_path / "c.tar"
            await api.snapshot_to(snapshot)
    snapshot.write_bytes(snapshot.read_bytes()[:1500])  # inside the second file's data
    async with open_server(tmp_path / "second") as second, second.api() as api:
        with trio.fail_after(60), pytest.raises(CheckpointFailed, match="cannot be read"):
            await api.seed_from_tar(snapshot)


@pytest.mark.parametrize("limits", [QUICK, ApiLimits(read_timeout_s=1.0)])
async def test_a_server_that_stops_mid_answer_is_bounded(limits: ApiLimits) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    async with open_raw_server(head + b'{"files": [', hang=True) as port:
        async with WorkspaceApi("127.0.0.1", port, TOKEN, limits=limits) as api:
            with trio.fail_after(60):
                with pytest.raises(WorkspaceApiError, match="did not answer in time"):
                    await api.list()
                with pytest.raises(WorkspaceApiError, match="did not answer in time"):
                    await api.read("a")
