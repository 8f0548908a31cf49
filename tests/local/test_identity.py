"""Session uids and what they can reach: the allocator hands each live
session its own uid and reuses only freed ones; the start-up checks name
the directory that keeps a session uid out, and a runtime it cannot run."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runnerd.backend import ImageSpec
from runnerd.local import LocalBackend
from runnerd.local.identity import SessionIdentity, SessionUids, blocking_directory
from runnerd.local.initpython import unreachable_program, unreachable_workdir
from runnerd.local.settings import LocalConfig, RuntimeConfig

from .conftest import runtimes


def test_session_uids_are_distinct_while_held_and_reused_once_freed() -> None:
    uids = SessionUids(5000, 3)
    held = [uids.acquire() for _ in range(3)]
    assert held == [SessionIdentity(u, u) for u in (5000, 5001, 5002)]
    assert uids.acquire() is None  # all in use: the start fails, naming the key
    middle = held[1]
    assert middle is not None
    uids.release(middle)
    assert uids.acquire() == middle


@given(st.lists(st.integers(min_value=-1, max_value=5), max_size=60))
def test_session_uids_hand_out_the_lowest_free_uid_whatever_was_freed(ops: list[int]) -> None:
    # -1 acquires; k releases the k-th uid of the range (held or not).
    uids, held = SessionUids(7000, 6), set[int]()
    for op in ops:
        if op < 0:
            free = [u for u in range(7000, 7006) if u not in held]
            got = uids.acquire()
            assert got == (SessionIdentity(free[0], free[0]) if free else None)
            if got is not None:
                held.add(got.uid)
        else:
            uids.release(SessionIdentity(7000 + op, 7000 + op))
            held.discard(7000 + op)


def test_the_first_directory_closed_to_others_is_named(tmp_path: Path) -> None:
    closed = tmp_path / "home"
    (closed / "venv").mkdir(parents=True)
    closed.chmod(0o700)
    target = str(closed / "venv" / "python")
    # pytest's own base (/tmp/pytest-of-<user>) is 0700 too: it comes first.
    first = next(
        str(parent)
        for parent in reversed(Path(target).parents)
        if not os.stat(parent).st_mode & 0o001
    )
    assert blocking_directory(target) == first
    # Under /tmp a session has its own copy of every directory on the way.
    assert blocking_directory(target, ("/tmp",)) is None
    assert unreachable_workdir(str(closed / "venv")) is None
    assert blocking_directory("/usr/bin/python3") is None


def test_a_runtime_in_the_hosts_tmp_is_out_of_a_sessions_sight(tmp_path: Path) -> None:
    program = str(tmp_path / "python3")
    problem = unreachable_program(program)
    assert problem == f"{program} is in the host's tmp, which sessions do not see"
    assert unreachable_program("/bin/sh") is None


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root daemon's sessions change uid")
def test_a_root_daemon_warns_for_each_runtime_its_sessions_cannot_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    program = tmp_path / "python3"
    program.symlink_to("/usr/bin/python3")
    local_runtimes = {
        **runtimes(),
        "hidden": RuntimeConfig(name="hidden", command=(str(program), "{entry}")),
    }
    caplog.set_level(logging.WARNING, logger="runnerd.local")
    LocalBackend(LocalConfig(workdir=tmp_path / "w", runtimes=local_runtimes))
    warnings = [r.getMessage() for r in caplog.records if "runtimes.hidden" in r.getMessage()]
    assert warnings == [
        f"local.runtimes.hidden.command: {program} is in the host's tmp, which sessions do"
        " not see; every session on runtime 'hidden' will fail to start"
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root daemon's sessions change uid")
async def test_a_root_daemon_probes_a_runtime_its_sessions_cannot_run_as_unavailable(
    tmp_path: Path,
) -> None:
    # The start-up warning above is one line in the log; a client asking
    # /v1/probe must hear it too, not "ready" then a failed start.
    program = tmp_path / "python3"
    program.symlink_to("/usr/bin/python3")
    local_runtimes = {
        **runtimes(),
        "hidden": RuntimeConfig(name="hidden", command=(str(program), "{entry}")),
    }
    backend = LocalBackend(LocalConfig(workdir=tmp_path / "w", runtimes=local_runtimes))
    report = await backend.probe(ImageSpec("hidden", "missing"))
    assert report == {
        "status": "unavailable",
        "message": "local runtime 'hidden': its executable cannot be run by the sessions' uids",
        "remediation": "give local.runtimes.hidden.command an absolute path every user can"
        " reach (the runner's log names the directory in the way)",
    }
    assert await backend.probe(ImageSpec("sh", "missing")) == {"status": "ready"}
