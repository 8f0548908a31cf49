"""The local backend's watch sessions (`LocalBackend.open_watch`), driven
directly: real processes on real PTYs and pipes in the session's sandbox,
under both containments (the shared namespaces, and the process-group
fallback)."""

from __future__ import annotations

import dataclasses
import itertools
import os
import socket
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from runnerd.backend import BundleSpec, CreationSpec, Exited, ImageSpec, SessionIdentity, StartError
from runnerd.backend.watch import (
    AgentLaunch,
    AppLaunch,
    AppStarted,
    OutputStream,
    WatchHost,
    WatchSpec,
)
from runnerd.contract import PortMapping, RunPhase
from runnerd.local import LocalBackend
from runnerd.local.containment import Containment
from runnerd.watch.changes import ChangeSet, Write
from tests.local.specs import LIMITS

_ids = itertools.count(1)


class Sink:
    """An `AppSink` that keeps what one process wrote, per stream."""

    def __init__(self) -> None:
        self.streams: dict[OutputStream, bytearray] = {s: bytearray() for s in OutputStream}
        self.chunks: list[tuple[OutputStream, bytes]] = []
        self._changed = trio.Event()

    def output(self, data: bytes, stream: OutputStream = OutputStream.TTY) -> None:
        self.chunks.append((stream, data))
        self.streams[stream] += data
        self._changed.set()
        self._changed = trio.Event()

    def output_lost(self) -> None:
        raise AssertionError("no output may be lost here")

    def progress(self, phase: RunPhase, message: str, done: bool | None = None) -> None:
        pass

    async def drain(self, *steps: Callable[[], Awaitable[object]]) -> bool:
        for step in steps:
            await step()
        return True

    def text(self, stream: OutputStream = OutputStream.TTY) -> str:
        return self.streams[stream].decode(errors="replace")

    async def wait_for(self, needle: str, stream: OutputStream = OutputStream.TTY) -> None:
        while needle not in self.text(stream):
            await self._changed.wait()


class Progress:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def progress(self, phase: RunPhase, message: str, done: bool | None = None) -> None:
        self.messages.append(message)


def watch_spec(
    files: dict[str, str],
    *,
    image: str = "python",
    env: dict[str, str] | None = None,
    checkpoint: object = None,
    inspect: bool = False,
) -> WatchSpec:
    bundle = BundleSpec(
        entry=next(iter(files)),
        files=tuple((path, textwrap.dedent(text)) for path, text in files.items()),
    )
    return WatchSpec(
        identity=SessionIdentity(
            session_id=f"watch{next(_ids):07d}", limits=LIMITS, inspect=inspect, created_at=0.0
        ),
        creation=CreationSpec(
            image=ImageSpec(image=image, pull_policy="missing"), env=env or {}, bundle=bundle
        ),
        checkpoint=checkpoint,  # type: ignore[arg-type]
    )


@asynccontextmanager
async def running(
    host: WatchHost, app: AppLaunch, sink: Sink
) -> AsyncIterator[tuple[AppStarted, trio.CancelScope, list[Exited]]]:
    """`app` running in a nursery of the test's; cancelled on leaving."""
    outcome: list[Exited] = []

    async def run(task_status: trio.TaskStatus[AppStarted]) -> None:
        result = await host.run_app(app, sink, task_status=task_status)
        assert isinstance(result, Exited)
        outcome.append(result)

    async with trio.open_nursery() as nursery:
        started = await nursery.start(run)
        yield started, nursery.cancel_scope, outcome
        nursery.cancel_scope.cancel()


def session_pids(workdir: Path, session_id: str) -> list[int]:
    """Every host process whose cwd is in the session's directory."""
    root = str(workdir / session_id)
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cwd = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                continue
            if cwd == root or cwd.startswith(root + "/"):
                found.append(int(entry))
    return found


def leftovers(workdir: Path) -> list[str]:
    """What is left in the workdir but the (empty) trash."""
    if not workdir.exists():
        return []
    left = [name for name in os.listdir(workdir) if name != ".trash"]
    trash = workdir / ".trash"
    if trash.exists():
        left += [f".trash/{name}" for name in os.listdir(trash)]
    return left


APP_PY = """
import os, sys
print("cwd", os.getcwd(), "tty", sys.stdout.isatty(), sys.stdin.isatty(), flush=True)
print("to-stderr", file=sys.stderr, flush=True)
print("to-stdout", flush=True)
sys.exit(int(os.environ.get("CODE", "3")))
"""


async def test_watch_tty_app_runs_in_the_workspace_on_a_terminal(
    backend: LocalBackend, workdir: Path
) -> None:
    spec = watch_spec({"src/app.py": APP_PY}, env={"CODE": "5"})
    sink = Sink()
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            workspace = workdir / spec.session_id / "app"
            result = await host.run_app(AppLaunch("web", "src/app.py"), sink)
            assert result == Exited(5), sink.text()
    assert f"cwd {workspace} tty True True" in sink.text()
    assert "to-stderr" in sink.text() and "to-stdout" in sink.text()
    assert {stream for stream, _ in sink.chunks} == {OutputStream.TTY}
    assert leftovers(workdir) == []


