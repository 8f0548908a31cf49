"""systemd integration: sd_notify, the watchdog, socket activation."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from runnerd.daemon.systemd import parse_listen_fds, parse_notify_address, parse_watchdog_interval
from tests.harness import DaemonExited, start_daemon

# Stands in for systemd: put the passed socket at fd 3, set LISTEN_FDS and
# LISTEN_PID (which must be the pid of runnerd itself, hence exec), exec runnerd.
ACTIVATE = """
import os, sys
os.dup2(int(sys.argv[1]), 3)
os.environ.update(LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
os.execv(sys.executable, [sys.executable, "-m", "runnerd", "serve", "--config", sys.argv[2]])
"""


def test_parse_listen_fds_only_for_our_pid() -> None:
    assert parse_listen_fds({"LISTEN_FDS": "2", "LISTEN_PID": "42"}, 42) == (3, 4)
    assert parse_listen_fds({"LISTEN_FDS": "2", "LISTEN_PID": "41"}, 42) == ()
    assert parse_listen_fds({"LISTEN_FDS": "x", "LISTEN_PID": "42"}, 42) == ()
    assert parse_listen_fds({}, 42) == ()


def test_parse_watchdog_interval_is_half_the_period_for_our_pid() -> None:
    assert parse_watchdog_interval({"WATCHDOG_USEC": "30000000"}, 7) == 15.0
    assert parse_watchdog_interval({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "7"}, 7) == 1.0
    assert parse_watchdog_interval({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "8"}, 7) is None
    assert parse_watchdog_interval({"WATCHDOG_USEC": "0"}, 7) is None
    assert parse_watchdog_interval({}, 7) is None


def test_parse_notify_address_handles_abstract_sockets() -> None:
    assert parse_notify_address({"NOTIFY_SOCKET": "/run/systemd/notify"}) == "/run/systemd/notify"
    assert parse_notify_address({"NOTIFY_SOCKET": "@sd-notify"}) == "\0sd-notify"
    assert parse_notify_address({}) is None


async def test_ready_then_stopping_reach_notify_socket(tmp_path: Path) -> None:
    async with start_daemon(tmp_path) as daemon:
        ready = next(n for n in daemon.notifications if "READY=1" in n.split("\n"))
        assert f"STATUS=serving on unix:{daemon.socket_path}" in ready.split("\n")
        assert not any("STOPPING=1" in n for n in daemon.notifications)
        assert await daemon.stop() == 0
        await daemon.wait_for_notification("STOPPING=1", timeout_s=1)


async def test_watchdog_pings_when_watchdog_usec_is_set(tmp_path: Path) -> None:
    async with start_daemon(tmp_path, env={"WATCHDOG_USEC": "100000"}) as daemon:
        # Pings keep coming (every 50 ms here), not just one at start.
        await daemon.wait_for_notification("WATCHDOG=1", timeout_s=5, count=3)


def bind_listening(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen()
    return sock


@pytest.mark.parametrize("listen", ["systemd", "same-unix-path"])
async def test_socket_activation_serves_the_passed_socket(tmp_path: Path, listen: str) -> None:
    path = tmp_path / "activated.sock"
    entry = "systemd" if listen == "systemd" else f"unix:{path}"
    with bind_listening(path) as passed:
        inode = os.stat(path).st_ino
        async with (
            start_daemon(
                tmp_path,
                {"server": {"listen": [entry]}},
                command=[sys.executable, "-c", ACTIVATE, str(passed.fileno())],
                pass_fds=(passed.fileno(),),
                socket_path=path,
            ) as daemon,
            daemon.client() as client,
        ):
            assert (await client.get("/v1/health")).status_code == 200
            assert "activated.sock.lock" not in os.listdir(tmp_path)
        # The socket is systemd's: runnerd neither replaced nor removed it.
        assert os.stat(path).st_ino == inode


async def test_listen_systemd_without_passed_sockets_exits_2(tmp_path: Path) -> None:
    with pytest.raises(DaemonExited) as exited:
        async with start_daemon(tmp_path, {"server": {"listen": ["systemd"]}}):
            pass
    assert exited.value.code == 2
    assert "LISTEN_FDS" in exited.value.stderr
