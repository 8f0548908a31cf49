"""Warm sandboxes (`runnerd.local.warm`): a run session started in one sees
what a cold start shows it, the pool refills, never shares a slot, leaves
nothing behind, survives a slot killed from outside; and
`local.warm_sandboxes = 0` is today's path. A real backend, opened as the
daemon opens it (`provider.open_backend`), real processes and sockets."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from runnerd.backend import BackendContext, Exited
from runnerd.backends import parse_config, provider_for
from runnerd.contract import PortMapping
from runnerd.local import LocalBackend
from runnerd.local.warm import WarmPool
from tests.daemon.test_network import needs_slirp

from .conftest import PYTHON
from .recording import RecordingSink, start_session
from .specs import bundle_spec
from .test_backend_ports import _exchange, free_port

# What the workload reports of itself: everything a session sees that is
# not its own id, uid or a pid; `<sid>` and `<uid>` stand for those.
REPORT = """
import json, os, sys
def first(path, keys):
    with open(path) as f:
        return [l.strip() for l in f if l.split(":")[0] in keys]
with open("/proc/net/route") as f:
    routes = sorted(l.split()[0] for l in f.readlines()[1:] if l.split()[1] == "00000000")
report = {
    "cwd": os.getcwd(), "argv": sys.argv, "files": sorted(os.listdir(".")),
    "data": open("data.txt").read(), "env": dict(os.environ),
    "size": list(os.get_terminal_size()), "uid": [os.getuid(), os.getgid(), os.getgroups()],
    "status": first("/proc/self/status", {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
                                          "NoNewPrivs", "Seccomp"}),
    "pids": len([p for p in os.listdir("/proc") if p.isdigit()]),
    "ifaces": sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]),
    "routes": routes, "tmp": sorted(os.listdir("/tmp")),
    "home": sorted(os.listdir(os.environ["HOME"])), "workdir": sorted(os.listdir("../..")),
    "slot-named": [l.split()[4] for l in open("/proc/self/mountinfo") if ".warm" in l],
    "cmdline": open("/proc/self/cmdline").read().split(chr(0)),
}
print("REPORT" + json.dumps(report) + "END", flush=True)
"""


def _config(tmp_path: Path, **local: Any) -> Any:
    raw = {
        "runner": {"default_image": "python"},
        "local": {
            "workdir": str(tmp_path / "sessions"),
            "stop_grace_seconds": 0.5,
            "runtimes": {"python": {"command": [PYTHON, "-u", "{entry}", "an-arg"]}},
            **local,
        },
    }
    return parse_config(raw, base_dir=tmp_path, read_text=Path.read_text)


@contextlib.asynccontextmanager
async def opened(tmp_path: Path, **local: Any) -> AsyncIterator[LocalBackend]:
    """The backend as the daemon opens it, its pool (if any) full."""
    config = _config(tmp_path, **local)
    async with provider_for(config).open_backend(config, BackendContext()) as backend:
        assert isinstance(backend, LocalBackend)
        if backend.warm is not None:
            await backend.warm.wait_until(full)
        yield backend


def full(pool: WarmPool) -> bool:
    return len(pool.ready) == pool.size


async def run_report(
    backend: LocalBackend, env: dict[str, str], size: tuple[int, int] = (123, 45)
) -> tuple[dict[str, Any], str]:
    """The workload's `REPORT`, with its session id and uid put as `<sid>`
    and `<uid>`; and its session id."""
    spec = bundle_spec("python", REPORT, extra_files={"data.txt": "bundle-data"}, env=env)
    sink = RecordingSink()
    sink.size = size
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            assert await session.result() == Exited(0), sink.out
    found = re.search(rb"REPORT(.*)END", sink.out.replace(b"\r\n", b""))
    assert found is not None, sink.out
    text = found.group(1).decode()
    report = json.loads(text.replace(spec.session_id, "<sid>"))
    report["uid"][:2] = ["<uid>" if n >= 0x70000000 else n for n in report["uid"][:2]]
    return report, spec.session_id


def warm_starts(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        getattr(r, "session_id", "")
        for r in caplog.records
        if r.getMessage().startswith("started pid") and "warm" in r.getMessage()
    ]


@needs_slirp
async def test_warm_session_sees_what_a_cold_one_sees(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runnerd.local")
    env = {"SESSION_SECRET": "s3cret", "LD_PRELOAD": "/nonexistent.so"}
    async with opened(tmp_path / "warm") as backend:
        warm, warm_id = await run_report(backend, env)
    async with opened(tmp_path / "cold", warm_sandboxes=0) as backend:
        assert backend.warm is None
        cold, cold_id = await run_report(backend, env)
    assert warm_starts(caplog) == [warm_id]
    assert warm["cwd"].endswith("/sessions/<sid>/app") and warm["argv"][1] == "an-arg"
    assert warm["data"] == "bundle-data" and warm["env"]["SESSION_SECRET"] == "s3cret"
    assert warm["size"] == [123, 45] and warm["uid"][:2] == ["<uid>", "<uid>"]
    assert warm["workdir"] == ["<sid>"], warm  # the session's own name, alone
    assert warm["slot-named"] == [], warm
    assert warm["ifaces"] == ["lo", "tap0"] and warm["routes"] == ["tap0"]
    # Everything else as the cold start shows it, but for the directories'
    # parents (each backend its own tmp_path).
    for report in (warm, cold):
        report["cwd"] = report["cwd"].rsplit("/sessions/", 1)[1]
        report["env"]["HOME"] = report["env"]["HOME"].rsplit("/sessions/", 1)[1]
        report["argv"][0] = report["argv"][0].rsplit("/sessions/", 1)[1]
        report["cmdline"][2] = report["cmdline"][2].rsplit("/sessions/", 1)[1]
    assert warm == cold


async def test_the_pool_refills_and_sessions_never_share_a_slot(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runnerd.local")
    script = """
    import os, sys
    print("who", os.getuid(), os.getcwd(), os.environ.get("MINE"), len(os.listdir()))
    sys.stdin.readline()
    """
    async with opened(tmp_path) as backend:
        assert backend.warm is not None
        sinks, sessions, ids = [], [], []
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for i in range(3):
                    await backend.warm.wait_until(full)
                    sink = RecordingSink()
                    # The third's bundle is written in a worker thread, not the loop.
                    files = {f"f{n}": "x" for n in range(9)} if i == 2 else {}
                    spec = bundle_spec("python", script, env={"MINE": f"m{i}"}, extra_files=files)
                    sessions.append(await start_session(nursery, backend, spec, sink))
                    sinks.append(sink)
                    ids.append(spec.session_id)
                    await sink.wait_output(b"who")
                for session in sessions:
                    session.handle.write(b"\n")
                    assert await session.result() == Exited(0)
    assert warm_starts(caplog) == ids
    seen = [re.search(rb"who (\d+) (\S+) (\S+) (\S+)", s.out) for s in sinks]
    assert all(seen), [s.out for s in sinks]
    uids = {m.group(1) for m in seen if m}
    cwds = {m.group(2) for m in seen if m}
    assert len(uids) == 3 and len(cwds) == 3, seen
    for i, (m, sid) in enumerate(zip(seen, ids, strict=True)):
        assert m is not None and m.group(2).decode().endswith(f"/{sid}/app")
        assert m.group(3) == f"m{i}".encode() and m.group(4) == (b"10" if i == 2 else b"1")


def _exists(path: str | Path) -> bool:
    return os.path.lexists(path)


def _children(parent: int) -> dict[int, str]:
    """`parent`'s child processes now: pid → command name."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1]
            if int(fields.split()[1]) == parent:
                found[int(pid)] = name
    return found