async def test_watch_streams_app_keeps_stdout_and_stderr_apart(
    backend: LocalBackend, workdir: Path
) -> None:
    spec = watch_spec({"app.py": APP_PY})
    sink = Sink()
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            result = await host.run_app(AppLaunch("worker", "app.py", io="streams"), sink)
    assert result == Exited(3)
    assert "tty False False" in sink.text(OutputStream.STDOUT)
    assert sink.text(OutputStream.STDERR) == "to-stderr\n"
    assert "to-stderr" not in sink.text(OutputStream.STDOUT)
    assert sink.streams[OutputStream.TTY] == b""


async def test_watch_missing_entry_is_a_start_error_naming_it(
    backend: LocalBackend, workdir: Path
) -> None:
    spec = watch_spec({"app.py": APP_PY})
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            with pytest.raises(StartError) as info:
                await host.run_app(AppLaunch("web", "src/x.py"), Sink())
            assert info.value.message == "entry 'src/x.py' is not a file in the workspace"
            await host.apply(ChangeSet(writes=(Write("src/x.py", b"print('now')\n"),)))
            sink = Sink()
            assert await host.run_app(AppLaunch("web", "src/x.py"), sink) == Exited(0)
            assert "now" in sink.text()
    assert leftovers(workdir) == []


async def test_watch_restart_is_stop_then_start_with_the_new_file(
    backend: LocalBackend, workdir: Path
) -> None:
    serve = "import time\nprint('generation', {n}, flush=True)\ntime.sleep(600)\n"
    spec = watch_spec({"app.py": serve.format(n=1)})
    app = AppLaunch("web", "app.py")
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            first = Sink()
            async with running(host, app, first) as (_, scope, _):
                await first.wait_for("generation 1")
                assert len(session_pids(workdir, spec.session_id)) >= 1
                scope.cancel()
            await host.apply(ChangeSet(writes=(Write("app.py", serve.format(n=2).encode()),)))
            second = Sink()
            async with running(host, app, second):
                await second.wait_for("generation 2")
            assert "generation 2" not in first.text()
    assert leftovers(workdir) == []
    assert session_pids(workdir, spec.session_id) == []


SERVER_PY = """
import os, socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(os.environ["PORT"])))
s.listen()
print("listening", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"hello from the server\\n")
    c.close()
"""

CLIENT_PY = """
import os, socket
c = socket.create_connection(("127.0.0.1", int(os.environ["PORT"])))
print("got:", c.recv(100).decode().strip(), flush=True)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_watch_apps_reach_each_other_on_loopback(
    backend: LocalBackend, workdir: Path
) -> None:
    port = _free_port()
    spec = watch_spec({"server.py": SERVER_PY, "client.py": CLIENT_PY}, env={"PORT": str(port)})
    server_app = AppLaunch("server", "server.py", ports=(PortMapping(port=port, protocol="tcp"),))
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            server = Sink()
            async with running(host, server_app, server) as (started, _, _):
                await server.wait_for("listening")
                client = Sink()
                code = await host.run_app(AppLaunch("client", "client.py", slot=1), client)
                assert code == Exited(0), client.text()
                assert "got: hello from the server" in client.text()
                # Published on the host's loopback, as a run session's ports.
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                async with stream:
                    assert b"hello from the server" in await stream.receive_some(100)
                assert started.address is not None
    assert leftovers(workdir) == []


AGENT_PY = """
import os, socket
print("workspace", os.environ["WORKSPACE_DIR"], "token", os.environ["AGENT_TOKEN"], flush=True)
print("sees", sorted(os.listdir(os.environ["WORKSPACE_DIR"])), flush=True)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(os.environ["AGENT_PORT"])))
s.listen()
print("agent listening", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"agent here\\n")
    c.close()
