"""`runnerd serve`: listeners, socket mode, locking, startup log."""

from __future__ import annotations

import os
import re
import socket
import stat
import sys
from pathlib import Path

import httpx
import pytest

from runnerd import __version__
from tests.escapes import HOST_PID, host_pid
from tests.harness import (
    Daemon,
    DaemonExited,
    build_config,
    dump_toml,
    read_pty_until,
    run_runnerd,
    session_body,
    start_daemon,
)


def listing(directory: Path) -> set[str]:
    return set(os.listdir(directory))


async def test_serve_answers_health_over_the_unix_socket(runnerd: Daemon) -> None:
    async with runnerd.client() as client:
        response = await client.get("/v1/health")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "version": __version__}


async def test_serve_applies_socket_mode_to_the_unix_socket(tmp_path: Path) -> None:
    async with start_daemon(tmp_path, {"server": {"socket_mode": "0640"}}) as daemon:
        mode = os.stat(daemon.socket_path).st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o640


async def test_serve_logs_bound_addresses_including_a_tcp_port(tmp_path: Path) -> None:
    async with start_daemon(
        tmp_path, {"server": {"listen": ["tcp:127.0.0.1:0"]}}, socket_path=tmp_path / "unused.sock"
    ) as daemon:
        await daemon.wait_for_stderr("serving")
        match = re.search(r"tcp:127\.0\.0\.1:(\d+)", daemon.stderr_text())
        assert match, daemon.stderr_text()
        port = int(match.group(1))
        assert port != 0
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            response = await client.get("/v1/health")
        assert response.json()["ok"] is True


async def test_serve_refuses_a_second_instance_on_the_same_socket(runnerd: Daemon) -> None:
    inode = os.stat(runnerd.socket_path).st_ino
    # Same config: the listeners are bound first (the backend is handed
    # their directories), so the socket's lock is what it meets.
    second = await run_runnerd("serve", "--config", str(runnerd.config_path))
    stderr = second.stderr.decode()
    assert second.returncode == 2, stderr
    assert "another runnerd" in stderr and str(runnerd.socket_path) in stderr
    # The first instance keeps its socket and keeps serving.
    assert os.stat(runnerd.socket_path).st_ino == inode
    async with runnerd.client() as client:
        assert (await client.get("/v1/health")).status_code == 200


async def test_serve_on_a_held_workdir_exits_2_and_leaves_nothing_bound(runnerd: Daemon) -> None:
    # Its own socket, the first instance's workdir: the listener is bound,
    # then the backend refuses the workdir, and the listener goes with it.
    socket_path = runnerd.base / "other.sock"
    metrics = {"metrics": {"listen": [f"unix:{runnerd.base / 'metrics.sock'}"]}}
    other = runnerd.base / "other.toml"
    other.write_text(dump_toml(build_config(runnerd.base, socket_path, metrics)))
    second = await run_runnerd("serve", "--config", str(other))
    stderr = second.stderr.decode()
    assert second.returncode == 2, stderr
    assert "another runnerd" in stderr and str(runnerd.workdir) in stderr
    left = {"other.sock", "other.sock.lock", "metrics.sock", "metrics.sock.lock"}
    assert not left & set(os.listdir(runnerd.base))
    async with runnerd.client() as client:
        assert (await client.get("/v1/health")).status_code == 200


async def test_serve_replaces_a_stale_socket_file(tmp_path: Path) -> None:
    stale = tmp_path / "runnerd.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as leftover:
        leftover.bind(str(stale))  # the file outlives its (now closed) socket
    async with start_daemon(tmp_path, socket_path=stale) as daemon:
        async with daemon.client() as client:
            assert (await client.get("/v1/health")).status_code == 200


async def test_serve_refuses_a_socket_path_that_is_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "runnerd.sock"
    path.write_text("not a socket")
    with pytest.raises(DaemonExited) as exited:
        async with start_daemon(tmp_path, socket_path=path):
            pass
    assert exited.value.code == 2
    assert f"{path} exists and is not a socket" in exited.value.stderr
    assert path.read_text() == "not a socket"
    assert "runnerd.sock.lock" not in listing(tmp_path)


async def test_workloads_inherit_nothing_but_their_terminal(runnerd: Daemon) -> None:
    async with runnerd.client() as client:
        # The script's own shell holds the script file open until it execs, so
        # report the pid from a `sh -c` (no script fd) that already replaced it.
        # (Its token: `$$` would be the PID namespace's number, see HOST_PID.)
        body = session_body(
            f"exec /bin/sh -c '{HOST_PID}; echo \"pid=$HOST_PID\"; exec sleep 1000'"
        )
        session_id = (await client.post("/v1/sessions", json=body)).json()["sessionId"]
    output = await read_pty_until(runnerd.socket_path, session_id, rb"pid=\S+\r?\n")
    match = re.search(rb"pid=(\S+)", output)
    assert match is not None
    fd_dir = f"/proc/{host_pid(match.group(1))}/fd"
    # No listening socket, lock file, notify socket or pipe of the daemon.
    targets = {fd: os.readlink(f"{fd_dir}/{fd}") for fd in os.listdir(fd_dir)}
    assert sorted(targets) == ["0", "1", "2"], targets
    assert all(t.startswith("/dev/pts/") for t in targets.values()), targets


async def test_serve_on_an_inherited_fd(tmp_path: Path) -> None:
    path = tmp_path / "inherited.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as inherited:
        inherited.bind(str(path))
        inherited.listen()
        fd = inherited.fileno()
        async with (
            start_daemon(
                tmp_path,
                {"server": {"listen": [f"fd:{fd}"]}},
                pass_fds=(fd,),
                socket_path=path,
            ) as daemon,
            daemon.client() as client,
        ):
            assert (await client.get("/v1/health")).status_code == 200
            await daemon.wait_for_stderr(f"listen=unix:{path}")


async def test_serve_never_takes_over_a_socket_another_process_serves(tmp_path: Path) -> None:
    path = tmp_path / "runnerd.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
        other.bind(str(path))
        other.listen()
        inode = os.stat(path).st_ino
        with pytest.raises(DaemonExited) as exited:
            async with start_daemon(tmp_path, socket_path=path):
                pass
        assert exited.value.code == 2
        assert f"another process is serving on {path}" in exited.value.stderr
        assert os.stat(path).st_ino == inode
        assert "runnerd.sock.lock" not in listing(tmp_path)


LOW_NOFILE = """
import os, resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
os.execv(sys.executable, [sys.executable, "-m", "runnerd", "serve", "--config", sys.argv[1]])
"""


def open_files_limit(pid: int) -> tuple[str, str]:
    with open(f"/proc/{pid}/limits") as f:
        line = next(x for x in f if x.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    return soft, hard


async def test_serve_raises_the_open_files_soft_limit_to_the_hard_one(tmp_path: Path) -> None:
    # Each session holds a PTY and a pidfd: a soft limit of 256 (or the usual
    # 1024) would cap the runner long before max_sessions.
    _, hard = open_files_limit(os.getpid())
    if hard == "unlimited" or int(hard) <= 256:
        pytest.skip(f"the hard open files limit here ({hard}) leaves nothing to raise")
    command = [sys.executable, "-c", LOW_NOFILE]
    async with start_daemon(tmp_path, command=command) as daemon:
        assert open_files_limit(daemon.proc.pid) == (hard, hard)
        await daemon.wait_for_stderr("raised the open files limit")
        assert f"from=256 to={hard}" in daemon.stderr_text()
