"""`streams` processes: pipes for stdin, stdout and stderr in the real
sandbox (a PID namespace, and the process-group fallback), stdout and
stderr kept apart, torn down like a PTY session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from runnerd.local.containment import Containment, probe_containment
from runnerd.local.identity import SessionIdentity
from runnerd.local.initpython import choose_init_python
from runnerd.local.spawn import Launch, spawn_streams_process
from runnerd.local.streams import STDERR, STDOUT, StreamsProcess
from runnerd.local.workspace import Workspace, WorkspaceLimits
from runnerd.watch.changes import ChangeSet, Write
from runnerd.watch.errors import WatchError
from tests.escapes import (
    ESCAPES,
    escape_script,
    is_running,
    kill_leftovers,
    read_pids,
    wait_all_gone,
)
from tests.harness import SESSION_PYTHON

SESSION_UID = 0x70000000 + 7  # a root daemon's session uid (any free one)


@pytest.fixture(scope="module", params=["namespace", "process-group"])
def launch(request: pytest.FixtureRequest) -> Launch:
    """As the backend builds it: the strongest containment this host allows
    (a root daemon's session under a uid of its own), or the fallback."""
    root = os.geteuid() == 0
    plan = probe_containment(
        allow_namespaces=request.param == "namespace", session_uid=SESSION_UID if root else None
    )
    identity = SessionIdentity(SESSION_UID, SESSION_UID) if plan.drops_root else None
    init_python, problem = choose_init_python(plan, None, identity)
    assert problem is None, problem
    return Launch(plan=plan, identity=identity, init_python=init_python)


class Output:
    """What a `StreamsProcess` wrote, per stream, and a way to wait for it."""

    def __init__(self) -> None:
        self.streams: dict[int, bytearray] = {STDOUT: bytearray(), STDERR: bytearray()}
        self.chunks: list[tuple[int, bytes]] = []
        self._changed = trio.Event()

    def __call__(self, stream: int, chunk: bytes) -> None:
        assert chunk and stream in self.streams
        self.chunks.append((stream, chunk))
        self.streams[stream] += chunk
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, stream: int, needle: bytes) -> None:
        while needle not in self.streams[stream]:
            await self._changed.wait()


async def spawn(launch: Launch, cwd: Path, *argv: str) -> StreamsProcess:
    return await spawn_streams_process(
        list(argv), cwd=cwd, env={"PATH": "/usr/bin:/bin"}, stop_grace_s=0.5, launch=launch
    )


async def run_to_end(proc: StreamsProcess, stdin: bytes = b"") -> tuple[int, Output]:
    """Feed `stdin`, read both streams to EOF, return the exit code."""
    output = Output()
    done = trio.Event()
    async with proc, trio.open_nursery() as nursery:
        nursery.start_soon(proc.run_reader, output, done)
        nursery.start_soon(proc.run_writer)
        proc.write(stdin)
        code = await proc.wait()
        await done.wait()
        nursery.cancel_scope.cancel()
    return code, output


PROBE = """\
import os, sys
print("ttys", [os.isatty(fd) for fd in range(3)], "uid", os.getuid(), flush=True)
sys.stderr.write("to-stderr\\n")
sys.stderr.flush()
print("got", sys.stdin.readline().strip(), flush=True)
sys.exit(5)
"""


async def test_a_streams_process_has_pipes_kept_apart_and_its_exit_code(
    launch: Launch, visible_dir: Path
) -> None:
    (visible_dir / "probe.py").write_text(PROBE)
    with trio.fail_after(20):
        proc = await spawn(launch, visible_dir, SESSION_PYTHON, "-I", "probe.py")
        code, output = await run_to_end(proc, b"hello\n")
    uid = os.geteuid() if launch.identity is None else launch.identity.uid
    assert code == 5
    assert (
        bytes(output.streams[STDOUT])
        == f"ttys [False, False, False] uid {uid}\ngot hello\n".encode()
    )
    assert bytes(output.streams[STDERR]) == b"to-stderr\n"


INTERLEAVED = """\
import os
for i in range(2000):
    os.write(1, b"out%05d\\n" % i)
    os.write(2, b"err%05d\\n" % i)
"""


async def test_each_stream_arrives_whole_and_in_order(launch: Launch, visible_dir: Path) -> None:
    (visible_dir / "both.py").write_text(INTERLEAVED)
    with trio.fail_after(20):
        proc = await spawn(launch, visible_dir, SESSION_PYTHON, "-I", "both.py")
        code, output = await run_to_end(proc)
    assert code == 0
    for stream, name in ((STDOUT, b"out"), (STDERR, b"err")):
        expected = b"".join(b"%s%05d\n" % (name, i) for i in range(2000))
        assert bytes(output.streams[stream]) == expected
    # A chunk never mixes streams: each chunk's lines are of its own stream.
    for stream, chunk in output.chunks:
        assert (b"err" in chunk) == (stream == STDERR) and (b"out" in chunk) == (stream == STDOUT)


