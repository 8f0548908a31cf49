"""LocalBackend stop, process-group and cleanup guarantees: nothing outlives a session."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
import trio

from runnerd.backend import Exited
from runnerd.local import LocalBackend
from runnerd.local.settings import LocalConfig
from tests.escapes import HOST_PID, host_pid, wait_gone, wait_token_gone

from .conftest import runtimes
from .recording import RecordingSink, start_session
from .specs import bundle_spec

# A background sleep that records its pid token ($! is the namespace's number).
RECORDED_SLEEP = f"sh -c '{HOST_PID}; echo $HOST_PID > \"$PIDFILE\"; exec sleep 1000'"
# The pid file is in the session's cwd; its token is also printed, for a
# test that reads it once the session (and its directory) is gone.
WAIT_PIDFILE = 'while [ ! -s "$PIDFILE" ]; do sleep 0.02; done; echo "token $(cat "$PIDFILE")"'


def printed_token(out: bytes) -> str:
    """The `HOST_PID` token `WAIT_PIDFILE` printed."""
    match = re.search(rb"token (\S+)", out)
    assert match is not None, out
    return match.group(1).decode()


def is_gone(pid: int) -> bool:
    """No such process, or only a zombie waiting for its (init) parent."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def patient(workdir: Path, containment: str) -> LocalBackend:
    """A backend whose stop grace (30 s) outlasts any test: a workload's
    SIGTERM handler always runs before a SIGKILL could come, however late a
    loaded machine schedules it (0.5 s was not enough on a 2-core CI box)."""
    local = LocalConfig(
        workdir=workdir, stop_grace_s=30, runtimes=runtimes(), containment=containment
    )
    return LocalBackend(local)


@pytest.mark.parametrize("containment", ["auto", "process-group"])
async def test_stop_sends_sigterm_and_the_program_may_finish_on_it(
    workdir: Path, containment: str
) -> None:
    sink = RecordingSink()
    # The marker is in the session's cwd, which goes with it: the test holds
    # the file open and reads it once the session is gone.
    spec = bundle_spec(
        "python",
        """
        import signal, sys, time
        def on_term(signum, frame):
            with open("marker", "w") as f:
                f.write("TERM")
            sys.exit(0)
        open("marker", "w").close()
        signal.signal(signal.SIGTERM, on_term)
        print("trapped", flush=True)
        while True:
            time.sleep(1)
        """,
    )
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, patient(workdir, containment), spec, sink)
            await sink.wait_output(b"trapped")
            marker = (workdir / spec.session_id / "app" / "marker").open()
            pid = session.handle.pid
            session.scope.cancel()
            await session.result()
    # The program's own exit ended the stop: no SIGKILL cut its handler short.
    with marker:
        assert marker.read() == "TERM"
    await wait_gone(pid)


async def test_stop_sends_sigkill_after_the_grace_when_sigterm_is_ignored(
    backend: LocalBackend,
) -> None:
    sink = RecordingSink()
    spec = bundle_spec(
        "python",
        """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring", flush=True)
        while True:
            time.sleep(1)
        """,
    )
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            await sink.wait_output(b"ignoring")
            pid = session.handle.pid
            started = trio.current_time()
            session.scope.cancel()
            await session.result()
            elapsed = trio.current_time() - started
    # stop_grace_s is 0.5: the KILL waits it out. The upper bound is loose
    # (grace + 5 s): a loaded 2-core CI box may schedule us late.
    assert 0.5 <= elapsed < 0.5 + 5
    await wait_gone(pid)


@pytest.mark.parametrize("containment", ["auto", "process-group"])
async def test_a_stop_sends_one_sigterm_however_the_session_unwinds(
    workdir: Path, containment: str
) -> None:
    # The SIGTERM goes out when the session's wait is cancelled, before its
    # tasks unwind to the teardown, which must not send a second one (a
    # program may take a second TERM as "force quit").
    # Outside /tmp (the session has a private one), writable by its uid.
    shared = Path(
        tempfile.mkdtemp(prefix="rd-term-", dir="/run" if os.access("/run", os.W_OK) else None)
    )
    os.chmod(shared, 0o777)
    marker = shared / "marker"
    sink = RecordingSink()
    spec = bundle_spec(
        "python",
        """
        import os, signal, time
        terms = []
        def on_term(signum, frame):
            terms.append(time.monotonic())
            with open(os.environ["MARKER"], "a") as f:
                f.write("TERM\\n")
        signal.signal(signal.SIGTERM, on_term)
        print("trapped", flush=True)
        # A second SIGTERM would follow the first within the stop's
        # unwinding: a second after the first, the program ends itself.
        while not terms or time.monotonic() - terms[0] < 1:
            time.sleep(0.05)
        """,
        env={"MARKER": str(marker)},
    )
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, patient(workdir, containment), spec, sink)
            await sink.wait_output(b"trapped")
            session.scope.cancel()
            await session.result()  # the program ends a second after its SIGTERM
    try:
        assert marker.read_text() == "TERM\n"
    finally:
        shutil.rmtree(shared, ignore_errors=True)


