"""The start-up probe child (`runnerd.local.hostprobe`): what the backend
is built on is the same whether the child found it or the daemon did, a
child asked another question or one that died is never used, and what the
probes log in the child is logged by the daemon."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
from pathlib import Path

import pytest

from runnerd.local.containment import Containment
from runnerd.local.hostprobe import HostFindings, find_host, open_probe_child
from runnerd.local.initpython import InitBinary
from runnerd.local.settings import LocalConfig


def _findings_and_binary(found: tuple[HostFindings, InitBinary | None]) -> tuple[object, ...]:
    """What a backend is built on, with the compiled init's fd (a number
    of this process, different each time) left out; the fd is closed."""
    findings, binary = found
    if binary is not None:
        os.close(binary.fd)
    return findings, None if binary is None else binary.path


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"network": "none"},
        {"network": "host"},
        {"containment": "process-group"},
        {"init_python": "/nonexistent/python3"},
    ],
    ids=["defaults", "network-none", "network-host", "process-group", "bad-init-python"],
)
def test_hostprobe_child_finds_what_the_daemon_finds(
    tmp_path: Path, changes: dict[str, object]
) -> None:
    local = dataclasses.replace(LocalConfig(workdir=tmp_path), **changes)  # type: ignore[arg-type]
    in_daemon = _findings_and_binary(find_host(local))
    with open_probe_child(local) as child:
        assert child is not None
        from_child = _findings_and_binary(find_host(local, child))
    assert from_child == in_daemon


def test_hostprobe_bad_init_python_is_refused_with_the_same_sentence(tmp_path: Path) -> None:
    local = LocalConfig(workdir=tmp_path, init_python="/nonexistent/python3")
    with open_probe_child(local) as child:
        findings, binary = find_host(local, child)
    if findings.plan.containment is Containment.PID_NAMESPACE:
        assert findings.init_problem is not None
        assert "/nonexistent/python3" in findings.init_problem
    assert binary is None  # local.init_python set: the operator chose Python


def test_hostprobe_child_asked_another_question_is_not_used(tmp_path: Path) -> None:
    asked = LocalConfig(workdir=tmp_path)
    built = dataclasses.replace(asked, containment="process-group")
    with open_probe_child(asked) as child:
        findings, binary = find_host(built, child)
    assert findings.plan.containment is Containment.PROCESS_GROUP
    assert "process-group" in (findings.plan.reason or "")
    assert binary is None


def test_hostprobe_child_that_died_is_probed_again_in_the_daemon(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    local = LocalConfig(workdir=tmp_path)
    in_daemon = _findings_and_binary(find_host(local))
    with open_probe_child(local) as child:
        assert child is not None
        os.kill(child.pid, signal.SIGKILL)
        with caplog.at_level(logging.WARNING, logger="runnerd.local.hostprobe"):
            again = _findings_and_binary(find_host(local, child))
    assert again == in_daemon
    assert "probe child failed" in caplog.text


def test_hostprobe_child_logs_what_the_daemon_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    local = LocalConfig(workdir=tmp_path)

    def logged(ahead: object = None) -> list[tuple[str, int, str]]:
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="runnerd.local"):
            _findings_and_binary(find_host(local, ahead))
        return [
            (r.name, r.levelno, r.getMessage())
            for r in caplog.records
            if r.name != "runnerd.local.hostprobe"
        ]

    in_daemon = logged()
    with open_probe_child(local) as child:
        assert logged(child) == in_daemon


def test_hostprobe_no_child_on_one_cpu(tmp_path: Path) -> None:
    local = LocalConfig(workdir=tmp_path)
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        with open_probe_child(local) as child:
            assert child is None
    finally:
        os.sched_setaffinity(0, cpus)