"""


def agent_backend(workdir: Path, containment: str, agent_file: Path) -> LocalBackend:
    from runnerd.local.settings import LocalConfig, RuntimeConfig
    from tests.local.conftest import PYTHON, runtimes

    agent = RuntimeConfig(name="agent", command=(PYTHON, "-u", str(agent_file)))
    return LocalBackend(
        LocalConfig(
            workdir=workdir,
            stop_grace_s=0.5,
            runtimes={**runtimes(), "agent": agent},
            containment=containment,  # type: ignore[arg-type]
        )
    )


@pytest.mark.parametrize("containment", ["auto", "process-group"])
async def test_watch_agent_gets_the_workspace_and_its_token_and_its_port_is_published(
    workdir: Path, visible_dir: Path, containment: str
) -> None:
    agent_file = visible_dir / "agent.py"
    agent_file.write_text(AGENT_PY)
    agent_file.chmod(0o644)
    backend = agent_backend(workdir, containment, agent_file)
    port = _free_port()
    spec = watch_spec({"app.py": CLIENT_PY}, env={"PORT": str(port)})
    launch = AgentLaunch(
        "coder",
        ImageSpec(image="agent", pull_policy="missing"),
        port,
        env={"AGENT_TOKEN": "s3cret", "AGENT_PORT": str(port)},
    )
    sink = Sink()
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host, trio.open_nursery() as nursery:
            started = await nursery.start(host.run_agent, launch, sink)
            await sink.wait_for("agent listening", OutputStream.STDOUT)
            workspace = workdir / spec.session_id / "app"
            assert f"workspace {workspace} token s3cret" in sink.text(OutputStream.STDOUT)
            assert "sees ['app.py']" in sink.text(OutputStream.STDOUT)
            # An app reaches the agent on 127.0.0.1, and so does the host.
            client = Sink()
            assert await host.run_app(AppLaunch("web", "app.py"), client) == Exited(0)
            assert "got: agent here" in client.text()
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                assert b"agent here" in await stream.receive_some(100)
            assert isinstance(started, AppStarted) and not started.self_watching
            nursery.cancel_scope.cancel()
    assert leftovers(workdir) == []


async def test_watch_checkpoint_restores_in_a_new_session_place(
    backend: LocalBackend, workdir: Path
) -> None:
    spec = watch_spec({"app.py": "print('v1')\n", "lib/util.py": "X = 1\n"})
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            await host.apply(
                ChangeSet(writes=(Write("app.py", b"print('v2')\n"), Write("bin.dat", b"\0\1\2")))
            )
            before = await host.list_files()
            checkpoint = await host.checkpoint()
        assert (checkpoint.files, checkpoint.size_bytes) == (3, len(b"print('v2')\n") + 6 + 3)
        assert leftovers(workdir) == [f".trash/{Path(checkpoint.path).name}"]  # type: ignore[attr-defined]
        resumed = dataclasses.replace(spec, checkpoint=checkpoint)
        async with backend.open_watch(resumed, Progress()) as host:
            assert await host.list_files() == before
            assert await host.read_file("bin.dat") == b"\0\1\2"
            sink = Sink()
            assert await host.run_app(AppLaunch("web", "app.py"), sink) == Exited(0)
            assert "v2" in sink.text()
        await checkpoint.discard()
        await checkpoint.discard()  # idempotent
    assert leftovers(workdir) == []


async def test_watch_self_watching_runtime_gets_its_watch_args(workdir: Path) -> None:
    from runnerd.local.settings import LocalConfig, RuntimeConfig
    from tests.local.conftest import PYTHON

    watcher = RuntimeConfig(
        name="watcher",
        command=(PYTHON, "-u", "{entry}"),
        watch="self",
        watch_args=("--watch", "now"),
    )
    backend = LocalBackend(
        LocalConfig(workdir=workdir, stop_grace_s=0.5, runtimes={"watcher": watcher})
    )
    spec = watch_spec({"app.py": "import sys\nprint('argv', sys.argv[1:])\n"}, image="watcher")
    sink = Sink()
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            async with running(host, AppLaunch("web", "app.py"), sink) as (started, _, _):
                assert started.self_watching
                await sink.wait_for("]")
    assert "argv ['--watch', 'now']" in sink.text()


SLEEPER_PY = """
import os, time
print("pidns", os.readlink("/proc/self/ns/pid"), flush=True)
time.sleep(600)
"""

LOOKER_PY = """
import os
cmds = []
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    try:
        cmds.append(open(f"/proc/{pid}/cmdline", "rb").read())
    except OSError:
        pass
print("pidns", os.readlink("/proc/self/ns/pid"), flush=True)
print("sees-sleeper", any(b"sleeper.py" in c for c in cmds), flush=True)
"""


async def test_watch_apps_share_the_session_pid_namespace_each_its_own_nested(
    backend: LocalBackend,
) -> None:
    if backend._plan.containment is not Containment.PID_NAMESPACE:
        pytest.skip("process-group containment: nothing to share but the host's")
    spec = watch_spec({"sleeper.py": SLEEPER_PY, "looker.py": LOOKER_PY})
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            sleeper = Sink()
            async with running(host, AppLaunch("sleeper", "sleeper.py"), sleeper):
                await sleeper.wait_for("\n")
                looker = Sink()
                code = await host.run_app(AppLaunch("looker", "looker.py", slot=1), looker)
                assert code == Exited(0), looker.text()
    assert "sees-sleeper True" in looker.text()
    # Each app in a PID namespace of its own (nested in the session's).
    own = [line for line in (sleeper.text() + looker.text()).splitlines() if "pidns" in line]
    assert len(own) == 2 and own[0] != own[1]
