"""The CLI in a real pseudo-terminal: raw mode, resizes, Ctrl-C, Ctrl-], restore."""

from __future__ import annotations

import re
import shlex
import signal
import termios
from pathlib import Path

import pexpect
import pytest
import trio

from tests.cli.helpers import RUNNERD, start, wait_status
from tests.cli.term import Terminal
from tests.harness import Daemon, start_daemon
from tests.shared_daemon import (  # noqa: F401  (`runnerd`)
    OnBackend,
    shared_runnerd_on_each_backend,
)

# A workload that shows what its terminal does: its size on each SIGWINCH
# (and when asked), "interrupted" on Ctrl-C (SIGINT), and each line typed.
WATCHER = """\
import os, signal, sys
def show_size(*_):
    cols, rows = os.get_terminal_size(0)
    print(f"size {cols}x{rows}", flush=True)
signal.signal(signal.SIGWINCH, show_size)
signal.signal(signal.SIGINT, lambda *_: print("interrupted", flush=True))
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "quit":
        break
    if line.strip() == "size":
        show_size()
        continue
    print(f"typed <{line.strip()}>", flush=True)
sys.exit(5)
"""


def project(tmp_path: Path, name: str, text: str) -> Path:
    root = tmp_path / "project"
    root.mkdir(exist_ok=True)
    (root / name).write_text(text)
    return root


async def test_run_in_a_terminal_shows_output_and_exits_with_the_code(
    runnerd: Daemon, tmp_path: Path
) -> None:
    root = project(tmp_path, "main.sh", "echo hello from the terminal; exit 3")
    term = Terminal.spawn(runnerd, ["runnerd", "run", str(root)])
    try:
        # stderr is a terminal: the live status line (spinner, id, phase), erased in place.
        await term.expect(r"\x1b\[2K\S+ [a-z2-7]{12} starting")
        await term.expect("hello from the terminal")
        assert await term.exit_code() == 3
    finally:
        term.close()


async def test_a_session_that_ends_at_once_still_shows_its_output(
    runnerd: Daemon, tmp_path: Path
) -> None:
    # The server sends the output and closes before our first resize reaches
    # it; that send must not cost the output (it did, about every other run).
    root = project(tmp_path, "main.sh", "echo quick-output")
    for _ in range(5):
        term = Terminal.spawn(runnerd, ["runnerd", "run", str(root)])
        try:
            await term.expect("quick-output")
            assert await term.exit_code() == 0
        finally:
            term.close()


async def test_the_workload_has_the_terminals_size_from_its_first_byte(
    runnerd: Daemon, tmp_path: Path, on_backend: OnBackend
) -> None:
    if on_backend.name == "kubernetes":
        # A pod's container starts whether or not the attach carrying the size
        # is up (the test cluster starts it at once): it may see 0x0 first.
        pytest.skip("the first size is the local backend's promise (README: Kubernetes)")
    # `runnerd run` gives its size on the POST: on the local backend the
    # spawn then needs no wait (this daemon's is 0), and nothing resizes later.
    root = project(tmp_path, "main.sh", "stty size; echo size-shown")
    term = Terminal.spawn(runnerd, ["runnerd", "run", str(root)], rows=43, cols=132)
    try:
        screen = await term.expect("size-shown")
        assert await term.exit_code() == 0
    finally:
        term.close()
    output = screen.split(b"running", 1)[-1]  # after the status line: the workload's
    assert re.findall(rb"(\d+ \d+)\r\n", output) == [b"43 132"], screen


async def test_keys_ctrl_c_and_resizes_reach_the_workload(runnerd: Daemon, tmp_path: Path) -> None:
    root = project(tmp_path, "main.py", WATCHER)
    term = Terminal.spawn(
        runnerd, ["runnerd", "run", str(root), "--image", "python"], rows=30, cols=100
    )
    try:
        await term.expect("ready")
        term.send("size\r")
        await term.expect("size 100x30")  # our size, sent when we attached
        term.resize(40, 120)
        await term.expect("size 120x40")
        term.send("hello\r")  # Enter in raw mode is CR; the workload's PTY makes it a line
        await term.expect("typed <hello>")
        term.send("\x03")  # Ctrl-C: the workload's, not ours
        await term.expect("interrupted")
        term.send("quit\r")
        assert await term.exit_code() == 5
    finally:
        term.close()


