"""`runnerd watch`, `runnerd reload` and `ls` against a real daemon with watch
sessions on (local backend: the kubernetes one has no watch sessions yet)."""

from __future__ import annotations

import hashlib
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.cli.helpers import Background, background_cli, cli, start, wait_status
from tests.cli.term import Terminal
from tests.harness import Daemon, start_daemon

WATCH = {"watch": {"enabled": True}}
NO_COLOR = {"NO_COLOR": "1"}


def project(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "project"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def serving(version: str) -> str:
    return f'echo "serving {version}"; exec sleep 1000'


def session_id_of(text: bytes) -> str:
    match = re.search(rb"watching ([a-z2-7]{12})", text)
    assert match, text
    return match.group(1).decode()


async def get(daemon: Daemon, path: str) -> Any:
    async with daemon.client() as client:
        response = await client.get(path)
    assert response.status_code == 200, response.text
    return response.json()


async def is_suspended(daemon: Daemon, session_id: str) -> bool:
    entry = await get(daemon, f"/v1/sessions/{session_id}")
    return bool(entry["status"]["kind"] == "suspended")


async def interrupt(watch: Background) -> int:
    """Ctrl-C to a `runnerd watch` without a terminal; its exit code."""
    watch.proc.send_signal(signal.SIGINT)
    with trio.fail_after(20):
        return await watch.proc.wait()


async def test_watch_an_edit_on_disk_restarts_the_app_with_its_new_output(tmp_path) -> None:
    async with start_daemon(tmp_path, WATCH) as daemon:
        root = project(tmp_path, {"main.sh": serving("v1")})
        term = Terminal.spawn(daemon, ["runnerd", "watch", str(root)], env=NO_COLOR)
        try:
            seen = await term.expect(r"app \| serving v1")
            (root / "main.sh").write_text(serving("v2"))
            seen += await term.expect(r"synced: wrote main\.sh")
            seen += await term.expect(r"app \| serving v2")
            term.send("\x03")  # Ctrl-C: the terminal's, in its normal mode
            seen += await term.expect(r"stopped")
            assert await term.exit_code() == 0
        finally:
            term.close()
        text = seen.decode()
        assert "app #1 (initial) started" in text
        assert "app #2 (watch) started" in text
        assert re.search(r"app #1 \(initial\) exited 143 \(SIGTERM\) in", text), text
        (entry,) = (await get(daemon, "/v1/sessions"))["sessions"]
        assert entry["status"] == {"kind": "stopped"}


async def test_watch_names_each_app_in_colour_on_a_terminal(tmp_path) -> None:
    async with start_daemon(tmp_path, WATCH) as daemon:
        root = project(tmp_path, {"a.sh": serving("a"), "b.sh": serving("b")})
        argv = ["runnerd", "watch", str(root), "--app", "a=a.sh", "--app", "b=b.sh"]
        term = Terminal.spawn(daemon, argv)
        try:
            seen = b""
            for _ in range(2):  # the two apps' first lines, in either order
                seen += await term.expect(r"serving [ab]") + term.child.after
            assert b"\x1b[36ma\x1b[0m | serving a" in seen, seen
            assert b"\x1b[33mb\x1b[0m | serving b" in seen, seen
            term.send("\x03")
            assert await term.exit_code() == 0
        finally:
            term.close()


async def test_watch_a_line_typed_on_the_terminal_reaches_the_app(tmp_path) -> None:
    async with start_daemon(tmp_path, WATCH) as daemon:
        root = project(
            tmp_path, {"main.sh": 'echo ready; read -r line; echo "got <$line>"; exec sleep 1000'}
        )
        term = Terminal.spawn(daemon, ["runnerd", "watch", str(root)], env=NO_COLOR)
        try:
            await term.expect(r"app \| ready")
            term.send("typed here\r")  # the terminal's normal mode: a line at Enter
            await term.expect(r"app \| got <typed here>")
            term.send("\x03")
            assert await term.exit_code() == 0
        finally:
            term.close()


async def test_watch_a_second_ctrl_c_leaves_while_it_stops(tmp_path) -> None:
    # An app that ignores SIGTERM: the stop waits out the grace period.
    async with start_daemon(tmp_path, {**WATCH, "local": {"stop_grace_seconds": 5}}) as daemon:
        root = project(tmp_path, {"main.sh": 'trap "" TERM; echo stubborn; exec sleep 1000'})
        async with background_cli(daemon, "watch", str(root)) as watch:
            await watch.wait_for(b"app | stubborn")
            session_id = session_id_of(watch.stderr)
            watch.proc.send_signal(signal.SIGINT)
            await watch.wait_for(b"Ctrl-C again leaves at once")
            assert await interrupt(watch) == 130
        assert f"left {session_id} while it stops".encode() in watch.stderr
        await wait_status(daemon, session_id, ("stopped",))


async def test_watch_exits_1_when_the_daemon_is_lost(tmp_path) -> None:
    async with start_daemon(tmp_path, WATCH) as daemon:
        root = project(tmp_path, {"main.sh": serving("v1")})
        async with background_cli(daemon, "watch", str(root)) as watch:
            await watch.wait_for(b"app | serving v1")
            await daemon.stop(signal.SIGKILL)
            with trio.fail_after(20):
                assert await watch.proc.wait() == 1
        # Whichever of its channels noticed first says so; never a traceback.
        said = watch.stderr.decode()
        assert "Traceback" not in said, said
        assert "lost the event stream" in said or "cannot reach runnerd" in said, said


async def test_watch_syncs_deletes_and_binary_files_but_not_gitignored_ones(tmp_path) -> None:
    async with start_daemon(tmp_path, WATCH) as daemon:
        root = project(
            tmp_path, {"main.sh": serving("v1"), "old.txt": "old", ".gitignore": "*.log\n"}
        )
        (root / "logo.png").write_bytes(b"\x89PNG\xff\x00")
        async with background_cli(daemon, "watch", str(root)) as watch:
            await watch.wait_for(b"synced: wrote logo.png")  # after the bundle: base64
            session_id = session_id_of(watch.stderr)
            (root / "notes.log").write_text("not for the workspace")
            (root / "old.txt").unlink()
            (root / "new.txt").write_text("new")
            await watch.wait_for(b"deleted old.txt")
            await watch.wait_for(b"new.txt")
            listing = await get(daemon, f"/v1/sessions/{session_id}/workspace")
            assert [f["path"] for f in listing["files"]] == [
                ".gitignore", "logo.png", "main.sh", "new.txt"
            ]  # fmt: skip
            assert await interrupt(watch) == 0
        assert b"notes.log" not in watch.stderr
        assert b"app | serving v1" in watch.stdout


async def test_watch_two_streams_apps_reload_and_ls(tmp_path) -> None:
    async with start_daemon(tmp_path, WATCH) as daemon:
        root = project(
            tmp_path,
            {"web.sh": 'echo "web up"; echo "web err" >&2; exec sleep 1000', "job.sh": "echo ran"},
        )
        args = ("watch", str(root), "--app", "web=web.sh:8080", "--app", "job=job.sh")
        async with background_cli(daemon, *args, "--streams") as watch:
            await watch.wait_for(b"web | web up")
            await watch.wait_for(b"web ! web err")  # stderr, apart and marked
            await watch.wait_for(b"job #1 (initial) exited 0 in")
            session_id = session_id_of(watch.stderr)
            listed = await cli(daemon, "ls")
            row = next(line for line in listed.stdout.decode().splitlines() if session_id in line)
            assert row.split()[3] == "watch" and "web#1,job#1" in row, row
            reloaded = await cli(daemon, "reload", session_id, "--app", "job")
            assert reloaded.returncode == 0, reloaded.stderr
            assert reloaded.stdout == b"reloaded job\n"
            await watch.wait_for(b"job #2 (manual) started")
            events = (await cli(daemon, "events", session_id)).stdout.decode()
            assert re.search(r"^\d+ run job #1 \(initial\) started$", events, re.M), events
            assert re.search(r"^\d+ run job #1 exited 0 in \d", events, re.M), events
            unknown = await cli(daemon, "reload", session_id, "--app", "nope")
            assert unknown.returncode == 1
            assert b"404 unknown_app" in unknown.stderr
            assert await interrupt(watch) == 0
        assert b"web err" not in watch.stdout


async def test_watch_stdin_goes_to_the_chosen_app(tmp_path) -> None:
    async with start_daemon(tmp_path, WATCH) as daemon:
        root = project(
            tmp_path,
            {"a.sh": "exec sleep 1000", "b.sh": 'read -r line; echo "b got <$line>"; sleep 1000'},
        )
        args = ("watch", str(root), "--app", "a=a.sh", "--app", "b=b.sh", "--stdin", "b")
        async with background_cli(daemon, *args) as watch:
            assert watch.proc.stdin is not None
            await watch.proc.stdin.send_all(b"hello\n")
            await watch.wait_for(b"b | b got <hello>")
            assert await interrupt(watch) == 0


async def test_watch_follows_an_app_added_by_put_apps(tmp_path) -> None:
    async with start_daemon(tmp_path, WATCH) as daemon:
        root = project(tmp_path, {"main.sh": serving("v1"), "extra.sh": 'echo "extra here"'})
        async with background_cli(daemon, "watch", str(root)) as watch:
            await watch.wait_for(b"app | serving v1")
            session_id = session_id_of(watch.stderr)
            apps = [{"name": "app", "entryRelativePath": "main.sh"},
                    {"name": "extra", "entryRelativePath": "extra.sh"}]  # fmt: skip
            async with daemon.client() as client:
                response = await client.put(f"/v1/sessions/{session_id}/apps", json={"apps": apps})
            assert response.status_code == 202, response.text
            await watch.wait_for(b"extra | extra here")  # its own /io, adopted
            await watch.wait_for(b"#2 (resume) started")  # app: the new set restarts it
            assert await interrupt(watch) == 0


async def test_watch_keep_leaves_it_running_and_attach_comes_back(tmp_path) -> None:
    async with start_daemon(tmp_path, WATCH) as daemon:
        root = project(tmp_path, {"main.sh": serving("v1")})
        async with background_cli(daemon, "watch", str(root), "--keep") as watch:
            await watch.wait_for(b"app | serving v1")
            session_id = session_id_of(watch.stderr)
            assert await interrupt(watch) == 0
        assert f"runnerd watch --attach {session_id} {root}".encode() in watch.stderr
        entry = await get(daemon, f"/v1/sessions/{session_id}")
        assert entry["status"]["kind"] == "running"
        (root / "main.sh").write_text(serving("v2"))  # edited while nobody watched
        async with background_cli(daemon, "watch", "--attach", session_id, str(root)) as again:
            await again.wait_for(b"app | serving v1")  # replayed from the start
            await again.wait_for(b"synced: wrote main.sh")
            await again.wait_for(b"app | serving v2")
            assert await interrupt(again) == 0
        entry = await get(daemon, f"/v1/sessions/{session_id}")
        assert entry["status"] == {"kind": "stopped"}


async def test_watch_attach_resumes_a_suspended_session_and_syncs_what_changed(
    tmp_path,
) -> None:
    async with start_daemon(tmp_path, {"watch": {"enabled": True, "idle_seconds": 1}}) as daemon:
        root = project(tmp_path, {"main.sh": serving("v1")})
        async with background_cli(daemon, "watch", str(root), "--keep") as watch:
            await watch.wait_for(b"app | serving v1")
            session_id = session_id_of(watch.stderr)
            assert await interrupt(watch) == 0
        # Nobody watches it now: it suspends. (Polled with plain GETs: an
        # event stream would be a subscriber and keep it running.)
        with trio.fail_after(20):
            while not await is_suspended(daemon, session_id):  # noqa: ASYNC110 (see above)
                await trio.sleep(0.05)
        listed = await cli(daemon, "ls")
        assert f"{session_id}  suspended" in listed.stdout.decode()
        (root / "main.sh").write_text(serving("v2"))
        async with background_cli(daemon, "watch", "--attach", session_id, str(root)) as again:
            await again.wait_for(f"resuming {session_id}".encode())
            await again.wait_for(b"app #2 (resume) started")
            await again.wait_for(b"synced: wrote main.sh")
            await again.wait_for(b"app | serving v2")
            assert await interrupt(again) == 0


async def test_watch_logs_shows_every_app_and_attach_points_to_watch(tmp_path) -> None:
    async with start_daemon(tmp_path, WATCH) as daemon:
        root = project(tmp_path, {"a.sh": "echo one; echo two", "b.sh": "echo three"})
        args = ("watch", str(root), "--app", "a=a.sh", "--app", "b=b.sh", "--keep")
        async with background_cli(daemon, *args) as watch:
            await watch.wait_for(b"a #1 (initial) exited 0")
            await watch.wait_for(b"b #1 (initial) exited 0")
            await watch.wait_for(b"b | three")
            session_id = session_id_of(watch.stderr)
            assert await interrupt(watch) == 0
        logs = await cli(daemon, "logs", session_id)
        assert logs.returncode == 0, logs.stderr
        assert logs.stdout.replace(b"\r", b"") == b"a | one\na | two\nb | three\n"
        follow = await cli(daemon, "logs", "-f", session_id)
        assert follow.returncode == 2
        assert f"`runnerd watch --attach {session_id}` follows".encode() in follow.stderr
        attach = await cli(daemon, "attach", session_id)
        assert attach.returncode == 1
        assert f"`runnerd watch --attach {session_id}` shows".encode() in attach.stderr
        await cli(daemon, "stop", session_id)


@pytest.mark.slow  # waits out the budget's 60 s window
async def test_watch_rate_limited_edits_wait_the_window_and_none_is_lost(tmp_path) -> None:
    config = {"watch": {"enabled": True, "reload_limit": 1}}
    async with start_daemon(tmp_path, config) as daemon:
        root = project(tmp_path, {"main.sh": serving("v1"), "a.txt": "a1"})
        async with background_cli(daemon, "watch", str(root)) as watch:
            await watch.wait_for(b"app | serving v1")
            session_id = session_id_of(watch.stderr)
            (root / "a.txt").write_text("a2")  # spends the budget of 1
            await watch.wait_for(b"synced: wrote a.txt")
            (root / "main.sh").write_text(serving("v2"))  # refused 429
            await watch.wait_for(b"rate limited (watch.reload_limit): syncing again in")
            (root / "a.txt").write_text("a3")  # meanwhile: joins the pending changes
            (root / "b.txt").write_text("b")
            await watch.wait_for(b"synced: wrote a.txt, b.txt, main.sh", timeout_s=90)
            await watch.wait_for(b"app | serving v2")
            listing = await get(daemon, f"/v1/sessions/{session_id}/workspace")
            hashes = {f["path"]: f["hash"] for f in listing["files"]}
            assert hashes["a.txt"] == hashlib.sha256(b"a3").hexdigest()
            assert sorted(hashes) == ["a.txt", "b.txt", "main.sh"]
            assert await interrupt(watch) == 0


async def test_watch_refusals_say_what_was_wrong_and_change_nothing(tmp_path) -> None:
    async with start_daemon(tmp_path, WATCH) as daemon:
        root = project(tmp_path, {"main.sh": serving("v1")})
        bad_stdin = await cli(daemon, "watch", str(root), "--stdin", "nope")
        assert bad_stdin.returncode == 2
        assert b"--stdin 'nope' is not an app of the session (app)" in bad_stdin.stderr
        bad_name = await cli(daemon, "watch", str(root), "--app", "Web=main.sh")
        assert bad_name.returncode == 1
        assert b"400 invalid_app_name" in bad_name.stderr
        not_dir = await cli(daemon, "watch", str(root / "main.sh"))
        assert not_dir.returncode == 2 and b"needs a directory" in not_dir.stderr
        run_session = await start(daemon, "exec sleep 30")
        reload = await cli(daemon, "reload", run_session)
        assert reload.returncode == 1 and b"409 not_a_watch_session" in reload.stderr
        attach = await cli(daemon, "watch", "--attach", run_session)
        assert attach.returncode == 1 and b"is not a watch session" in attach.stderr
        no_agent = await cli(daemon, "watch", str(root), "--agent", "nope")
        assert no_agent.returncode == 1 and b"400 unknown_agent" in no_agent.stderr
        missing = await cli(daemon, "reload", "nosuchsession")
        assert missing.returncode == 1 and b"no session 'nosuchsession'" in missing.stderr
        sessions = (await get(daemon, "/v1/sessions"))["sessions"]
        assert [s["sessionId"] for s in sessions] == [run_session]
        await cli(daemon, "stop", run_session)


async def test_watch_on_a_runner_without_watch_sessions_is_refused(tmp_path) -> None:
    async with start_daemon(tmp_path) as daemon:
        root = project(tmp_path, {"main.sh": serving("v1")})
        result = await cli(daemon, "watch", str(root))
        assert result.returncode == 1
        assert b"400 watch_disabled" in result.stderr