async def test_pipes_reopened_by_name_work_as_the_session_uid(
    launch: Launch, visible_dir: Path
) -> None:
    # /dev/stdout and /proc/self/fd/2 reopen the pipe: the session's uid
    # must own it (a root daemon's pipes are root's otherwise).
    script = "echo via-name >/dev/stdout; echo err-by-name >/proc/self/fd/2"
    with trio.fail_after(20):
        proc = await spawn(launch, visible_dir, "/bin/sh", "-c", script)
        code, output = await run_to_end(proc)
    assert code == 0, bytes(output.streams[STDERR])
    assert bytes(output.streams[STDOUT]) == b"via-name\n"
    assert bytes(output.streams[STDERR]) == b"err-by-name\n"


async def test_a_missing_program_is_an_oserror_naming_it_and_leaves_no_fd(
    launch: Launch, visible_dir: Path
) -> None:
    before = set(os.listdir("/proc/self/fd"))
    with trio.fail_after(20), pytest.raises(OSError) as raised:
        await spawn(launch, visible_dir, "/no/such/program")
    assert raised.value.filename == "/no/such/program"
    assert set(os.listdir("/proc/self/fd")) == before


@pytest.fixture
def leftovers() -> Iterator[dict[str, int]]:
    pids: dict[str, int] = {}
    yield pids
    kill_leftovers(pids)  # only the fallback may leave any (see below)


async def test_cancelling_stops_every_process_of_it(
    launch: Launch, visible_dir: Path, leftovers: dict[str, int]
) -> None:
    # In a namespace every escapee dies with it; in a process group the
    # ones that stay in it (here: one that ignores SIGTERM) do.
    escapes = ESCAPES if launch.plan.containment is Containment.PID_NAMESPACE else {}
    script = escape_script() if escapes else "trap '' TERM; echo escaped; exec sleep 4344\n"
    (visible_dir / "pids").touch()
    (visible_dir / "pids").chmod(0o666)
    (visible_dir / "escape.sh").write_text(script)
    output = Output()
    with trio.fail_after(20):
        proc = await spawn_streams_process(
            ["/bin/sh", "escape.sh"],
            cwd=visible_dir,
            env={"PATH": "/usr/bin:/bin", "PIDFILE": "pids"},
            stop_grace_s=0.5,
            launch=launch,
        )
        async with proc, trio.open_nursery() as nursery:
            nursery.start_soon(proc.run_reader, output, trio.Event())
            await output.wait_for(STDOUT, b"escaped")
            if escapes:
                leftovers.update(read_pids(visible_dir / "pids"))
                assert all(is_running(pid) for pid in leftovers.values())
            with trio.move_on_after(0.05) as scope:
                scope.cancel()
                await proc.wait()
            nursery.cancel_scope.cancel()
        assert proc.exit_code is not None  # reaped: not even a zombie
        assert not is_running(proc.pid)
        await wait_all_gone(leftovers)


async def test_an_app_shares_its_workspace_with_the_daemon_and_its_tricks_stay_inside(
    launch: Launch, visible_dir: Path
) -> None:
    # The workspace is the app's cwd: the app reads what the daemon wrote
    # (as the session's uid) and plants a symlink to / and a FIFO; the
    # daemon's listing, reads and writes neither follow nor block on them.
    owner = None if launch.identity is None else (launch.identity.uid, launch.identity.gid)
    root = visible_dir / "ws"
    root.mkdir(mode=0o700)
    if owner is not None:
        os.chown(root, *owner)
    limits = WorkspaceLimits(1 << 20, 1 << 20, 1 << 20)
    ws = Workspace(root, scratch=visible_dir / ".scratch", owner=owner, limits=limits)
    script = "cat data.txt && echo appended >> data.txt && ln -s / escape && mkfifo pipe"
    with trio.fail_after(20):
        await ws.apply(ChangeSet((Write("data.txt", b"from-daemon\n"),)))
        proc = await spawn(launch, root, "/bin/sh", "-c", script)
        code, output = await run_to_end(proc)
        assert code == 0, bytes(output.streams[STDERR])
        assert bytes(output.streams[STDOUT]) == b"from-daemon\n"
        assert [(f.path, f.size) for f in await ws.list()] == [("data.txt", 21)]
        for path in ("escape/etc/hostname", "pipe"):
            with pytest.raises(WatchError, match="not a file in the workspace"):
                await ws.read(path)
        with pytest.raises(WatchError, match="'escape' is not a directory"):
            await ws.apply(ChangeSet((Write("escape/tmp/planted", b"x"),)))
        assert await ws.apply(ChangeSet(deletes=("pipe", "escape"))) == (0, 2)
    assert sorted(os.listdir(root)) == ["data.txt"]
