"""The compiled init's own containment set-up (`nssetup.c`), through
`spawn_pty_process` in the real sandbox: a session runs in it as under the
Python init, and a set-up the kernel refuses fails the spawn with the error
the Python path gives (`cannot set up the session's containment`), the
workload never started."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
import trio

from runnerd.local.containment import Containment, probe_containment
from runnerd.local.forward import open_session_network
from runnerd.local.identity import SessionIdentity
from runnerd.local.initpython import NSINIT_BIN, choose_init_binary, choose_init_python
from runnerd.local.mounts import SessionView
from runnerd.local.network import probe_network
from runnerd.local.pty import PtyProcess
from runnerd.local.spawn import Launch, spawn_pty_process

SESSION_UID = 0x70000000 + 9  # a root daemon's session uid (any free one)


def _launch(compiled: bool, **changes: object) -> Launch:
    root = os.geteuid() == 0
    plan = probe_containment(allow_namespaces=True, session_uid=SESSION_UID if root else None)
    if plan.containment is not Containment.PID_NAMESPACE:
        pytest.skip("no PID namespace for sessions here: no init runs")
    if compiled and not os.access(NSINIT_BIN, os.X_OK):
        pytest.skip(f"{NSINIT_BIN} is not built (make builds it)")
    identity = SessionIdentity(SESSION_UID, SESSION_UID) if plan.drops_root else None
    init_python, problem = choose_init_python(plan, None, identity)
    assert problem is None, problem
    binary = choose_init_binary(plan, None, identity) if compiled else None
    assert binary is not None or not compiled
    launch = Launch(plan=plan, identity=identity, init_python=init_python, init_binary=binary)
    return Launch(**{**launch.__dict__, **changes})  # type: ignore[arg-type]


async def _output(proc: PtyProcess) -> bytes:
    chunks: list[bytes] = []
    done = trio.Event()
    async with proc, trio.open_nursery() as nursery:
        nursery.start_soon(proc.run_reader, chunks.append, done)
        await proc.wait()
        await done.wait()
    return b"".join(chunks)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
async def test_a_session_sees_its_own_namespaces_under_either_init(compiled: bool) -> None:
    script = "echo pid=$$; id -u; test -w /proc/sys/kernel/hostname && echo writable; echo end"
    with trio.fail_after(30):
        proc = await spawn_pty_process(
            ["/bin/sh", "-c", script],
            cwd=Path("/"),  # the host's /tmp is covered: a cwd there is gone
            env={"PATH": "/usr/bin:/bin"},
            stop_grace_s=0.5,
            launch=_launch(compiled),
        )
        out = await _output(proc)
    assert b"pid=2" in out, out  # the init is PID 1 of the session's namespace
    assert b"writable" not in out and b"end" in out, out
    if os.geteuid() == 0:
        assert str(SESSION_UID).encode() in out, out


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
async def test_a_refused_setup_fails_the_spawn_as_either_init_does(
    tmp_path: Path, compiled: bool
) -> None:
    # A cgroup directory that is not there: its cgroup.procs cannot be opened.
    launch = _launch(compiled, cgroup=tmp_path / "no-such-cgroup")
    marker = tmp_path / "ran"
    with trio.fail_after(30), pytest.raises(OSError) as refused:
        await spawn_pty_process(
            ["/bin/sh", "-c", f"touch {marker}"],
            cwd=Path("/"),
            env={"PATH": "/usr/bin:/bin"},
            stop_grace_s=0.5,
            launch=launch,
        )
    assert "cannot set up the session's containment" in str(refused.value)
    if compiled:  # the kernel's reason, surfaced (its errno, never a path)
        assert f"containment: {os.strerror(errno.ENOENT)}" in str(refused.value)
        assert str(tmp_path) not in str(refused.value)
    assert not marker.exists()


async def test_a_binary_swapped_after_the_check_never_runs(tmp_path: Path) -> None:
    if not os.access(NSINIT_BIN, os.X_OK):
        pytest.skip(f"{NSINIT_BIN} is not built (make builds it)")
    installed = tmp_path / "nsinit.bin"
    shutil.copy2(NSINIT_BIN, installed)
    launch = _launch(True)
    chosen = choose_init_binary(launch.plan, None, launch.identity, installed)
    assert chosen is not None
    # Replaced on disk once checked (a rename over it, as an install does).
    marker = tmp_path / "replacement-ran"
    swapped = tmp_path / "swapped"
    swapped.write_text(f"#!/bin/sh\ntouch {marker}\n")
    swapped.chmod(0o755)
    os.replace(swapped, installed)
    try:
        with trio.fail_after(30):
            proc = await spawn_pty_process(
                ["/bin/sh", "-c", "echo pid=$$"],
                cwd=Path("/"),
                env={"PATH": "/usr/bin:/bin"},
                stop_grace_s=0.5,
                launch=Launch(**{**launch.__dict__, "init_binary": chosen}),
            )
            out = await _output(proc)
    finally:
        os.close(chosen.fd)
    assert b"pid=2" in out, out  # the original init ran it, as PID 1
    assert not marker.exists()


async def test_a_cgroup_path_too_long_to_join_fails_rather_than_writing_a_truncated_one(
    tmp_path: Path,
) -> None:
    # `<cgroup>/cgroup.procs` cut to PATH_MAX names `<cgroup>/cgroup`: a
    # decoy file the init must never take for its cgroup.procs.
    cgroup, decoy = _deep_cgroup_with_decoy(tmp_path)
    marker = tmp_path / "ran"
    with trio.fail_after(30), pytest.raises(OSError) as refused:
        await spawn_pty_process(
            ["/bin/sh", "-c", f"touch {marker}"],
            cwd=Path("/"),
            env={"PATH": "/usr/bin:/bin"},
            stop_grace_s=0.5,
            launch=_launch(True, cgroup=Path(cgroup)),
        )
    assert os.strerror(errno.ENAMETOOLONG) in str(refused.value)
    assert _untouched(decoy, marker)


def _untouched(decoy: str, marker: Path) -> bool:
    """The decoy is still empty and the workload never ran."""
    return os.path.getsize(decoy) == 0 and not marker.exists()


def _deep_cgroup_with_decoy(tmp_path: Path) -> tuple[str, str]:
    """A directory whose `cgroup.procs` path is just past PATH_MAX, and the
    empty file `cgroup` in it."""
    length = 4095 - len("/cgroup")
    cgroup = str(tmp_path)
    while len(cgroup) < length:
        cgroup += "/" + "d" * min(200, length - len(cgroup) - 1)
    os.makedirs(cgroup)
    decoy = os.path.join(cgroup, "cgroup")
    with open(decoy, "w"):
        pass
    return cgroup, decoy


def _slirp_children() -> list[int]:
    """The slirp4netns processes this test process started and not reaped."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (OSError, ValueError):
            continue
        comm, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if comm == "slirp4netns" and int(rest.split()[1]) == os.getpid():
            found.append(int(entry))
    return found


