"""One real runnerd per fuzz module, driven by synchronous clients.

Hypothesis runs each example as a plain function call, so the fuzz tests use
sync clients (httpx, the `websockets` sync client, raw sockets) against a
daemon started once per module: starting one per example would cost ~0.3 s
each. `FuzzDaemon.assert_alive()` is the invariant every example ends with:
the process is running, health answers 200, and its log holds no traceback.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.harness import build_config, daemon_env, dump_toml

READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


@dataclass
class FuzzDaemon:
    """`http` (UNIX socket) and `tcp` are clients kept for the whole module:
    building an httpx client costs more than a request."""

    socket_path: Path
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    http: httpx.Client
    tcp: httpx.Client

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def assert_alive(self) -> None:
        assert self.proc.poll() is None, f"runnerd died; log:\n{self.log()}"
        assert self.http.get("/v1/health").status_code == 200
        log = self.log()
        assert "Traceback" not in log and "ERROR" not in log, log


def _wait_ready(notify: socket.socket, proc: subprocess.Popen[bytes]) -> None:
    notify.settimeout(READY_TIMEOUT_S)
    while b"READY=1" not in notify.recv(65536).split(b"\n"):
        assert proc.poll() is None, "runnerd exited before READY=1"


@pytest.fixture(scope="module")
def fuzz_daemon() -> Iterator[FuzzDaemon]:
    base = Path(tempfile.mkdtemp(prefix="rd-fuzz-", dir="/tmp"))
    try:
        (base / "sessions").mkdir()
        socket_path = base / "runnerd.sock"
        overrides = {"server": {"listen": [f"unix:{socket_path}", "tcp:127.0.0.1:0"]}}
        config_path = base / "runnerd.toml"
        config_path.write_text(dump_toml(build_config(base, socket_path, overrides)))
        log_path = base / "runnerd.log"
        with contextlib.ExitStack() as stack:
            notify = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
            notify.bind(str(base / "notify.sock"))
            log = stack.enter_context(log_path.open("wb"))
            command = [sys.executable, "-m", "runnerd", "serve", "--config", str(config_path)]
            proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                env=daemon_env(base / "notify.sock"), cwd=str(base),
            )  # fmt: skip
            try:
                _wait_ready(notify, proc)
                match = re.search(r"tcp:127\.0\.0\.1:(\d+)", log_path.read_text())
                assert match, log_path.read_text()
                port = int(match.group(1))
                http = stack.enter_context(httpx.Client(
                    transport=httpx.HTTPTransport(uds=str(socket_path)),
                    base_url="http://localhost", timeout=httpx.Timeout(10.0),
                ))  # fmt: skip
                tcp = stack.enter_context(
                    httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=httpx.Timeout(10.0))
                )
                yield FuzzDaemon(socket_path, port, proc, log_path, http, tcp)
            finally:
                _stop(proc)
        assert proc.returncode == 0, log_path.read_text()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
