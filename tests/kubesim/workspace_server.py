"""A stand-in for runnerd's workspace application (stdlib only; run as a program).

The stand-in kernel (`kernel.py`) runs this when its ENTRY is runnerd's
workspace application manifest (`runnerd/kube/workspace-app.telo.yaml`, the
Telo application `RunnerdWorkspaceApp`), as a watch pod's `workspace`
container does; a test may also run it directly:

    python workspace_server.py        # configured by env, as the container is

Env: `WORKSPACE_DIR` (the shared workspace directory), `WORKSPACE_PORT`
(8099; 0 picks a free port), `RUNNERD_WORKSPACE_TOKEN` (required),
`POD_IP` (also served on, besides 127.0.0.1), `WORKSPACE_MAX_FILE_BYTES`
and `WORKSPACE_MAX_BODY_BYTES` (the caps, 64 MiB each). Once it listens it
prints `workspace listening on HOST:PORT` (each address) and flushes.

The API (runnerd's `runnerd.kube.workspaceapi` is its client):

    GET  /healthz                 200 ok (no token)
    GET  /workspace               200 {"files": [{"path", "hash"}]}, sorted by path bytes
    GET  /workspace/file?path=P   200 the bytes; 404 file_not_found; 413 file_too_large
    POST /workspace               {"write": [{"path","content","encoding"}], "delete": [P]}
                                  200 {"written", "deleted"}; 409 path_conflict
                                  (every write checked before any is made);
                                  413 payload_too_large
    GET  /workspace/snapshot      200 application/x-tar (chunked): every listed file

Every other request wants `Authorization: Bearer <token>`: 401 otherwise.
The listing rules are runnerd's local ones: regular files only, no symlink
followed, names that are not UTF-8 and paths over 1024 bytes left out,
everything under `node_modules`, `.telo` or `.git` left out. Every walk goes
by directory fd, one `O_NOFOLLOW` segment at a time, so a symlink an app
planted is never followed out of the workspace and a FIFO never blocks.
A symlink or FIFO at a write's path is replaced; one on the way to it is a
`409`. Every write lands (a new inode, so a new mtime) even with unchanged
bytes: that is how runnerd asks a watching kernel to reload.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import shutil
import stat
import sys
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

EXCLUDED = frozenset({"node_modules", ".telo", ".git"})
MAX_PATH_BYTES = 1024
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CHUNK = 64 * 1024
DEFAULT_CAP = 64 * 1024 * 1024


class Refused(Exception):
    """An answer other than 200: status, code, message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def segments_of(path: str) -> list[str]:
    parts = path.split("/")
    if not path or "\0" in path or any(p in ("", ".", "..") for p in parts):
        raise Refused(400, "invalid_path", f"path {path[:80]!r} is not in its normal form")
    if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        raise Refused(400, "invalid_path", f"path {path[:80]!r} is too long")
    return parts


def is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@contextlib.contextmanager
def opened_dir(parent: int, name: str) -> Iterator[int]:
    fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    try:
        yield fd
    finally:
        os.close(fd)


def open_regular(parent: int, name: str) -> int | None:
    """The regular file `name` in `parent` opened, or None (missing, a
    symlink, a FIFO, a directory, unreadable)."""
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=parent)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