async def test_stop_of_cooperative_program_does_not_wait_for_grace(workdir: Path) -> None:
    sink = RecordingSink()
    spec = bundle_spec("sh", "echo up\nexec sleep 1000\n")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, patient(workdir, "auto"), spec, sink)
            await sink.wait_output(b"up")
            started = trio.current_time()
            session.scope.cancel()
            await session.result()
            assert trio.current_time() - started < 5  # SIGTERM ended it, not the 30 s grace


async def test_exit_kills_background_children_left_behind(
    backend: LocalBackend, tmp_path: Path
) -> None:
    sink = RecordingSink()
    # nohup: the child ignores the SIGHUP the kernel sends when the leader exits.
    spec = bundle_spec(
        "sh",
        f"nohup {RECORDED_SLEEP} >/dev/null 2>&1 &\n{WAIT_PIDFILE}\nexit 5\n",
        env={"PIDFILE": "pid"},
    )
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            assert await session.result() == Exited(5)
        await wait_token_gone(printed_token(sink.out))


async def test_environment_is_session_env_plus_plumbing_only(
    backend: LocalBackend, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNNERD_DAEMON_ONLY", "leaked")
    sink = RecordingSink()
    spec = bundle_spec(
        "python",
        """
        import os
        for key in sorted(os.environ):
            print(f"{key}={os.environ[key]}")
        print("cwd=" + os.getcwd())
        """,
        env={"GREETING": "hi there"},
    )
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            assert await session.result() == Exited(0)
    lines = sink.out.decode().split("\r\n")
    env = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("cwd="))
    work = str(workdir / spec.session_id / "work")
    app = str(workdir / spec.session_id / "app")
    # LC_CTYPE is set by the interpreter itself (PEP 538 locale coercion).
    env.pop("LC_CTYPE", None)
    assert env == {
        "GREETING": "hi there",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": work,
        "TERM": "xterm-256color",
        "LANG": "C.UTF-8",
    }
    # The bundle's directory, as the Telo runners run an entry; HOME apart.
    assert f"cwd={app}" in lines


async def test_bundle_is_written_private_with_its_layout(
    backend: LocalBackend, workdir: Path
) -> None:
    sink = RecordingSink()
    spec = bundle_spec(
        "sh",
        'cat "$(dirname "$0")/../lib/data.txt"\necho\necho "entry=$0"\nread line\n',
        entry="bin/run.sh",
        extra_files={"lib/data.txt": "payload ✓", "README": "docs"},
    )
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            await sink.wait_output(b"entry=")
            root = workdir / spec.session_id
            app = root / "app"
            for directory in (root, app, app / "bin", app / "lib", root / "work"):
                assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
            for file in (app / "bin/run.sh", app / "lib/data.txt", app / "README"):
                assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
            assert (app / "lib/data.txt").read_text(encoding="utf-8") == "payload ✓"
            assert list((root / "work").iterdir()) == []
            session.handle.write(b"\n")
            assert await session.result() == Exited(0)
    assert "payload ✓" in sink.out.decode()
    assert f"entry={app / 'bin/run.sh'}".encode() in sink.out
    assert not root.exists()


async def test_session_dir_is_deleted_even_with_readonly_leftovers(
    backend: LocalBackend, workdir: Path
) -> None:
    sink = RecordingSink()
    spec = bundle_spec("sh", "mkdir -p keep/inner\ntouch keep/inner/f\nchmod 500 keep/inner keep\n")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            assert await session.result() == Exited(0)
    assert not (workdir / spec.session_id).exists()


def pgrp_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])


# A stop reaches a background child that ignores SIGTERM in the session's
# process group, and one that job control (`set -m`) put in a group of its own.
@pytest.mark.parametrize(
    ("prefix", "own_group"),
    [('trap "" TERM\n', False), ("set -m\n", True)],
    ids=["grandchild_ignoring_term", "job_control_job"],
)
async def test_stop_kills_background_children(
    backend: LocalBackend, tmp_path: Path, prefix: str, own_group: bool
) -> None:
    sink = RecordingSink()
    spec = bundle_spec(
        "sh",
        f"{prefix}{RECORDED_SLEEP} &\n{WAIT_PIDFILE}\necho spawned\nwait\n",
        env={"PIDFILE": "pid"},
    )
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            await sink.wait_output(b"spawned")
            child = host_pid(printed_token(sink.out))
            assert not is_gone(child)
            if own_group:
                assert pgrp_of(child) != session.handle.pid
            session.scope.cancel()
            await session.result()
        await wait_gone(child)
