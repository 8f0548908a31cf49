"""The daemon's listening sockets: parse `server.listen`, bind, lock, clean up.

Owns every listening socket runnerd serves on, before hypercorn sees them:
hypercorn is handed `fd://N` only, so socket modes, locking and cleanup are
ours, not a side effect of its `unix:` bind (which silently unlinks and takes
over a live socket of another instance).

Entries of `server.listen`:
- `unix:PATH`: we take an exclusive `flock` on `PATH.lock` first (a second
  runnerd on the same path fails with `ListenError` naming the path), remove a
  stale socket file (one nobody accepts on) only while holding that lock, bind
  with a restrictive umask, then chmod to `server.socket_mode`. At exit the socket file and the
  lock file are removed.
- `tcp:HOST:PORT`: bound here (`HOST` may be `[::1]`; port 0 picks one).
- `fd:N`: an already-listening stream socket we inherited.
- `systemd`: requires socket activation (`LISTEN_FDS`); see below.

Socket activation: sockets passed by systemd are always served. A `unix:` or
`tcp:` entry whose address equals a passed socket's is satisfied by it (we
neither lock nor unlink a socket systemd owns), so one config file works both
with and without `runnerd.socket`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from runnerd.config import ListenAddress, parse_listen
from runnerd.config.server import is_loopback_host

_PROBE_TIMEOUT_S = 1.0
# Connections the kernel queues before runnerd accepts them (capped by
# net.core.somaxconn, 4096 by default): a burst of stream connects, or a
# listener at its connection cap, must queue, not be refused.
BACKLOG = 4096


class ListenError(Exception):
    """A listener could not be set up; the message names the entry and why."""


def parse_entry(entry: str) -> ListenAddress:
    """Read one (already validated) `server.listen` entry; ListenError if bad."""
    try:
        return parse_listen(entry)
    except ValueError as exc:
        raise ListenError(f"server.listen: {exc}") from None


@dataclass
class Listener:
    """One listening socket. `path`/`lock_fd` are set for unix sockets we own."""

    entry: str
    sock: socket.socket
    path: Path | None = None
    lock_fd: int | None = None

    @property
    def address(self) -> str:
        name = self.sock.getsockname()
        if self.sock.family == socket.AF_UNIX:
            return f"unix:{name.decode() if isinstance(name, bytes) else name}"
        host, port = name[0], name[1]
        return f"tcp:[{host}]:{port}" if ":" in host else f"tcp:{host}:{port}"


def bind_listeners(
    entries: tuple[str, ...],
    *,
    socket_mode: int,
    inherited_fds: tuple[int, ...],
    key: str = "server.listen",
) -> list[Listener]:
    """Bind every configured entry plus every inherited socket; a failure's
    message starts with `key` (the config key the entries came from).

    On error, everything bound so far is closed (and its files removed) before
    ListenError propagates, so a refused start leaves nothing behind.
    """
    specs = [parse_entry(e) for e in entries]
    inherited = [_adopt_fd(fd, f"systemd fd {fd}") for fd in inherited_fds]
    if any(s.kind == "systemd" for s in specs) and not inherited:
        raise ListenError("server.listen: 'systemd' given but no sockets were passed (LISTEN_FDS)")
    listeners: list[Listener] = list(inherited)
    try:
        for entry, spec in zip(entries, specs, strict=True):
            if spec.kind == "systemd" or _matches_inherited(spec, inherited):
                continue
            listeners.append(_bind_one(entry, spec, socket_mode, key))
    except BaseException:
        close_listeners(listeners)
        raise
    return listeners


def refuse_remote(listeners: list[Listener], *, allow_remote: bool) -> None:
    """The runtime half of `server.allow_remote`: config parsing refuses a
    non-loopback `tcp:` entry, but an inherited socket (`fd:N`, systemd's)
    is only known once adopted. Raises ListenError naming it, after closing
    every listener, unless remote access is allowed."""
    if allow_remote:
        return
    for listener in listeners:
        if not is_remote_address(listener.address):
            continue
        close_listeners(listeners)
        raise ListenError(
            f"server.listen: {listener.entry} listens on {listener.address}, reachable from "
            "other machines; anyone who reaches the API can run code on this host. Pass a "
            "loopback socket, or set server.allow_remote = true"
        )


def is_remote_address(address: str) -> bool:
    """Is a `Listener.address` (`tcp:HOST:PORT`, `unix:PATH`) reachable off this host?"""
    spec = parse_listen(address)
    return spec.kind == "tcp" and not is_loopback_host(spec.host or "")


def close_listeners(listeners: list[Listener]) -> None:
    """Close every socket; remove our unix socket files, then release and
    remove their lock files. Idempotent, never raises.

    The files are touched only while we still hold the lock, and only once:
    after that the path may already belong to a newly started runnerd.
    """
    for listener in listeners:
        listener.sock.close()
        if listener.path is not None and listener.lock_fd is not None:
            with contextlib.suppress(OSError):
                listener.path.unlink()
            _release(listener.path, listener.lock_fd)
        listener.path = None
        listener.lock_fd = None


def _matches_inherited(spec: ListenAddress, inherited: list[Listener]) -> bool:
    for listener in inherited:
        name = listener.sock.getsockname()
        if spec.kind == "unix" and listener.sock.family == socket.AF_UNIX:
            if (name.decode() if isinstance(name, bytes) else name) == str(spec.path):
                return True
        if spec.kind == "tcp" and listener.sock.family != socket.AF_UNIX:
            if (name[0], name[1]) == (spec.host, spec.port):
                return True
    return False


def _bind_one(entry: str, spec: ListenAddress, socket_mode: int, key: str) -> Listener:
    if spec.kind == "unix" and spec.path is not None:
        return _bind_unix(entry, spec.path, socket_mode, key)
    if spec.kind == "tcp" and spec.host is not None and spec.port is not None:
        return _bind_tcp(entry, spec.host, spec.port, key)
    if spec.kind == "fd" and spec.fd is not None:
        return _adopt_fd(spec.fd, entry, key)
    raise ListenError(f"{key}: {entry!r} cannot be bound")


def _adopt_fd(fd: int, entry: str, key: str = "server.listen") -> Listener:
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise ListenError(f"{key}: {entry}: not a socket ({exc.strerror})") from exc
    if sock.type != socket.SOCK_STREAM:
        sock.detach()
        raise ListenError(f"{key}: {entry}: not a stream socket")
    # Never leak a listening socket into a workload.
    sock.set_inheritable(False)
    return Listener(entry, sock)


def _bind_tcp(entry: str, host: str, port: int, key: str) -> Listener:
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ListenError(f"{key}: {entry}: {exc.strerror or exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise ListenError(f"{key}: {entry}: {exc.strerror or exc}") from exc
    return Listener(entry, sock)


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _lock(entry: str, path: Path, key: str) -> int:
    """Hold an exclusive lock on `path.lock`; return its fd (close-on-exec)."""
    lock_path = _lock_path(path)
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ListenError(f"{key}: {entry}: cannot open {lock_path}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ListenError(
                f"{key}: {entry}: another runnerd is already serving on {path} "
                f"(lock {lock_path} is held)"
            ) from None
        # The holder may have unlinked the file between our open and flock:
        # then we locked an orphan and must retry on the current file.
        with contextlib.suppress(FileNotFoundError):
            if os.stat(lock_path).st_ino == os.fstat(fd).st_ino:
                return fd
        os.close(fd)


def _bind_unix(entry: str, path: Path, socket_mode: int, key: str) -> Listener:
    if not path.parent.is_dir():
        raise ListenError(f"{key}: {entry}: directory {path.parent} does not exist")
    lock_fd = _lock(entry, path, key)
    try:
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                raise ListenError(f"{key}: {entry}: {path} exists and is not a socket")
            if _is_served(path):
                raise ListenError(f"{key}: {entry}: another process is serving on {path}")
            path.unlink()  # stale: nobody serves it, and we hold the lock
        sock = _bind_unix_socket(path, socket_mode)
    except BaseException as exc:
        _release(path, lock_fd)
        if isinstance(exc, OSError):
            raise ListenError(f"{key}: {entry}: {exc.strerror or exc}") from exc
        raise
    return Listener(entry, sock, path=path, lock_fd=lock_fd)


def _is_served(path: Path) -> bool:
    """Does something accept connections on `path`? (A runnerd without our
    lock, or another program: its socket is never ours to take over.)"""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        # A full backlog blocks connect(): a server that busy is alive.
        probe.settimeout(_PROBE_TIMEOUT_S)
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except TimeoutError:
            return True
    return True


def _release(path: Path, lock_fd: int) -> None:
    """Remove the lock file, then drop the lock. Unlinking while still
    holding it is what makes the inode check in `_lock` sound."""
    with contextlib.suppress(OSError):
        _lock_path(path).unlink()
    os.close(lock_fd)


def _bind_unix_socket(path: Path, socket_mode: int) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # Bind under a umask that leaves the file unreachable until the chmod.
        old_umask = os.umask(0o177)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old_umask)
        os.chmod(path, socket_mode)
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock
