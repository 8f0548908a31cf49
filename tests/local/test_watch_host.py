"""The local backend's watch host (`LocalBackend.open_watch`), driven
directly: real processes on real PTYs and pipes, the workspace as their
cwd, the agent, checkpoints, under both containments (the shared sandbox,
and the process-group fallback)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import trio

from runnerd.backend import Exited, ImageSpec, StartError
from runnerd.backend.watch import (
    AgentLaunch,
    AppLaunch,
    AppStarted,
    OutputStream,
)
from runnerd.contract import PortMapping
from runnerd.local import LocalBackend
from runnerd.watch.changes import ChangeSet, Write
from tests.local.watchkit import (
    Progress,
    Sink,
    free_port,
    leftovers,
    running,
    session_pids,
    watch_spec,
)

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

    def generations() -> list[int]:
        # The app's python processes (not the init's outer, whose argv has it too).
        return [
            pid
            for pid in session_pids(workdir, spec.session_id)
            if _cmdline(pid).split(b"\0")[1:2] == [b"-u"]
        ]

    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            first = Sink()
            async with running(host, app, first) as (_, scope, _):
                await first.wait_for("generation 1")
                assert len(generations()) == 1
                scope.cancel()
            # Stopped (its whole process tree) before the next one starts.
            assert generations() == []
            await host.apply(ChangeSet(writes=(Write("app.py", serve.format(n=2).encode()),)))
            second = Sink()
            async with running(host, app, second):
                await second.wait_for("generation 2")
                assert len(generations()) == 1
            assert "generation 2" not in first.text()
    assert leftovers(workdir) == []
    assert session_pids(workdir, spec.session_id) == []


STOPPED_PY = """
import signal, time
if {ignore}:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize(("ignore", "code"), [(False, 143), (True, 137)])
async def test_watch_a_stopped_generation_reports_its_real_exit_code(
    backend: LocalBackend, workdir: Path, ignore: bool, code: int
) -> None:
    spec = watch_spec({"app.py": STOPPED_PY.replace("{ignore}", str(ignore))})
    sink = Sink()
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            async with running(host, AppLaunch("web", "app.py"), sink) as (_, scope, _):
                await sink.wait_for("ready")
                scope.cancel()  # SIGTERM; SIGKILL after the stop grace if ignored
    assert sink.stopped_code == code
    assert leftovers(workdir) == []


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read()
    except OSError:
        return b""


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


async def test_watch_apps_reach_each_other_on_loopback(
    backend: LocalBackend, workdir: Path
) -> None:
    await _apps_meet(backend, workdir)


@pytest.mark.parametrize("network", ["none", "host"])
async def test_watch_apps_reach_each_other_on_every_network_mode(
    workdir: Path, network: str
) -> None:
    from runnerd.local.settings import LocalConfig
    from tests.local.conftest import runtimes

    local = LocalConfig(
        workdir=workdir,
        stop_grace_s=0.5,
        runtimes=runtimes(),
        network=network,  # type: ignore[arg-type]
    )
    await _apps_meet(LocalBackend(local), workdir)


async def _apps_meet(backend: LocalBackend, workdir: Path) -> None:
    """A server app and a client app meet on 127.0.0.1; the server's port is
    on the host's loopback, and the address's dial reaches it."""
    port = free_port()
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
                # What the core's reachability probes use.
                assert started.address is not None
                if started.address.dial is not None:
                    probe = await started.address.dial("127.0.0.1", port)
                    async with probe:
                        assert b"hello from the server" in await probe.receive_some(100)
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
    port = free_port()
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


async def test_watch_entry_must_be_a_regular_file_reached_through_directories(
    backend: LocalBackend, workdir: Path
) -> None:
    spec = watch_spec({"app.py": APP_PY, "src/real.py": "print('real')\n"})
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            app_dir = workdir / spec.session_id / "app"
            await trio.to_thread.run_sync(os.symlink, "real.py", app_dir / "src" / "link.py")
            await trio.to_thread.run_sync(os.symlink, "src", app_dir / "dirlink")
            for entry in ("src/link.py", "dirlink/real.py", "src", "src/real.py/x"):
                with pytest.raises(StartError) as info:
                    await host.run_app(AppLaunch("web", entry), Sink())
                assert info.value.message == f"entry {entry!r} is not a file in the workspace"


async def test_watch_a_runtime_not_configured_fails_to_enter_leaving_nothing(
    backend: LocalBackend, workdir: Path
) -> None:
    with pytest.raises(StartError) as info:
        async with backend.open_watch(watch_spec({"a.py": ""}, image="nope"), Progress()):
            raise AssertionError("entered")
    assert (info.value.stage, info.value.message) == ("provision", "no local runtime named 'nope'")
    assert leftovers(workdir) == []


async def test_watch_a_missing_runtime_executable_fails_each_start_not_the_place(
    backend: LocalBackend, workdir: Path
) -> None:
    spec = watch_spec({"a.py": ""}, image="missing")
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            with pytest.raises(StartError) as info:
                await host.run_app(AppLaunch("web", "a.py"), Sink())
            assert await host.list_files() != []  # the place is up
    message = "local runtime 'missing': executable 'no-such-program-xyz' not found"
    assert (info.value.stage, info.value.message) == ("provision", message)
    assert leftovers(workdir) == []


async def test_watch_a_damaged_checkpoint_fails_the_resume_leaving_nothing(
    backend: LocalBackend, workdir: Path
) -> None:
    spec = watch_spec({"app.py": "print(1)\n"})
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            checkpoint = await host.checkpoint()
        path = Path(checkpoint.path)  # type: ignore[attr-defined]
        data = await trio.to_thread.run_sync(path.read_bytes)
        await trio.to_thread.run_sync(path.write_bytes, data[:-5])
        with pytest.raises(StartError) as info:
            resumed = dataclasses.replace(spec, checkpoint=checkpoint)
            async with backend.open_watch(resumed, Progress()):
                raise AssertionError("entered")
        assert info.value.message.startswith("cannot restore the workspace: ")
        await checkpoint.discard()
    assert leftovers(workdir) == []


async def test_watch_streams_app_reads_its_stdin_from_the_handle(
    backend: LocalBackend, workdir: Path
) -> None:
    echo = "import sys\nfor line in sys.stdin:\n    print('echo', line.strip(), flush=True)\n"
    spec = watch_spec({"echo.py": echo})
    sink = Sink()
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            app = AppLaunch("echo", "echo.py", io="streams")
            async with running(host, app, sink) as (started, _, _):
                started.handle.write(b"hello\n")
                await sink.wait_for("echo hello\n", OutputStream.STDOUT)


async def test_watch_tty_app_is_resized_through_its_handle(
    backend: LocalBackend, workdir: Path
) -> None:
    sizes = (
        "import os, signal, sys\n"
        "def show(*_):\n"
        "    print('size', *os.get_terminal_size(), flush=True)\n"
        "signal.signal(signal.SIGWINCH, show)\n"
        "show()\n"
        "sys.stdin.read()\n"
    )
    spec = watch_spec({"size.py": sizes})
    sink = Sink()
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            async with running(host, AppLaunch("size", "size.py"), sink) as (started, _, _):
                await sink.wait_for("size 80 24")
                started.handle.resize(132, 40)
                await sink.wait_for("size 132 40")
