"""First use: a bad argument exits 2, an unknown session is named the same by every verb."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import cli
from tests.cli.term import Terminal
from tests.harness import Daemon
from tests.shared_daemon import shared_runnerd_on_each_backend  # noqa: F401  (`runnerd`)

NO_SESSION = b"runnerd: no session 'nosuchsession' (see `runnerd ls -a`)"


def bad_arguments(tmp_path: Path) -> list[tuple[list[str], bytes]]:
    """(argv, what the message must name): argparse's refusals, then ours."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "main.sh").write_text("echo never")
    return [
        (["run", "--no-such-option", str(project)], b"--no-such-option"),
        (["attach"], b"SESSION"),
        (["run", str(project), "--port", "0"], b"--port must be N or N/udp"),
        (["run", str(project), "--env", "NOVALUE"], b"--env: expected K=V, got 'NOVALUE'"),
        (["run", str(project), "--env-file", str(tmp_path / "absent.env")], b"--env-file"),
        (["run", str(tmp_path / "absent")], b"absent: no such file or directory"),
        (["run", str(project), "--entry", "other.sh"], b"--entry 'other.sh'"),
        (["ls", "--url", "ftp://127.0.0.1:1"], b"--url must be http://HOST:PORT"),
    ]


async def test_a_bad_argument_exits_2_naming_it_and_starts_nothing(
    runnerd: Daemon, tmp_path: Path
) -> None:
    async with runnerd.client() as client:
        before = (await client.get("/v1/sessions")).json()["sessions"]
    for argv, named in bad_arguments(tmp_path):
        result = await cli(runnerd, *argv)
        assert result.returncode == 2, (argv, result.stderr)
        assert named in result.stderr, (argv, result.stderr)
        assert b"Traceback" not in result.stderr
    async with runnerd.client() as client:
        assert (await client.get("/v1/sessions")).json()["sessions"] == before


@pytest.mark.parametrize("verb", ["attach", "logs", "events", "stop"])
async def test_every_verb_names_an_unknown_session_the_same_way(runnerd: Daemon, verb: str) -> None:
    result = await cli(runnerd, verb, "nosuchsession")
    assert result.returncode == 1
    assert result.stderr.strip() == NO_SESSION


async def test_attach_in_a_terminal_names_an_unknown_session(runnerd: Daemon) -> None:
    term = Terminal.spawn(runnerd, ["runnerd", "attach", "nosuchsession"])
    try:
        screen = await term.expect(r"see `runnerd ls -a`\)")
        assert b"no session 'nosuchsession'" in screen
        assert b"4404" not in screen
        assert await term.exit_code() == 1
    finally:
        term.close()