@needs_slirp
async def test_shutdown_leaves_no_process_of_the_pool_and_no_directory(tmp_path: Path) -> None:
    before = _children(os.getpid())
    async with opened(tmp_path) as backend:
        assert backend.warm is not None
        pool = {pid: name for pid, name in _children(os.getpid()).items() if pid not in before}
        assert len(pool) == 2 * backend.warm.size, pool  # each an init and its slirp4netns
        assert sorted(os.listdir(tmp_path / "sessions")) == [
            ".runnerd.lock",
            ".trash",
            ".warm-1",
            ".warm-2",
        ]
    assert not set(_children(os.getpid())) & set(pool)
    for pid in pool:
        assert not _exists(f"/proc/{pid}"), pid  # reaped, not a zombie
    assert sorted(os.listdir(tmp_path / "sessions")) == [".runnerd.lock"]


async def test_a_slot_killed_from_outside_is_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runnerd.local")
    async with opened(tmp_path, warm_sandboxes=1) as backend:
        pool = backend.warm
        assert pool is not None
        killed = pool.ready[0]
        os.kill(killed.proc.pid, signal.SIGKILL)
        with trio.fail_after(30):
            await pool.wait_until(lambda p: full(p) and killed not in p.ready)
        assert not (tmp_path / "sessions" / killed.name).exists()
        _, sid = await run_report(backend, {})
    assert warm_starts(caplog) == [sid]
    assert any("died before a session took it" in r.getMessage() for r in caplog.records)


