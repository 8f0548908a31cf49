"""`runnerd run` without a terminal, and the exit codes `run` and `attach` share."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli.helpers import background_cli, cli, start, wait_status
from tests.harness import Daemon, start_daemon
from tests.shared_daemon import (  # noqa: F401  (`runnerd`)
    OnBackend,
    shared_runnerd_on_each_backend,
)

BROKEN = {"local": {"runtimes": {"broken": {"command": ["/nonexistent/tool", "{entry}"]}}}}


def project(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "project"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


async def test_run_prints_the_output_and_exits_with_the_code(runnerd: Daemon, tmp_path) -> None:
    root = project(tmp_path, {"main.sh": 'echo "hello $WHO"; exit 7'})
    result = await cli(runnerd, "run", str(root), "--env", "WHO=world")
    assert result.returncode == 7, result.stderr
    assert b"hello world" in result.stdout
    # Plain progress lines on stderr when it is not a terminal.
    assert b": running" in result.stderr


async def test_run_pipes_stdin_to_the_workload(runnerd: Daemon, tmp_path) -> None:
    root = project(tmp_path, {"main.sh": 'read line; echo "got <$line>"'})
    result = await cli(runnerd, "run", str(root), stdin=b"piped text\n")
    assert result.returncode == 0, result.stderr
    assert b"got <piped text>" in result.stdout


async def test_run_sends_what_a_user_means_and_skips_the_rest(runnerd: Daemon, tmp_path) -> None:
    root = project(
        tmp_path,
        {
            "main.sh": 'cd "$(dirname "$0")" && find . -type f | sort',
            "lib/util.sh": "",
            "lib/keep.log": "",
            "build/out.txt": "",
            "debug.log": "",
            "node_modules/dep/index.js": "",
            ".git/HEAD": "",
            ".gitignore": "*.log\n!keep.log\n/build/\n",
        },
    )
    (root / "image.bin").write_bytes(b"\xff\xfe\x00binary")
    result = await cli(runnerd, "run", str(root))
    assert result.returncode == 0, result.stderr
    listed = result.stdout.decode().split()
    assert listed == ["./.gitignore", "./lib/keep.log", "./lib/util.sh", "./main.sh"]
    assert b"left out image.bin: not UTF-8 text" in result.stderr


async def test_run_refuses_a_bundle_over_the_body_limit_before_sending(
    tmp_path, on_backend: OnBackend
) -> None:
    async with start_daemon(
        tmp_path, on_backend.overrides({"server": {"max_body_bytes": 4096}})
    ) as daemon:
        root = project(tmp_path, {"main.sh": "echo hi", "big.txt": "x" * 5000})
        result = await cli(daemon, "run", str(root))
        assert result.returncode == 1
        assert b"over the daemon's limit of 4096" in result.stderr
        async with daemon.client() as client:
            assert (await client.get("/v1/sessions")).json()["sessions"] == []


# Local backend only (these two): the failure is a local runtime's missing
# executable, named in the message; the exit code's rule is the CLI's.
async def test_run_of_a_session_that_fails_to_start_exits_125(tmp_path) -> None:
    async with start_daemon(tmp_path, BROKEN) as daemon:
        root = project(tmp_path, {"main.sh": "echo never"})
        result = await cli(daemon, "run", str(root), "--image", "broken")
    assert result.returncode == 125
    assert b"failed: " in result.stderr and b"/nonexistent/tool" in result.stderr


async def test_attach_to_a_failed_session_exits_125_with_the_message(tmp_path) -> None:
    async with start_daemon(tmp_path, BROKEN) as daemon:
        session_id = await start(daemon, "echo never", image="broken")
        await wait_status(daemon, session_id, ("failed",))
        result = await cli(daemon, "attach", session_id)
    assert result.returncode == 125
    assert b"failed: " in result.stderr and b"/nonexistent/tool" in result.stderr


async def test_a_stopped_session_exits_130_for_run_and_attach(runnerd: Daemon, tmp_path) -> None:
    root = project(tmp_path, {"main.sh": "echo up; exec sleep 30"})
    async with background_cli(runnerd, "run", str(root)) as run:
        await run.wait_for(b": running")  # plain progress: "runnerd: ID: running"
        session_id = run.stderr.decode().split(":")[1].strip()
        await cli(runnerd, "stop", session_id)
    assert run.proc.returncode == 130
    result = await cli(runnerd, "attach", session_id)
    assert result.returncode == 130
    assert b"stopped" in result.stderr


async def test_run_detach_prints_the_id_and_leaves_it_running(runnerd: Daemon, tmp_path) -> None:
    root = project(tmp_path, {"main.sh": "exec sleep 30"})
    result = await cli(runnerd, "run", "-d", str(root))
    assert result.returncode == 0, result.stderr
    session_id = result.stdout.decode().strip()
    assert (await wait_status(runnerd, session_id, ("running",)))["kind"] == "running"
    await cli(runnerd, "stop", session_id)


async def test_run_asks_for_terms_and_takes_accept_terms(tmp_path, on_backend: OnBackend) -> None:
    terms = {"terms": {"body": "Be nice.", "version": "v2", "title": "House rules"}}
    async with start_daemon(tmp_path, on_backend.overrides(terms)) as daemon:
        root = project(tmp_path, {"main.sh": "echo accepted"})
        refused = await cli(daemon, "run", str(root))
        assert refused.returncode == 1
        assert b"House rules" in refused.stderr and b"Be nice." in refused.stderr
        assert b"--accept-terms v2" in refused.stderr
        accepted = await cli(daemon, "run", str(root), "--accept-terms", "v2")
        assert accepted.returncode == 0, accepted.stderr
        assert b"accepted" in accepted.stdout


async def test_run_app_apps_and_probe(tmp_path, on_backend: OnBackend) -> None:
    catalog = {
        "local": {"runtimes": {"greeter": {"command": ["/bin/sh", "-c", "echo hi from app"]}}},
        "apps": {"greet": {"image": "greeter", "title": "Greeter", "description": "Says hi"}},
    }
    async with start_daemon(tmp_path, on_backend.overrides(catalog)) as daemon:
        apps = await cli(daemon, "apps")
        assert apps.stdout.decode().splitlines()[1].split() == ["greet", "Greeter", "Says", "hi"]
        ran = await cli(daemon, "run", "--app", "greet")
        assert ran.returncode == 0 and b"hi from app" in ran.stdout
        ready = await cli(daemon, "probe")
        assert (ready.returncode, ready.stdout) == (0, b"sh: ready\n")
        refused = await cli(daemon, "probe", "--image", "greeter")
        assert refused.returncode == 1 and b"greeter: unavailable" in refused.stdout


async def test_url_reaches_a_tcp_listener_for_plain_requests_and_the_terminal(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    async with start_daemon(
        tmp_path, on_backend.overrides({"server": {"listen": ["tcp:127.0.0.1:0"]}})
    ) as daemon:
        await daemon.wait_for_stderr("serving")
        # The API listener's (on kubernetes the bundle listener's is tcp: too).
        match = re.search(r"serving listen=\"?tcp:127\.0\.0\.1:(\d+)", daemon.stderr_text())
        assert match is not None
        url = f"http://127.0.0.1:{match.group(1)}"
        root = project(tmp_path, {"main.sh": "echo over tcp; exit 4"})
        ran = await cli(daemon, "run", str(root), "--url", url)
        assert ran.returncode == 4, ran.stderr
        assert b"over tcp" in ran.stdout
        listed = await cli(daemon, "ls", "-aq", "--url", url)
        assert len(listed.stdout.split()) == 1
