"""The watch session's sandbox on the local backend (`runnerd.local.sandbox`):
apps share its namespaces, each in a PID namespace of its own in it, and
nothing of an app outlives its stop, the session or a SIGKILLed daemon."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from runnerd.backend import Exited, StartError
from runnerd.backend.watch import (
    AppLaunch,
    OutputStream,
)
from runnerd.local import LocalBackend
from runnerd.local.containment import Containment
from tests.escapes import (
    HOST_PID,
    escape_script,
    host_pid,
    is_running,
    kill_leftovers,
    read_pids,
    wait_all_gone,
    wait_gone,
)
from tests.local.watchkit import (
    Progress,
    Sink,
    leftovers,
    running,
    session_pids,
    watch_spec,
)

WRITER_PY = """
import os, time
open("/tmp/shared-note", "w").write("from the writer")
print("wrote", os.getpid(), flush=True)
time.sleep(600)
"""

READER_PY = """
import os
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print("read", open("/tmp/shared-note").read(), flush=True)
print("self", os.readlink("/proc/self") == str(os.getpid()), "init-visible", 1 in pids, flush=True)
"""


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as file:
        return file.read()


def _nspid(pid: int) -> list[str]:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))


async def test_watch_apps_share_the_sandbox_each_in_its_own_pid_namespace_in_it(
    backend: LocalBackend, workdir: Path
) -> None:
    if backend._plan.containment is not Containment.PID_NAMESPACE:
        pytest.skip("process-group containment: nothing to share but the host's")
    spec = watch_spec({"writer.py": WRITER_PY, "reader.py": READER_PY})
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            writer = Sink()
            async with running(host, AppLaunch("writer", "writer.py"), writer):
                await writer.wait_for("\n")
                reader = Sink()
                code = await host.run_app(AppLaunch("reader", "reader.py", slot=1), reader)
                assert code == Exited(0), reader.text()
                # The host sees three levels: the host's, the session's, the app's.
                # (its init's outer, in the host's only, has the app's argv too).
                levels = {
                    len(_nspid(pid))
                    for pid in session_pids(workdir, spec.session_id)
                    if b"writer.py" in _cmdline(pid)
                }
                assert max(levels) == 3
    # The session's /tmp is one (its mount view is shared) ...
    assert "read from the writer" in reader.text()
    # ... and each app's /proc is its own PID namespace's, agreeing with getpid().
    assert "self True init-visible True" in reader.text()


OTHER_SH = f'{HOST_PID}\necho "token $HOST_PID"\nexec sleep 4344\n'


def _token(sink: Sink) -> str:
    return sink.text().split("token ", 1)[1].split()[0]


async def test_watch_stopping_one_app_stops_all_it_started_and_nothing_of_another(
    backend: LocalBackend, workdir: Path
) -> None:
    if backend._plan.containment is not Containment.PID_NAMESPACE:
        pytest.skip("process-group containment: a detached process outlives it (announced)")
    script = 'export PIDFILE="$PWD/escaper.pids"\n' + escape_script()
    spec = watch_spec({"escaper.sh": script, "other.sh": OTHER_SH}, image="sh")
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            other = Sink()
            async with running(host, AppLaunch("other", "other.sh", slot=1), other):
                await other.wait_for("\n")
                other_pid = host_pid(_token(other))
                escaper = Sink()
                async with running(host, AppLaunch("escaper", "escaper.sh"), escaper) as (
                    _,
                    scope,
                    _,
                ):
                    await escaper.wait_for("escaped")
                    pids = read_pids(workdir / spec.session_id / "app" / "escaper.pids")
                    scope.cancel()
                await wait_all_gone(pids)
                assert is_running(other_pid)
            await wait_gone(other_pid)
    assert session_pids(workdir, spec.session_id) == []


async def test_watch_leaving_stops_every_app_and_what_it_detached(
    backend: LocalBackend, workdir: Path
) -> None:
    script = 'export PIDFILE="$PWD/escaper.pids"\n' + escape_script()
    spec = watch_spec({"escaper.sh": script}, image="sh")
    namespaced = backend._plan.containment is Containment.PID_NAMESPACE
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host, trio.open_nursery() as nursery:
            escaper = Sink()
            await nursery.start(host.run_app, AppLaunch("escaper", "escaper.sh"), escaper)
            await escaper.wait_for("escaped")
            pids = read_pids(workdir / spec.session_id / "app" / "escaper.pids")
            nursery.cancel_scope.cancel()
    try:
        if namespaced:
            await wait_all_gone(pids)
        assert leftovers(workdir) == []
    finally:
        kill_leftovers(pids)


REPO = Path(__file__).resolve().parents[2]
DAEMON = """
import sys, trio
from pathlib import Path
from runnerd.backend.watch import AppLaunch
from runnerd.local import LocalBackend
from runnerd.local.settings import LocalConfig
from tests.local.conftest import runtimes
from tests.local.test_watch_sandbox import OTHER_SH
from tests.local.watchkit import Progress, Sink, watch_spec