async def test_a_slot_dead_at_its_take_leaves_the_session_to_start_cold(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A slot that died a moment before its take (its keeper had not seen it
    # yet): handed to the session as the pool would, found dead, discarded.
    caplog.set_level(logging.INFO, logger="runnerd.local")
    async with opened(tmp_path, warm_sandboxes=1) as backend:
        pool = backend.warm
        assert pool is not None
        dead = pool.take()
        assert dead is not None
        pidfd = os.pidfd_open(dead.proc.pid)
        try:
            os.kill(dead.proc.pid, signal.SIGKILL)
            await trio.lowlevel.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        monkeypatch.setattr(pool, "take", lambda: dead)
        report, _ = await run_report(backend, {"K": "v"})
        assert not _exists(tmp_path / "sessions" / dead.name)
    assert warm_starts(caplog) == []
    assert report["env"]["K"] == "v" and report["cwd"].endswith("/<sid>/app")
    assert any("warm sandbox .warm-1 had died" in r.getMessage() for r in caplog.records)


async def test_a_cold_start_short_of_a_uid_takes_a_slots(tmp_path: Path) -> None:
    # Two uids, both held by slots: an `inspect` session (never warm) still
    # starts, as it would without the pool, with a slot's uid.
    if os.geteuid() != 0:
        pytest.skip("session uids are a root daemon's")
    async with opened(tmp_path, session_uid_count=2) as backend:
        spec = bundle_spec("python", "print('cold-ran')\n", inspect=True)
        sink = RecordingSink()
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                session = await start_session(nursery, backend, spec, sink)
                assert await session.result() == Exited(0)
        assert b"cold-ran" in sink.out


def _host_address() -> str | None:
    """An address of this host that is not loopback (what slirp4netns's NAT
    reaches from a session), or None."""
    import fcntl
    import struct

    for _, name in socket.if_nameindex():
        if name == "lo":
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock, contextlib.suppress(OSError):
            packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()))
            return socket.inet_ntoa(packed[20:24])  # SIOCGIFADDR
    return None


@needs_slirp
async def test_warm_session_has_outbound_network_and_a_published_port(tmp_path: Path) -> None:
    host = _host_address()
    if host is None:
        pytest.skip("no non-loopback address on this host")
    outside = socket.create_server((host, 0))
    outside.setblocking(False)
    tcp = free_port()
    script = f"""
    import socket
    out = socket.create_connection(("{host}", {outside.getsockname()[1]}), timeout=10)
    out.sendall(b"from-inside")
    out.close()
    server = socket.create_server(("127.0.0.1", {tcp}))
    print("listening", flush=True)
    while True:
        conn, _ = server.accept()
        data = conn.recv(100)
        if data:
            conn.sendall(b"pong " + data)
            break
    """
    spec = bundle_spec("python", script, ports=(PortMapping(port=tcp, protocol="tcp"),))
    sink = RecordingSink()
    with outside, trio.fail_after(30):
        async with opened(tmp_path) as backend, trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            listener = trio.socket.from_stdlib_socket(outside)
            conn, _ = await listener.accept()
            with conn:
                assert await conn.recv(100) == b"from-inside"
            await sink.wait_for(lambda: (tcp, "reachable") in sink.reachability_calls)
            assert await _exchange(tcp) == b"pong ping\n"
            assert await session.result() == Exited(0)
