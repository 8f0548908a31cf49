"""The shared end-to-end harness: a REAL runnerd subprocess and real clients.

Owned by the daemon tests, used by every end-to-end test. Import from here:

    from tests.harness import start_daemon, open_ws, iter_sse

- `start_daemon(tmp_path, overrides=None, *, env=None, socket_path=None,
  command=None, pass_fds=())`: async context manager. Writes a temp config
  (local backend, default image `sh`, a `unix:` socket, a workdir in
  tmp_path, runtimes `sh` and `python`; `overrides` deep-merges over it, a
  `None` value deletes a key; `env` adds daemon environment), starts
  `python -m runnerd serve --config ...`,
  waits for the daemon's own `READY=1` on a NOTIFY_SOCKET datagram socket the
  harness owns, and yields a `Daemon`. At exit it sends SIGTERM and asserts
  exit 0 within 10 s (SIGKILL and fail otherwise), unless the test already
  stopped it with `await d.stop()`. If runnerd exits before READY=1 it raises
  `DaemonExited(code, stderr)`, which is how refusal tests assert exit 2.
- `Daemon`: `socket_path`, `config_path`, `workdir`, `proc`, `client()`
  (an httpx.AsyncClient over the UNIX socket, base_url http://runnerd),
  `stderr_text()`, `notifications` (every sd_notify datagram, in order),
  `await wait_for_stderr(text)`, `await wait_for_notification(state, count=1)`,
  `count_notifications(state)`,
  `send_signal(signum)`, `await stop(signum=SIGTERM) -> exit code`,
  `write_config(overrides)` (rewrites the config file from the same base).
- `open_ws(socket_path, resource)`: a trio-websocket connection over the
  UNIX socket; a rejection raises `ConnectionRejected` (never a group).
- `session_body(script, image="sh")`: a `POST /v1/sessions` body.
- `read_pty_until(socket_path, session_id, pattern)`: PTY output (over the
  WebSocket, from seq 0) up to the first match of the regex `pattern`.
- `iter_sse(response)`: parsed `SseFrame(id, event, data, comments)` from an
  httpx streaming response.
- `run_runnerd(*args)`: `python -m runnerd ARGS` to completion (check-config,
  a refused start), returning the CompletedProcess.
- `build_config` / `dump_toml`: the config text, for tests that write their
  own file (e.g. a config error that must exit 2).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio
from trio_websocket import WebSocketConnection, wrap_client_stream

from runnerd.local.identity import blocking_directory
from runnerd.local.workdir import WARM_PREFIX

READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
# AF_UNIX paths are limited to 108 bytes; pytest's tmp_path can be longer.
_MAX_SOCKET_PATH = 100


class DaemonExited(Exception):
    """runnerd exited before it reported READY=1."""

    def __init__(self, code: int, stderr: str) -> None:
        super().__init__(f"runnerd exited with {code} before READY=1; stderr:\n{stderr}")
        self.code = code
        self.stderr = stderr


# ---------------------------------------------------------------- config text


# The interpreter of the "python" runtime: this one, unless a session's uid
# cannot run it (a root daemon's sessions, and a venv under a 0700 home:
# the README's "Runtimes"); then the system's. Session scripts use the stdlib only.
SESSION_PYTHON = (
    sys.executable
    if os.geteuid() != 0 or blocking_directory(sys.executable) is None
    else "/usr/bin/python3"
)


def build_config(
    base: Path,
    socket_path: Path,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The harness's default config as a dict, with `overrides` deep-merged."""
    config: dict[str, Any] = {
        "server": {"listen": [f"unix:{socket_path}"], "socket_mode": "0660", "log_level": "info"},
        "runner": {"backend": "local", "default_image": "sh", "state_dir": str(base / "state")},
        "local": {
            "workdir": str(base / "sessions"),
            "stop_grace_seconds": 1,
            # No wait for a first size (the default's 0.2 s on every start):
            # the tests of that wait set their own (tests/e2e/test_first_size.py).
            "terminal_size_wait_seconds": 0,
            "runtimes": {
                "sh": {"command": ["/bin/sh", "{entry}"]},
                "python": {"command": [SESSION_PYTHON, "-u", "{entry}"]},
            },
        },
    }
    return _merge(config, overrides or {})


