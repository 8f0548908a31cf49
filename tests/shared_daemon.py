"""One real runnerd for a whole test module: the `runnerd` fixture here.

For checks that need a real daemon but not a fresh one: requests a daemon
answers without keeping state (health, capabilities, probe, the OpenAPI
document, unknown routes), and refusals (a rejected request changes no
state, so the next test sees the same daemon). A test that counts sessions,
reloads or signals the daemon keeps its own (`tests.harness.start_daemon`).

pytest-trio runs each test in its own `trio.run`, so a fixture that outlives
one test cannot be async: this one starts `python -m runnerd serve` with
`subprocess`, waits for its `READY=1` on a blocking datagram socket, and at
the module's end sends SIGTERM and asserts exit 0, as `start_daemon` does.
Its stderr goes to a file, so `stderr_text()` reads what it logged so far.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.harness import (
    READY_TIMEOUT_S,
    STOP_TIMEOUT_S,
    DaemonClient,
    DaemonExited,
    _short_base,
    build_config,
    daemon_env,
    dump_toml,
)


class SharedDaemon(DaemonClient):
    """The parts of `tests.harness.Daemon` a shared daemon can offer."""

    def __init__(self, base: Path, socket_path: Path, stderr_path: Path) -> None:
        self.base = base
        self.socket_path = socket_path
        self.workdir = base / "sessions"
        self._stderr_path = stderr_path

    def stderr_text(self) -> str:
        return self._stderr_path.read_text(errors="replace")


def _wait_ready(proc: subprocess.Popen[bytes], notify: socket.socket, stderr: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    notify.settimeout(0.05)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DaemonExited(proc.returncode, stderr.read_text(errors="replace"))
        with contextlib.suppress(TimeoutError):
            if "READY=1" in notify.recv(4096).decode().split("\n"):
                return
    raise TimeoutError(f"runnerd not ready within {READY_TIMEOUT_S} s")


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.terminate()
    try:
        return proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


@contextlib.contextmanager
def shared_daemon(
    base: Path, overrides: Mapping[str, Any] | None = None
) -> Iterator[SharedDaemon]:
    """Run runnerd on the harness's config (with `overrides`) in `base`."""
    sock_dir, remove_sock_dir = _short_base(base)
    socket_path = sock_dir / "runnerd.sock"
    (base / "sessions").mkdir(exist_ok=True)
    config_path = base / "runnerd.toml"
    config_path.write_text(dump_toml(build_config(base, socket_path, overrides)))
    stderr_path = base / "runnerd.stderr"
    argv = [sys.executable, "-m", "runnerd", "serve", "--config", str(config_path)]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
            notify.bind(str(sock_dir / "notify.sock"))
            with stderr_path.open("wb") as stderr:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    env=daemon_env(sock_dir / "notify.sock"),
                    cwd=str(base),
                )
            try:
                _wait_ready(proc, notify, stderr_path)
                yield SharedDaemon(base, socket_path, stderr_path)
            finally:
                code = _stop(proc)
        assert code == 0, f"runnerd exited {code}; stderr:\n{stderr_path.read_text()}"
    finally:
        if remove_sock_dir:
            shutil.rmtree(sock_dir, ignore_errors=True)


@pytest.fixture(scope="module", name="runnerd")
def shared_runnerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    """`runnerd`, one per module: import it into a test module (or a
    conftest) whose tests share a daemon."""
    with shared_daemon(tmp_path_factory.mktemp("runnerd")) as daemon:
        yield daemon
