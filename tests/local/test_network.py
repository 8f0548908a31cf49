"""`probe_network`: what `[local] network` gives sessions on this host, and
what it says when that is less than asked (the daemon-level attacks are in
tests/daemon/test_network.py); and the namespace's socket factory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import trio

from runnerd.backend import Exited
from runnerd.local.containment import (
    CLONE_NEWNET,
    PROCESS_GROUP_PLAN,
    probe_containment,
)
from runnerd.local.network import INSTALL_SLIRP, NetworkMode, probe_network

from .conftest import runtimes
from .recording import RecordingSink, start_session
from .specs import bundle_spec


def test_isolated_adds_a_network_namespace_to_the_containment() -> None:
    plan, net = probe_network("isolated", probe_containment(allow_namespaces=True))
    assert plan.unshare_flags & CLONE_NEWNET
    assert net.own_namespace and net.notice is None
    if shutil.which("slirp4netns") or os.environ.get("CI"):
        assert net.outbound is not None, net.reason
        assert "--disable-host-loopback" in net.outbound


def test_none_has_no_outbound_and_says_so_in_the_log_line() -> None:
    plan, net = probe_network("none", probe_containment(allow_namespaces=True))
    assert plan.unshare_flags & CLONE_NEWNET and net.outbound is None
    assert "loopback only" in net.describe()


def test_isolated_without_slirp4netns_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    plan, net = probe_network("isolated", probe_containment(allow_namespaces=True))
    assert plan.unshare_flags & CLONE_NEWNET and net.own_namespace
    assert net.outbound is None and net.notice is None
    line = net.describe()
    assert "no outbound network: slirp4netns is not installed" in line
    assert INSTALL_SLIRP in line


def test_host_and_the_process_group_fallback_are_announced_as_unisolated() -> None:
    contained = probe_containment(allow_namespaces=True)
    plan, net = probe_network("host", contained)
    assert plan == contained and net.mode is NetworkMode.HOST
    assert net.notice is not None and 'local.network = "host"' in net.notice
    assert "reach runnerd's TCP listener" in net.notice
    plan, net = probe_network("isolated", PROCESS_GROUP_PLAN)
    assert plan == PROCESS_GROUP_PLAN
    assert net.notice is not None and "no network namespace" in net.notice


async def test_the_workload_never_holds_the_daemons_way_into_its_namespace(
    workdir: Path,
) -> None:
    # nsinit's socket to the daemon (which makes sockets in the namespace on
    # request) must not reach the workload: it lists its fds' targets.
    from runnerd.local import LocalBackend
    from runnerd.local.settings import LocalConfig

    backend = LocalBackend(LocalConfig(workdir=workdir, stop_grace_s=0.5, runtimes=runtimes()))
    script = """
    import os
    for fd in sorted(int(n) for n in os.listdir("/proc/self/fd")):
        try:
            print(fd, os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    """
    sink = RecordingSink()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, bundle_spec("python", script), sink)
            await session.result()
    assert b"socket:" not in sink.out, sink.out


async def test_a_session_starts_when_the_daemon_holds_more_than_1024_fds(workdir: Path) -> None:
    # A daemon serving ~500 sessions holds past 1024 fds, so the end of the
    # namespace's socket pair it hands `nsinit` is numbered past select()'s
    # FD_SETSIZE: nsinit's outer process died with "filedescriptor out of
    # range in select()" and every later session exited 1 before its workload.
    import resource

    from runnerd.local import LocalBackend
    from runnerd.local.settings import LocalConfig

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the hard open-files limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    # Built first, as the daemon builds it at start-up, with few fds open.
    backend = LocalBackend(LocalConfig(workdir=workdir, stop_grace_s=0.5, runtimes=runtimes()))
    held = [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) for _ in range(1100)]
    try:
        sink = RecordingSink()
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                session = await start_session(
                    nursery, backend, bundle_spec("sh", "echo workload-ran\n"), sink
                )
                outcome = await session.result()
        assert b"workload-ran" in sink.out, sink.out
        assert outcome == Exited(0)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