def _merge(base: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))  # a JSON string is a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        inner = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{" + inner + "}"
    raise TypeError(f"cannot write {value!r} as TOML")


def dump_toml(data: Mapping[str, Any], _prefix: tuple[str, ...] = ()) -> str:
    """A minimal TOML writer: scalars and lists inline, dicts as [tables]."""
    lines: list[str] = []
    tables: list[str] = []
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            tables.append(dump_toml(value, (*_prefix, key)))
        else:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    head = [f"[{'.'.join(_toml_key(k) for k in _prefix)}]"] if _prefix and lines else []
    return "\n".join([*head, *lines, *tables]) + "\n"


# ---------------------------------------------------------------- the daemon


class _Changes:
    """Wake every waiter when something new was recorded."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()


class DaemonClient:
    """What every real-daemon handle offers its tests (per-test and shared)."""

    socket_path: Path
    workdir: Path

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        kwargs.setdefault("timeout", httpx.Timeout(10.0))
        return httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=str(self.socket_path)),
            base_url="http://runnerd",
            **kwargs,
        )

    def session_dirs(self) -> list[str]:
        """The session directories in the workdir (its lock file is not one,
        nor a warm sandbox's, no session's yet: `runnerd.local.warm`), with
        those of ended sessions its trash still holds."""
        trash = self.workdir / ".trash"
        held = [p.name for p in trash.iterdir()] if trash.is_dir() else []
        names = [
            p.name for p in self.workdir.iterdir() if p.name not in (".runnerd.lock", ".trash")
        ]
        return sorted(name for name in names + held if not name.startswith(WARM_PREFIX))


@dataclass
class Daemon(DaemonClient):
    socket_path: Path
    config_path: Path
    workdir: Path
    base: Path
    proc: trio.Process
    notifications: list[str] = field(default_factory=list)
    _stderr: bytearray = field(default_factory=bytearray)
    _changes: _Changes = field(default_factory=_Changes)
    _stopped: bool = False
    _stderr_closed: trio.Event = field(default_factory=trio.Event)

    def stderr_text(self) -> str:
        return self._stderr.decode(errors="replace")

    def write_config(self, overrides: Mapping[str, Any] | None = None) -> None:
        """Rewrite the config file (same harness base, new overrides)."""
        data = build_config(self.base, self.socket_path, overrides)
        self.config_path.write_text(dump_toml(data))

    def send_signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    async def wait_for_stderr(self, text: str, timeout_s: float = 10.0) -> None:
        with trio.fail_after(timeout_s):
            while text not in self.stderr_text():
                await self._changes.wait()

    def count_notifications(self, state: str) -> int:
        """How many datagrams so far carried the line `state` (e.g. "WATCHDOG=1")."""
        return sum(state in n.split("\n") for n in self.notifications)

    async def wait_for_notification(
        self, state: str, timeout_s: float = 10.0, *, count: int = 1
    ) -> None:
        """Wait until `count` datagrams carried the line `state` (e.g. "STOPPING=1")."""
        with trio.fail_after(timeout_s):
            while self.count_notifications(state) < count:
                await self._changes.wait()

    async def stop(self, signum: int = signal.SIGTERM, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """Signal runnerd and wait for it to exit; return its exit code.

        Fails the test (after SIGKILL) if it does not exit within `timeout_s`.
        """
        self._stopped = True
        if self.proc.returncode is None:
            self.proc.send_signal(signum)
        with trio.move_on_after(timeout_s):
            await self.proc.wait()
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError(
                f"runnerd did not exit within {timeout_s} s of signal {signum}; "
                f"stderr:\n{self.stderr_text()}"
            )
        return self.proc.returncode

    async def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.receive_some(65536):
            self._stderr += chunk
            self._changes.notify()
        self._stderr_closed.set()

    async def _receive_notifications(self, sock: trio.socket.SocketType) -> None:
        while True:
            data = await sock.recv(65536)
            self.notifications.append(data.decode(errors="replace"))
            self._changes.notify()

    async def _watch_exit(self) -> None:
        await self.proc.wait()
        self._changes.notify()


def _short_base(tmp_path: Path) -> tuple[Path, bool]:
    """A directory for sockets: tmp_path itself, or a short /tmp dir when
    tmp_path is too long for an AF_UNIX address (the caller removes it)."""
    if len(str(tmp_path / "runnerd.sock.lock")) <= _MAX_SOCKET_PATH:
        return tmp_path, False
    return Path(tempfile.mkdtemp(prefix="rd-", dir="/tmp")), True


def daemon_env(notify_path: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The daemon's environment: ours minus any systemd variables, plus ours."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("NOTIFY_", "LISTEN_", "WATCHDOG_"))
    }
    env["NOTIFY_SOCKET"] = str(notify_path)
    env.update(extra or {})
    return env


@contextlib.asynccontextmanager
async def start_daemon(
    tmp_path: Path,
    overrides: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    command: list[str] | None = None,
    pass_fds: tuple[int, ...] = (),
    socket_path: Path | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> AsyncIterator[Daemon]:
    """Run runnerd on a temp config until the block ends (see module doc).

    `command` replaces the argv (the config path is appended as its last
    argument), e.g. to wrap runnerd for socket activation. `socket_path`
    replaces the default `unix:` socket (and is what `client()` connects to).
    """
    sock_dir, remove_sock_dir = _short_base(tmp_path)
    notify_path = sock_dir / "notify.sock"
    try:
        socket_path = socket_path or sock_dir / "runnerd.sock"
        workdir = tmp_path / "sessions"
        workdir.mkdir(exist_ok=True)
        config_path = tmp_path / "runnerd.toml"
        config_path.write_text(dump_toml(build_config(tmp_path, socket_path, overrides)))
        argv = [
            *(command or [sys.executable, "-m", "runnerd", "serve", "--config"]),
            str(config_path),
        ]
        with trio.socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
            await notify.bind(str(notify_path))
            proc = await trio.lowlevel.open_process(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=daemon_env(notify_path, env),
                pass_fds=pass_fds,
                cwd=str(tmp_path),
            )
            daemon = Daemon(socket_path, config_path, workdir, tmp_path, proc)
            try:
                async with _unwrapped_group(), trio.open_nursery() as nursery:
                    try:
                        nursery.start_soon(daemon._drain_stderr)
                        nursery.start_soon(daemon._receive_notifications, notify)
                        nursery.start_soon(daemon._watch_exit)
                        await _wait_ready(daemon, ready_timeout_s)
                        yield daemon
                        if not daemon._stopped:
                            code = await daemon.stop()
                            assert code == 0, (
                                f"runnerd exited {code}; stderr:\n{daemon.stderr_text()}"
                            )
                    finally:
                        nursery.cancel_scope.cancel()
            finally:
                # The test failed or was cancelled: still stop runnerd the
                # clean way so it takes its workloads down, SIGKILL last.
                with trio.CancelScope(shield=True):
                    if proc.returncode is None:
                        proc.terminate()
                        with trio.move_on_after(STOP_TIMEOUT_S):
                            await proc.wait()
                    if proc.returncode is None:
                        proc.kill()
                        await proc.wait()
                    if proc.stderr is not None:
                        await proc.stderr.aclose()
    finally:
        with contextlib.suppress(OSError):
            notify_path.unlink()
        if remove_sock_dir:
            shutil.rmtree(sock_dir, ignore_errors=True)


@contextlib.asynccontextmanager
async def _unwrapped_group() -> AsyncIterator[None]:
    """Let a lone exception out of a nursery as itself, never as a group:
    tests write `pytest.raises(DaemonExited)` and see their own failures."""
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


async def _wait_ready(daemon: Daemon, timeout_s: float) -> None:
    with trio.fail_after(timeout_s):
        while True:
            if any("READY=1" in n.split("\n") for n in daemon.notifications):
                return
            if daemon.proc.returncode is not None:
                # Let the stderr drain finish so the error names what failed.
                with trio.move_on_after(2):
                    await daemon._stderr_closed.wait()
                raise DaemonExited(daemon.proc.returncode, daemon.stderr_text())
            await daemon._changes.wait()


async def run_runnerd(
    *args: str, env: Mapping[str, str] | None = None, timeout_s: float = 20.0
) -> subprocess.CompletedProcess[bytes]:
    """Run `python -m runnerd ARGS` to completion (check-config, refusals)."""
    full_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("NOTIFY_", "LISTEN_", "WATCHDOG_"))
    }
    full_env.update(env or {})
    with trio.fail_after(timeout_s):
        return await trio.run_process(
            [sys.executable, "-m", "runnerd", *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=full_env,
            stdin=subprocess.DEVNULL,
        )


# ---------------------------------------------------------------- clients


def session_body(
    script: str, *, image: str = "sh", entry: str = "main.sh", env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A `POST /v1/sessions` body running `script` as the bundle's entry."""
    return {
        "env": dict(env or {}),
        "bundle": {
            "entryRelativePath": entry,
            "files": [{"relativePath": entry, "contents": script}],
        },
        "config": {"image": image, "pullPolicy": "missing"},
    }