async def main() -> None:
    backend = LocalBackend(LocalConfig(workdir=Path(sys.argv[1]), runtimes=runtimes()))
    spec = watch_spec({"a.sh": OTHER_SH, "b.sh": OTHER_SH}, image="sh")
    async with backend.open_watch(spec, Progress()) as host, trio.open_nursery() as nursery:
        for slot, name in enumerate("ab"):
            sink = Sink()
            await nursery.start(host.run_app, AppLaunch(name, f"{name}.sh", slot=slot), sink)
            await sink.wait_for("\\n")
            print(sink.text().strip(), flush=True)
        print("ready", flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


async def test_watch_a_sigkilled_daemon_takes_every_app_down(
    backend: LocalBackend, workdir: Path
) -> None:
    if backend._plan.containment is not Containment.PID_NAMESPACE:
        pytest.skip("process-group containment: as a run session's, announced")
    with trio.fail_after(60):
        daemon = await trio.lowlevel.open_process(
            [sys.executable, "-c", DAEMON, str(workdir)], cwd=REPO, stdout=subprocess.PIPE
        )
        try:
            assert daemon.stdout is not None
            out = b""
            while b"ready" not in out:
                chunk = await daemon.stdout.receive_some(4096)
                assert chunk, out
                out += chunk
            tokens = [line.split()[1] for line in out.decode().splitlines() if "token" in line]
            pids = {f"app{i}": host_pid(token) for i, token in enumerate(tokens)}
            assert len(pids) == 2
        finally:
            daemon.kill()
            await daemon.wait()
            await daemon.stdout.aclose()  # type: ignore[union-attr]
        await wait_all_gone(pids)


ISOLATION_PY = """
import os, socket, sys
print("fds", sorted(int(fd) for fd in os.listdir("/proc/self/fd")), flush=True)
print("sessions", sorted(os.listdir(os.path.dirname(os.path.dirname(os.getcwd())))), flush=True)
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).close()
    print("host-loopback reachable", flush=True)
except OSError as exc:
    print("host-loopback refused", type(exc).__name__, flush=True)
"""


async def test_watch_app_has_the_run_sessions_isolation(
    backend: LocalBackend, workdir: Path
) -> None:
    if backend._plan.containment is not Containment.PID_NAMESPACE:
        pytest.skip("process-group containment: the host's view and network (announced)")
    from runnerd.local.settings import LocalConfig

    rts = dict(backend._local.runtimes)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    rts["probe"] = dataclasses.replace(
        rts["python"], name="probe", command=(rts["python"].command[0], "-u", "{entry}", str(port))
    )
    backend = LocalBackend(LocalConfig(workdir=workdir, stop_grace_s=0.5, runtimes=rts))
    other = watch_spec({"x.py": ""})
    spec = watch_spec({"probe.py": ISOLATION_PY}, image="probe")
    try:
        with trio.fail_after(30):
            async with backend.open_watch(other, Progress()):
                async with backend.open_watch(spec, Progress()) as host:
                    for io in ("tty", "streams"):
                        sink = Sink()
                        app = AppLaunch("probe", "probe.py", io=io)  # type: ignore[arg-type]
                        assert await host.run_app(app, sink) == Exited(0)
                        text = sink.text() + sink.text(OutputStream.STDOUT)
                        # Its stdio only: no namespace, script or status fd of the daemon's.
                        assert "fds [0, 1, 2, 3]" in text  # 3: listdir's own
                        # The workdir is covered but for its own directory.
                        assert f"sessions ['{spec.session_id}']" in text
                        assert "host-loopback refused" in text
    finally:
        listener.close()


async def test_watch_a_killed_holder_takes_the_apps_and_is_said_at_the_next_start(
    backend: LocalBackend, workdir: Path
) -> None:
    if backend._plan.containment is not Containment.PID_NAMESPACE:
        pytest.skip("process-group containment: no holder")
    spec = watch_spec({"a.sh": OTHER_SH}, image="sh")
    with trio.fail_after(30):
        async with backend.open_watch(spec, Progress()) as host:
            sink = Sink()
            async with running(host, AppLaunch("a", "a.sh"), sink) as _:
                await sink.wait_for("\n")
                app_pid = host_pid(_token(sink))
                # The holder's workload, and its outer (the daemon's child).
                holders = [
                    pid
                    for pid in session_pids(workdir, spec.session_id)
                    if b"sleep\0infinity" in _cmdline(pid)
                ]
                sleeper = next(p for p in holders if _cmdline(p).split(b"\0")[1] == b"infinity")
                os.kill(sleeper, signal.SIGKILL)
                await wait_gone(app_pid)  # the session's PID namespace ended
                for pid in holders:
                    await wait_gone(pid)
            with pytest.raises(StartError) as info:
                await host.run_app(AppLaunch("a", "a.sh"), Sink())
            assert info.value.message == (
                "the session's sandbox is gone (its holder process exited)"
            )
    assert leftovers(workdir) == []
