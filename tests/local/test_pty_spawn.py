"""Spawning on a PTY: a failure after the fork leaves nothing behind, and log
lines carry the session id as a field."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest
import trio

from runnerd.backend import Exited
from runnerd.local import LocalBackend
from runnerd.local.fdpass import passing
from runnerd.local.spawn import spawn_pty_process
from runnerd.local.spawner import run_in_spawner

from .recording import RecordingSink, start_session
from .specs import bundle_spec


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def is_gone(pid: int) -> bool:
    """Reaped: not even a zombie is left."""
    return not os.path.exists(f"/proc/{pid}")


async def test_spawn_kills_reaps_and_closes_when_pidfd_open_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawned: list[int] = []

    def pidfd_open_out_of_fds(pid: int, flags: int = 0) -> int:
        # The one fault injected: the process table and PTY are real.
        spawned.append(pid)
        raise OSError(24, "Too many open files")

    # The hand-on's /dev/null blocks are the process's for good from the
    # first spawn on (runnerd.local.fdpass): taken now, run alone this test
    # would count them as the failed spawn's.
    with passing():
        pass
    before = open_fds()
    monkeypatch.setattr(os, "pidfd_open", pidfd_open_out_of_fds)
    with pytest.raises(OSError, match="Too many open files"):
        await spawn_pty_process(
            ["/bin/sleep", "1000"], cwd=tmp_path, env={}, stop_grace_s=0.5, label="s1"
        )
    monkeypatch.undo()
    assert len(spawned) == 1
    assert is_gone(spawned[0])  # killed and reaped, no zombie
    assert open_fds() == before  # the master (and the slave) closed


async def test_backend_log_lines_carry_the_session_id_as_a_field(
    backend: LocalBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runnerd.local")
    spec = bundle_spec("sh", "exit 3\n")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, RecordingSink())
            assert await session.result() == Exited(3)
    records = [r for r in caplog.records if r.name.startswith("runnerd.local")]
    messages = [r.getMessage() for r in records]
    assert any(m.startswith("started pid") for m in messages)
    assert any(m == "exited with code 3" for m in messages)
    for record in records:
        assert getattr(record, "session_id", None) == spec.session_id
        assert spec.session_id not in record.getMessage()


async def test_every_spawn_forks_from_one_long_lived_thread() -> None:
    # The parent-death signal follows the forking thread: it must be one
    # that lives as long as the daemon, not a worker that idles out.
    def name() -> str:
        return threading.current_thread().name

    names = {await run_in_spawner(name) for _ in range(3)}
    assert names == {"runnerd-spawner"}
    with pytest.raises(ZeroDivisionError):
        await run_in_spawner(lambda: 1 // 0)