@pytest.mark.parametrize("where", ["before", "after"])
async def test_a_setup_refused_around_the_network_leaves_no_outbound_running(
    tmp_path: Path, where: str
) -> None:
    # slirp4netns is started once the namespaces exist (the init's `N`),
    # while the init makes its mounts: a set-up refused before that point
    # (no cgroup) or after it (the session's directory to keep is gone)
    # fails the spawn alike, the workload never run and slirp4netns gone.
    base = _launch(True)
    plan, net_plan = probe_network("isolated", base.plan)
    if net_plan.outbound is None:
        pytest.skip(f"no outbound network here: {net_plan.reason}")
    changes: dict[str, object] = {"plan": plan}
    if where == "before":
        changes["cgroup"] = tmp_path / "no-such-cgroup"
    else:
        changes["view"] = SessionView((), str(tmp_path / "no-such-session-dir"))
    marker = tmp_path / "ran"
    with trio.fail_after(30), pytest.raises(OSError) as refused:
        async with open_session_network(net_plan, "refused") as net:
            await spawn_pty_process(
                ["/bin/sh", "-c", f"touch {marker}"],
                cwd=Path("/"),
                env={"PATH": "/usr/bin:/bin"},
                stop_grace_s=0.5,
                launch=_launch(True, **changes),
                sockets_fd=net.child_fd,
                attach=net.attach,
            )
    assert "cannot set up the session's containment" in str(refused.value)
    assert not marker.exists()
    assert _slirp_children() == []
