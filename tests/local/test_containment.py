"""Containment: in a PID namespace nothing a session started outlives it;
where namespaces are refused (forced here by config) the fallback says so."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import pytest
import trio

from runnerd.backend import Exited
from runnerd.local import LocalBackend
from runnerd.local.containment import (
    CLONE_NEWIPC,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    Containment,
    ContainmentPlan,
    probe_containment,
)
from runnerd.local.mounts import SessionView, covers
from runnerd.local.settings import LocalConfig
from tests.escapes import STAY, escape_script, is_running, kill_leftovers, read_pids, wait_all_gone

from .conftest import runtimes
from .recording import RecordingSink, start_session
from .specs import bundle_spec


def make_backend(workdir: Path, containment: str = "auto") -> LocalBackend:
    local = LocalConfig(
        workdir=workdir,
        stop_grace_s=0.5,
        runtimes=runtimes(),
        containment=containment,  # type: ignore[arg-type]
    )
    return LocalBackend(local)


def test_this_host_allows_pid_namespaces() -> None:
    # The escape tests below mean something only if the namespace is real.
    plan = probe_containment(allow_namespaces=True)
    assert plan.containment is Containment.PID_NAMESPACE, plan.reason
    # ... and the isolation tests (tests/daemon/test_isolation.py) only if
    # each session gets its mount namespace and its own /proc.
    assert plan.private_mounts and plan.fresh_proc, plan.mount_reason
    assert plan.notice is None
    # ... and the privilege tests (tests/daemon/test_privileges.py) only if
    # a root daemon's sessions drop to a uid of their own, with their own IPC.
    root = os.geteuid() == 0
    plan = probe_containment(allow_namespaces=True, session_uid=10**9 if root else None)
    assert plan.drops_root == root and plan.identity_notice is None, plan.root_reason
    assert plan.unshare_flags & CLONE_NEWIPC and plan.ipc_notice is None, plan.ipc_reason


def test_weaker_plans_say_what_a_session_can_reach() -> None:
    no_mounts = ContainmentPlan(
        Containment.PID_NAMESPACE, CLONE_NEWPID, mount_reason="the kernel refused it (EPERM)"
    )
    assert no_mounts.notice is not None
    assert "no mount namespace (the kernel refused it (EPERM))" in no_mounts.notice
    assert "read runnerd's config, other sessions' files and the API socket" in no_mounts.notice
    host_proc = ContainmentPlan(
        Containment.PID_NAMESPACE, CLONE_NEWPID | CLONE_NEWNS, mount_reason="mount: EPERM"
    )
    assert host_proc.notice is not None
    assert "host's /proc" in host_proc.notice and "read their environments" in host_proc.notice
    # In user namespaces of their own, the kernel keeps them out of each
    # other's environments (checked by hand under a systemd-like /proc).
    user_ns = ContainmentPlan(
        Containment.PID_NAMESPACE, CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS, mount_reason="x"
    )
    assert user_ns.notice is not None
    assert "command lines (not their environments" in user_ns.notice


def test_covers_hide_the_outermost_paths_and_never_the_session_itself() -> None:
    view = SessionView(
        hide=("/etc/runnerd", "/run/runnerd", "/etc/runnerd/apps.d", "/", "/w/s1", "/w"),
        keep="/w/s1",
    )
    # apps.d is inside the config dir; "/" would hide everything; the
    # session's own directory is bind-mounted back inside the workdir's cover.
    assert covers(view) == ["/w", "/etc/runnerd", "/run/runnerd"]


async def run_escapes(backend: LocalBackend, workdir: Path, then: str, end: str) -> dict[str, int]:
    """Start the escape script; end the session by `end` ("stop", "exit" or
    "kill-first-process"); return the escapees' host pids. The pid file is
    in the session's cwd (the host's temp dirs are not the session's)."""
    sink = RecordingSink()
    spec = bundle_spec("sh", escape_script(then), env={"PIDFILE": "pids"})
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            await sink.wait_output(b"escaped")
            pids = read_pids(workdir / spec.session_id / "app" / "pids")
            assert all(is_running(pid) for pid in pids.values())
            if end == "stop":
                session.scope.cancel()
            elif end == "exit":
                session.handle.write(b"go\n")
            elif end == "kill-first-process":
                # What the daemon's death does to its child (the parent-death
                # signal): the namespace must go with it.
                os.kill(session.handle.pid, signal.SIGKILL)
            await session.result()
    return pids


@pytest.mark.parametrize("end", ["stop", "kill-first-process"])
async def test_every_escapee_dies_with_the_session(tmp_path: Path, end: str) -> None:
    backend = make_backend(tmp_path / "w")
    pids = await run_escapes(backend, tmp_path / "w", STAY, end)
    await wait_all_gone(pids)


async def test_every_escapee_dies_when_the_workload_exits(tmp_path: Path) -> None:
    backend = make_backend(tmp_path / "w")
    pids = await run_escapes(backend, tmp_path / "w", "read x; exit 3", "exit")
    await wait_all_gone(pids)


async def test_fallback_leaves_a_setsid_escapee_alive_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runnerd.local")
    backend = make_backend(tmp_path / "w", "process-group")
    [notice] = [n for n in backend.notices if "process group only" in n]
    assert "setsid" in notice and "read runnerd's config" in notice
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings.count(notice) == 1
    pids = await run_escapes(backend, tmp_path / "w", STAY, "stop")
    try:
        # The documented limit: the group kill cannot reach a setsid'd orphan.
        assert is_running(pids["setsid"])
    finally:
        kill_leftovers(pids)


@pytest.mark.parametrize("containment", ["auto", "process-group"])
@pytest.mark.parametrize(
    ("script", "code"),
    [("exit 7", 7), ("kill -TERM $$", 143), ("kill -KILL $$", 137), ("exec sleep 0", 0)],
)
async def test_exit_codes_are_preserved(
    tmp_path: Path, containment: str, script: str, code: int
) -> None:
    backend = make_backend(tmp_path / "w", containment)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            spec = bundle_spec("sh", script)
            session = await start_session(nursery, backend, spec, RecordingSink())
            assert await session.result() == Exited(code)


async def test_workload_sees_its_own_namespace(tmp_path: Path) -> None:
    sink = RecordingSink()
    # PID 1 is the init; the workload is the next process in the namespace.
    spec = bundle_spec("sh", 'echo "pid=$$ ppid=$PPID"\n')
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, make_backend(tmp_path / "w"), spec, sink)
            assert await session.result() == Exited(0)
    assert b"pid=2 ppid=1" in sink.out