class Workspace:
    """The workspace directory, walked safely (see the module docstring)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.lock = threading.Lock()  # one change at a time, as runnerd's local one

    @contextlib.contextmanager
    def root_fd(self) -> Iterator[int]:
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            yield fd
        finally:
            os.close(fd)

    def walk(self) -> Iterator[tuple[str, int]]:
        """(path, open fd) of every listed file, sorted by path bytes; the
        caller must not close the fd (closed when the next one comes)."""
        with self.root_fd() as root:
            yield from self._walk(root, "")

    def _walk(self, dir_fd: int, prefix: str) -> Iterator[tuple[str, int]]:
        with os.scandir(dir_fd) as scan:
            entries = [e for e in scan if is_utf8(e.name)]
        # The whole listing is sorted by path bytes: a directory sorts as the
        # prefix of its files ("a/"), so "a-b" < "a/b" < "a0" comes out right.
        listed: list[tuple[bytes, os.DirEntry[str]]] = []
        for entry in entries:
            key = (prefix + entry.name).encode()
            listed.append((key + b"/" if entry.is_dir(follow_symlinks=False) else key, entry))
        for _key, entry in sorted(listed, key=lambda item: item[0]):
            path = prefix + entry.name
            if len(path.encode()) > MAX_PATH_BYTES:
                continue
            if entry.is_dir(follow_symlinks=False):
                if entry.name in EXCLUDED:
                    continue
                try:
                    sub = os.open(entry.name, DIR_FLAGS, dir_fd=dir_fd)
                except OSError:
                    continue
                try:
                    yield from self._walk(sub, path + "/")
                finally:
                    os.close(sub)
            elif entry.is_file(follow_symlinks=False):
                fd = open_regular(dir_fd, entry.name)
                if fd is None:
                    continue
                try:
                    yield path, fd
                finally:
                    os.close(fd)

    def listing(self) -> list[dict[str, str]]:
        with self.lock:
            return list(self._hashes())

    def _hashes(self) -> Iterator[dict[str, str]]:
        for path, fd in self.walk():
            digest = hashlib.sha256()
            while chunk := os.read(fd, CHUNK):
                digest.update(chunk)
            yield {"path": path, "hash": digest.hexdigest()}

    def read(self, path: str, cap: int) -> bytes:
        parts = segments_of(path)
        missing = Refused(404, "file_not_found", f"{path[:80]!r} is not a file in the workspace")
        with self.root_fd() as root, contextlib.ExitStack() as stack:
            parent = root
            try:
                for part in parts[:-1]:
                    parent = stack.enter_context(opened_dir(parent, part))
            except OSError:
                raise missing from None
            fd = open_regular(parent, parts[-1])
            if fd is None:
                raise missing
            stack.callback(os.close, fd)
            data = b""
            while chunk := os.read(fd, CHUNK):
                data += chunk
                if len(data) > cap:
                    raise Refused(413, "file_too_large", f"{path[:80]!r} is over {cap} bytes")
            return data

    def _check_write(self, root: int, parts: list[str]) -> None:
        """409 unless every existing segment on the way is a directory (not
        a symlink to one) and the target is not a directory."""
        shown = "/".join(parts)[:80]
        with contextlib.ExitStack() as stack:
            parent = root
            for depth, part in enumerate(parts):
                try:
                    st = os.stat(part, dir_fd=parent, follow_symlinks=False)
                except FileNotFoundError:
                    return  # the rest is made
                is_dir = stat.S_ISDIR(st.st_mode)
                if depth == len(parts) - 1:
                    if is_dir:
                        raise Refused(409, "path_conflict", f"{shown!r}: a directory is there")
                    return
                if not is_dir:
                    message = f"{shown!r}: {part!r} is not a directory"
                    raise Refused(409, "path_conflict", message)
                parent = stack.enter_context(opened_dir(parent, part))

    def _put(self, root: int, parts: list[str], data: bytes) -> None:
        with contextlib.ExitStack() as stack:
            parent = root
            for part in parts[:-1]:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=parent)
                try:
                    parent = stack.enter_context(opened_dir(parent, part))
                except OSError as exc:
                    raise Refused(409, "path_conflict", f"{part!r}: {exc.strerror}") from None
            name = parts[-1]
            mode = 0o600
            with contextlib.suppress(OSError):
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    mode = stat.S_IMODE(st.st_mode)  # a replaced file keeps its bits
            temp = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(temp, flags, mode, dir_fd=parent)
            try:
                with os.fdopen(fd, "wb", closefd=False) as out:
                    out.write(data)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
            os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)

    def _delete(self, root: int, parts: list[str]) -> int:
        with contextlib.ExitStack() as stack:
            parent = root
            try:
                for part in parts[:-1]:
                    parent = stack.enter_context(opened_dir(parent, part))
                st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            except OSError:
                return 0  # nothing there reachable through directories
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(parts[-1], dir_fd=parent)
            else:
                os.unlink(parts[-1], dir_fd=parent)
            return 1

    def apply(self, writes: list[tuple[str, bytes]], deletes: list[str]) -> tuple[int, int]:
        split_writes = [(segments_of(p), data) for p, data in writes]
        split_deletes = [segments_of(p) for p in deletes]
        files = {tuple(parts) for parts, _ in split_writes}
        for parts, _ in split_writes:
            if any(tuple(parts[:n]) in files for n in range(1, len(parts))):
                message = f"{'/'.join(parts)[:80]!r}: the change set also writes a file on its way"
                raise Refused(409, "path_conflict", message)
        with self.lock, self.root_fd() as root:
            for parts, _ in split_writes:
                self._check_write(root, parts)
            for parts, data in split_writes:
                self._put(root, parts, data)
            deleted = sum(self._delete(root, parts) for parts in split_deletes)
        return len(split_writes), deleted


class ChunkedWriter:
    """A write-only file object sending HTTP/1.1 chunks."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def write(self, data: bytes) -> int:
        if data:
            self.out.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        return len(data)

    def close(self) -> None:
        self.out.write(b"0\r\n\r\n")
        self.out.flush()


