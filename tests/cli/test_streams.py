"""`runnerd logs [-f]` and `runnerd events [-f]`: replay, then follow."""

from __future__ import annotations

import json

from tests.cli.helpers import background_cli, cli, start, wait_status
from tests.harness import Daemon, open_ws, read_pty_until
from tests.shared_daemon import shared_runnerd_on_each_backend  # noqa: F401  (`runnerd`)


async def test_logs_prints_what_is_there_and_returns_while_the_session_runs(
    runnerd: Daemon,
) -> None:
    session_id = await start(runnerd, "echo first-line; exec sleep 30")
    await read_pty_until(runnerd.socket_path, session_id, rb"first-line")
    result = await cli(runnerd, "logs", session_id)
    assert result.returncode == 0, result.stderr
    assert b"first-line" in result.stdout
    await cli(runnerd, "stop", session_id)


async def test_logs_follow_streams_until_the_session_ends(runnerd: Daemon) -> None:
    session_id = await start(runnerd, 'echo before; read x; echo "after $x"')
    await read_pty_until(runnerd.socket_path, session_id, rb"before")
    async with background_cli(runnerd, "logs", "-f", session_id) as follower:
        await follower.wait_for(b"before")  # attached: it replayed what was there
        async with open_ws(runnerd.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            await ws.send_message(b"typed\n")
    assert follower.proc.returncode == 0
    assert b"after typed" in follower.stdout


async def test_events_replays_and_json_gives_one_object_per_line(runnerd: Daemon) -> None:
    session_id = await start(runnerd, "exit 2")
    await wait_status(runnerd, session_id, ("exited",))
    result = await cli(runnerd, "events", session_id)
    assert result.returncode == 0, result.stderr
    # Each event once, in order: the statuses, and on kubernetes the pod's
    # `progress` between starting and running.
    shown = result.stdout.decode().splitlines()
    assert [int(line.split()[0]) for line in shown] == list(range(1, len(shown) + 1))
    assert [line.split(" ", 1)[1] for line in shown if " status " in line] == [
        "status starting",
        "status running",
        "status exited 2",
    ]
    lines = (await cli(runnerd, "events", "--json", session_id)).stdout.decode().splitlines()
    assert len(lines) == len(shown)
    assert json.loads(lines[-1]) == {
        "id": len(shown),
        "event": "status",
        "data": {"type": "status", "status": {"kind": "exited", "code": 2}},
    }


async def test_events_follow_ends_with_the_session(runnerd: Daemon) -> None:
    session_id = await start(runnerd, "read x; exit 0")
    await wait_status(runnerd, session_id, ("running",))
    async with background_cli(runnerd, "events", "-f", session_id) as follower:
        await follower.wait_for(b" status running")
        async with open_ws(runnerd.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            await ws.send_message(b"go\n")
    assert follower.proc.returncode == 0
    assert follower.stdout.decode().splitlines()[-1].split(" ", 1)[1] == "status exited 0"


async def test_logs_of_an_unknown_session_fails_naming_it(runnerd: Daemon) -> None:
    result = await cli(runnerd, "logs", "nosuchsession")
    assert result.returncode == 1
    assert b"no session 'nosuchsession'" in result.stderr