@contextlib.asynccontextmanager
async def open_ws(
    socket_path: Path | str, resource: str, *, host: str = "runnerd", **kwargs: Any
) -> AsyncIterator[WebSocketConnection]:
    """A WebSocket over runnerd's UNIX socket.

    Raises trio_websocket's `ConnectionRejected` / `HandshakeError` unwrapped.
    """
    stream = await trio.open_unix_socket(str(socket_path))
    async with _unwrapped_group(), stream, trio.open_nursery() as nursery:
        ws = await wrap_client_stream(nursery, stream, host, resource, **kwargs)
        try:
            yield ws
        finally:
            await ws.aclose()


async def read_pty_until(
    socket_path: Path | str, session_id: str, pattern: bytes, *, timeout_s: float = 10.0
) -> bytes:
    """Replay and follow a session's PTY (WebSocket, from seq 0) until the
    output matches the regex `pattern`; return all output read so far."""
    output = b""
    async with open_ws(socket_path, f"/v1/sessions/{session_id}/io?lastSeq=0") as ws:
        with trio.fail_after(timeout_s):
            while not re.search(pattern, output):
                message = await ws.get_message()
                if isinstance(message, bytes):
                    output += message[4:]  # 4-byte seq, then the bytes
    return output


@dataclass
class SseFrame:
    id: int | None = None
    event: str | None = None
    data: Any = None  # the parsed JSON, or the raw text when it is not JSON
    comments: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)


async def iter_sse(response: httpx.Response) -> AsyncIterator[SseFrame]:
    """Yield each frame of a `text/event-stream` response as it arrives.

    A comment-only frame (`: heartbeat`) is yielded too, with `comments` set.
    """
    frame = SseFrame()
    data_lines: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if frame.raw:
                if data_lines:
                    text = "\n".join(data_lines)
                    try:
                        frame.data = json.loads(text)
                    except ValueError:
                        frame.data = text
                yield frame
            frame, data_lines = SseFrame(), []
            continue
        frame.raw.append(line)
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "":
            frame.comments.append(value)
        elif name == "id":
            frame.id = int(value) if value.isdigit() else None
        elif name == "event":
            frame.event = value
        elif name == "data":
            data_lines.append(value)