def parse_change_set(raw: bytes) -> tuple[list[tuple[str, bytes]], list[str]]:
    try:
        body = json.loads(raw)
        writes = [
            (str(w["path"]), decode(w["content"], w.get("encoding", "utf8")))
            for w in body.get("write") or []
        ]
        deletes = [str(p) for p in body.get("delete") or []]
    except (ValueError, TypeError, KeyError, AttributeError, binascii.Error) as exc:
        raise Refused(400, "invalid_request", f"not a change set: {exc}") from None
    return writes, deletes


def decode(content: Any, encoding: Any) -> bytes:
    if not isinstance(content, str) or encoding not in ("utf8", "base64"):
        raise ValueError("content must be a string, encoding utf8 or base64")
    return base64.b64decode(content, validate=True) if encoding == "base64" else content.encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    workspace: Workspace
    token: str
    max_file_bytes: int
    max_body_bytes: int

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def answer_json(self, status: int, value: Any) -> None:
        self.answer(status, json.dumps(value).encode(), "application/json")

    def authorized(self) -> bool:
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode())

    def handle_request(self, method: str) -> None:
        url = urlsplit(self.path)
        try:
            if method == "GET" and url.path == "/healthz":
                return self.answer(200, b"ok", "text/plain")
            if not self.authorized():
                raise Refused(401, "unauthorized", "a valid workspace token is required")
            route = (method, url.path)
            if route == ("GET", "/workspace"):
                return self.answer_json(200, {"files": self.workspace.listing()})
            if route == ("GET", "/workspace/file"):
                path = (parse_qs(url.query).get("path") or [""])[0]
                data = self.workspace.read(path, self.max_file_bytes)
                return self.answer(200, data, "application/octet-stream")
            if route == ("POST", "/workspace"):
                return self.post_workspace()
            if route == ("GET", "/workspace/snapshot"):
                return self.snapshot()
            raise Refused(404, "not_found", f"no route {method} {url.path}")
        except Refused as exc:
            self.answer_json(exc.status, {"error": exc.code, "message": str(exc)})

    def post_workspace(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > self.max_body_bytes:
            for _ in range(0, length, CHUNK):  # read and dropped: the answer must arrive
                self.rfile.read(min(CHUNK, length))
            raise Refused(413, "payload_too_large", f"the body is over {self.max_body_bytes} bytes")
        writes, deletes = parse_change_set(self.rfile.read(length))
        written, deleted = self.workspace.apply(writes, deletes)
        self.answer_json(200, {"written": written, "deleted": deleted})

    def snapshot(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/x-tar")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        out = ChunkedWriter(self.wfile)
        try:
            with (
                self.workspace.lock,
                tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar,
            ):
                for path, fd in self.workspace.walk():
                    st = os.fstat(fd)
                    info = tarfile.TarInfo(path)
                    info.size, info.mode = st.st_size, stat.S_IMODE(st.st_mode)
                    info.mtime = int(st.st_mtime)
                    with os.fdopen(fd, "rb", closefd=False) as data:
                        tar.addfile(info, data)
        except (OSError, tarfile.TarError):
            # A file changed under the walk: cut the stream without its last
            # chunk, so the client sees a broken snapshot, never a short one.
            self.close_connection = True
            return
        out.close()

    def do_GET(self) -> None:
        self.handle_request("GET")

    def do_POST(self) -> None:
        self.handle_request("POST")

    def do_PUT(self) -> None:
        self.handle_request("PUT")

    def do_DELETE(self) -> None:
        self.handle_request("DELETE")


class Server(ThreadingHTTPServer):
    daemon_threads = True


def main() -> int:
    env = os.environ
    token = env.get("RUNNERD_WORKSPACE_TOKEN", "")
    root = env.get("WORKSPACE_DIR", "")
    if not token or not root or not os.path.isdir(root):
        needs = "RUNNERD_WORKSPACE_TOKEN and WORKSPACE_DIR (a directory)"
        print(f"workspace: {needs} are required", file=sys.stderr)
        return 2
    handler = type("BoundHandler", (Handler,), {
        "workspace": Workspace(root),
        "token": token,
        "max_file_bytes": int(env.get("WORKSPACE_MAX_FILE_BYTES") or DEFAULT_CAP),
        "max_body_bytes": int(env.get("WORKSPACE_MAX_BODY_BYTES") or DEFAULT_CAP),
    })  # fmt: skip
    port = int(env.get("WORKSPACE_PORT") or 8099)
    hosts = ["127.0.0.1"]
    if env.get("POD_IP") and env["POD_IP"] != "127.0.0.1":
        hosts.append(env["POD_IP"])
    servers = []
    for host in hosts:
        server = Server((host, port), handler)
        port = server.server_address[1]  # a port of 0 becomes the same one on every host
        servers.append(server)
        print(f"workspace listening on {host}:{port}", flush=True)
    for server in servers[1:]:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    servers[0].serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