async def test_ctrl_bracket_detaches_and_attach_resumes(runnerd: Daemon, tmp_path: Path) -> None:
    root = project(tmp_path, "main.py", WATCHER)
    term = Terminal.spawn(runnerd, ["runnerd", "run", str(root), "--image", "python"])
    try:
        await term.expect("ready")
        term.send("before\r")
        await term.expect("typed <before>")
        term.send("\x1d")  # Ctrl-]
        await term.expect(r"detached from (\w+) \(it keeps running\)")
        session_id = term.child.match.group(1).decode()
        assert await term.exit_code() == 0
    finally:
        term.close()
    assert (await wait_status(runnerd, session_id, ("running",)))["kind"] == "running"
    again = Terminal.spawn(runnerd, ["runnerd", "attach", session_id])
    try:
        await again.expect("typed <before>")  # replayed
        again.send("after\r")
        await again.expect("typed <after>")
        again.send("quit\r")
        assert await again.exit_code() == 5
    finally:
        again.close()


async def test_the_terminal_mode_is_restored_when_the_daemon_is_killed(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    async with start_daemon(tmp_path, on_backend.overrides()) as daemon:
        session_id = await start(daemon, "echo attached-now; exec sleep 20")
        await wait_status(daemon, session_id, ("running",))
        # `stty -g` before and after, printed by the shell that ran us.
        attach = shlex.join([*RUNNERD, "attach", session_id])
        script = f"stty -g; {attach}; echo rc=$?; stty -g"
        term = Terminal.spawn(daemon, ["/bin/sh", "-c", script])
        try:
            before = (await term.expect("attached-now")).decode().split()[0]
            assert not cooked(term)  # attached: raw
            await daemon.stop(signal.SIGKILL)
            await term.expect(r"rc=(\d+)")
            assert term.child.match.group(1) == b"1"
            await term.expect(r"\S+")
            after = term.child.match.group(0).decode()
            assert after == before
        finally:
            term.close()


async def test_run_shows_the_terms_and_asks_on_the_terminal(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    terms = {"terms": {"body": "Be nice.", "version": "v7", "title": "House rules"}}
    async with start_daemon(tmp_path, on_backend.overrides(terms)) as daemon:
        root = project(tmp_path, "main.sh", "echo terms were accepted")
        term = Terminal.spawn(daemon, ["runnerd", "run", str(root)])
        try:
            await term.expect(r"House rules \(version v7\)")
            await term.expect("Be nice.")
            await term.expect(r"Accept these terms\? \[y/N\]")
            term.send("y\r")
            await term.expect("terms were accepted")
            assert await term.exit_code() == 0
        finally:
            term.close()


async def test_sigterm_to_the_cli_restores_the_terminal_and_leaves_the_session(
    runnerd: Daemon,
) -> None:
    session_id = await start(runnerd, "echo attached-now; exec sleep 30")
    await wait_status(runnerd, session_id, ("running",))
    term = Terminal.spawn(runnerd, ["runnerd", "attach", session_id])
    try:
        await term.expect("attached-now")
        assert not cooked(term)  # raw while attached
        term.child.kill(signal.SIGTERM)
        await term.expect(r"detached from \w+ \(it keeps running\)")
        await trio.to_thread.run_sync(lambda: term.child.expect(pexpect.EOF, timeout=10))
        assert cooked(term)  # the terminal's mode (the pty outlives the CLI) is back
        term.child.close()
        assert term.child.exitstatus == 128 + signal.SIGTERM
    finally:
        term.close()
    assert (await wait_status(runnerd, session_id, ("running",)))["kind"] == "running"
    async with runnerd.client() as client:
        await client.delete(f"/v1/sessions/{session_id}")


def cooked(term: Terminal) -> bool:
    """Echo and line editing on: the mode a shell leaves a terminal in."""
    lflag = termios.tcgetattr(term.child.child_fd)[3]
    return bool(lflag & termios.ECHO) and bool(lflag & termios.ICANON)
