"""Ctrl-C (SIGINT) to a streaming verb whose stdin is a pipe: a clean exit.

With a raw terminal Ctrl-C is a key for the workload; without one it is a
SIGINT to `runnerd` itself, which must leave as the README says (130, the
detach line for `run` and `attach`, never a traceback) and leave the
session running.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.cli.helpers import Background, background_cli, cli, start, wait_status
from tests.harness import Daemon, read_pty_until
from tests.shared_daemon import shared_runnerd_on_each_backend  # noqa: F401  (`runnerd`)

SCRIPT = "echo up-and-running; exec sleep 60"


async def interrupt(cli_proc: Background) -> None:
    """SIGINT, as a shell's Ctrl-C sends it, then wait for the exit."""
    cli_proc.proc.send_signal(signal.SIGINT)
    await cli_proc.proc.wait()


def assert_clean_interrupt(cli_proc: Background) -> None:
    assert cli_proc.proc.returncode == 128 + signal.SIGINT, cli_proc.stderr.decode()
    assert b"Traceback" not in cli_proc.stderr
    assert b"Error" not in cli_proc.stderr, cli_proc.stderr.decode()


async def assert_still_running(runnerd: Daemon, session_id: str) -> None:
    assert (await wait_status(runnerd, session_id, ("running",)))["kind"] == "running"
    await cli(runnerd, "stop", session_id)


async def test_ctrl_c_detaches_run_with_exit_130(runnerd: Daemon, tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "main.sh").write_text(SCRIPT)
    async with background_cli(runnerd, "run", str(root)) as run:
        await run.wait_for(b"up-and-running")  # attached: its output is through
        session_id = run.stderr.decode().split(":")[1].strip()
        await interrupt(run)
    assert_clean_interrupt(run)
    assert f"detached from {session_id} (it keeps running)".encode() in run.stderr
    await assert_still_running(runnerd, session_id)


@pytest.mark.parametrize("verb", [["attach"], ["logs", "-f"], ["events", "-f"]])
async def test_ctrl_c_leaves_a_following_verb_with_exit_130(
    runnerd: Daemon, verb: list[str]
) -> None:
    session_id = await start(runnerd, SCRIPT)
    await read_pty_until(runnerd.socket_path, session_id, rb"up-and-running")
    async with background_cli(runnerd, *verb, session_id) as follower:
        # Following: the output replayed (the events' `running`, for events).
        await follower.wait_for(b"status running" if verb[0] == "events" else b"up-and-running")
        await interrupt(follower)
    assert_clean_interrupt(follower)
    if verb == ["attach"]:
        assert f"detached from {session_id} (it keeps running)".encode() in follower.stderr
    await assert_still_running(runnerd, session_id)
