"""A session's init is the compiled one (`runnerd/local/nsinit.c`, built by
`make` into `nsinit.bin`) and no Python interpreter, through the real daemon;
`local.init_python` set keeps the operator's choice, the Python init; and
the choice itself (`choose_init_binary`) falls back to Python whenever the
binary is not there or does not run. What the init guarantees (namespaces,
the network, parent death, the mount view) is proved by the isolation tests
(`tests/daemon/test_containment.py`, `test_isolation.py`, `test_network.py`,
`tests/local/`), which run on it."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from runnerd.local.containment import (
    PROCESS_GROUP_PLAN,
    Containment,
    ContainmentPlan,
    probe_containment,
)
from runnerd.local.initpython import NSINIT_BIN, SYSTEM_PYTHON, choose_init_binary
from tests.harness import Daemon, read_pty_until, session_body, start_daemon

needs_binary = pytest.mark.skipif(
    not os.access(NSINIT_BIN, os.X_OK), reason=f"{NSINIT_BIN} is not built (make builds it)"
)


def _descendants(pid: int) -> list[int]:
    """Every live process under `pid`, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent]
        found += children
        frontier += children
    return found


def _exe_of(path: str) -> str:
    return os.path.realpath(path)


def _exe(pid: int) -> str:
    try:
        return os.path.realpath(f"/proc/{pid}/exe")
    except OSError:
        return ""


async def _session_programs(daemon: Daemon) -> list[str]:
    """The programs of a running session's processes (its init's tree, once
    the workload printed its line)."""
    async with daemon.client() as client:
        body = session_body("echo ready; exec sleep 300\n")
        response = await client.post("/v1/sessions", json=body)
        assert response.status_code == 201, response.text
    await read_pty_until(daemon.socket_path, response.json()["sessionId"], rb"ready")
    # The session's init is the daemon's child with a tree under it: not a
    # warm sandbox waiting for a session (`local.warm_sandboxes`, an init
    # without a PID 1 yet), slirp4netns, or a child the daemon is forking
    # right now (a replacement sandbox, still the daemon's own program).
    inits = [
        pid
        for pid in _children(daemon.proc.pid)
        if _children(pid) and os.path.basename(_exe(pid)) != "slirp4netns"  # its tap child
    ]
    assert len(inits) == 1, [_exe(pid) for pid in inits]
    return [_exe(pid) for pid in [inits[0], *_descendants(inits[0])]]


def _children(pid: int) -> list[int]:
    """`pid`'s children, whichever of its threads forked them."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _plan() -> ContainmentPlan:
    root = os.geteuid() == 0
    return probe_containment(allow_namespaces=True, session_uid=0x70000000 if root else None)


pytestmark = pytest.mark.skipif(
    _plan().containment is not Containment.PID_NAMESPACE,
    reason="no PID namespace for sessions here: no init runs",
)


@needs_binary
async def test_a_session_runs_under_the_compiled_init_and_no_interpreter(
    tmp_path: Path,
) -> None:
    async with start_daemon(tmp_path) as daemon:
        with trio.fail_after(30):
            programs = await _session_programs(daemon)
    inits = [p for p in programs if p == str(NSINIT_BIN.resolve())]
    assert len(inits) == 2, programs  # the outer and PID 1, as nsinit.py's
    assert not [p for p in programs if "python" in os.path.basename(p)], programs
    assert "/usr/bin/sleep" in programs or "/bin/sleep" in programs, programs


@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason=f"no {SYSTEM_PYTHON}")
async def test_a_configured_init_python_is_the_init_that_runs(tmp_path: Path) -> None:
    overrides: dict[str, Any] = {"local": {"init_python": SYSTEM_PYTHON}}
    async with start_daemon(tmp_path, overrides) as daemon:
        with trio.fail_after(30):
            programs = await _session_programs(daemon)
    assert str(NSINIT_BIN.resolve()) not in programs
    assert programs.count(_exe_of(SYSTEM_PYTHON)) == 2, programs


def test_the_python_init_runs_when_the_binary_is_not_built(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runnerd.local.initpython")
    assert choose_init_binary(_plan(), None, None, tmp_path / "nsinit.bin") is None
    # A host with no C compiler is a supported set-up: said, not warned.
    (said,) = [r for r in caplog.records if "runs in Python" in r.getMessage()]
    assert "is not built" in said.getMessage() and said.levelno == logging.INFO


def test_the_python_init_runs_when_the_binary_does_not_run(tmp_path: Path) -> None:
    broken = tmp_path / "nsinit.bin"
    broken.write_bytes(b"\x7fELF not really")
    broken.chmod(0o755)
    assert choose_init_binary(_plan(), None, None, broken) is None


def test_a_stale_binary_is_not_used(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Built from older sources: it runs, but does not take today's arguments.
    stale = tmp_path / "nsinit.bin"
    stale.write_text("#!/bin/sh\necho runnerd-nsinit 1\n")
    stale.chmod(0o755)
    caplog.set_level(logging.INFO, logger="runnerd.local.initpython")
    assert choose_init_binary(_plan(), None, None, stale) is None
    # Built but stale costs every session an interpreter: the operator is warned.
    (said,) = [r for r in caplog.records if "is stale" in r.getMessage()]
    assert said.levelno == logging.WARNING, said


@needs_binary
def test_the_binary_is_chosen_unless_an_interpreter_is_configured() -> None:
    plan = _plan()
    chosen = choose_init_binary(plan, None, None)
    assert chosen is not None and chosen.path == NSINIT_BIN
    os.close(chosen.fd)
    assert choose_init_binary(plan, SYSTEM_PYTHON, None) is None
    assert choose_init_binary(PROCESS_GROUP_PLAN, None, None) is None
