"""The local backend under the watch session core (`runnerd.session`,
`SessionManager.start_watch`): a real app's output reaches its channel's
ring, an edit restarts it with the new file, a stop ends every process and
leaves nothing in the workdir."""

from __future__ import annotations

from pathlib import Path

import trio

from runnerd.backend.watch import OutputStream
from runnerd.local import LocalBackend
from runnerd.session.manager import SessionManager
from runnerd.session.watchspec import WatchSessionSpec
from runnerd.watch.apps import AppSpec
from runnerd.watch.changes import ChangeSet, Write
from tests.local.watchkit import leftovers, session_pids, watch_spec

SERVE = "import time\nprint('generation {n}', flush=True)\ntime.sleep(600)\n"


def ring_text(session: object, app: str) -> str:
    channel = session.app_channel(app)  # type: ignore[attr-defined]
    assert channel is not None
    chunks = [chunk for _, chunk in channel.ring.since(0).items]
    assert all(chunk[0] == OutputStream.TTY for chunk in chunks)
    return b"".join(chunk[1:] for chunk in chunks).decode(errors="replace")


async def wait_ring(session: object, app: str, needle: str) -> None:
    while needle not in ring_text(session, app):
        await session.wait_change()  # type: ignore[attr-defined]


async def test_watch_session_runs_restarts_and_stops_on_the_local_backend(
    backend: LocalBackend, workdir: Path
) -> None:
    manager = SessionManager(backend, max_sessions=4, exit_ttl_s=60, replay_buffer_bytes=1 << 20)
    spec = watch_spec({"app.py": SERVE.format(n=1)})
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            session = manager.start_watch(
                WatchSessionSpec(watch=spec, apps=(AppSpec("web", "app.py"),))
            )
            await wait_ring(session, "web", "generation 1")
            # The app's first output can come before `running` (the ports
            # are published first): a write before it is `409 not_running`.
            while session.status["kind"] != "running":
                await session.wait_change()
            await session.apply_changes(
                ChangeSet(writes=(Write("app.py", SERVE.format(n=2).encode()),))
            )
            await wait_ring(session, "web", "generation 2")
            await manager.stop(spec.session_id)
            assert session.status["kind"] == "stopped", session.status
            nursery.cancel_scope.cancel()
    assert session_pids(workdir, spec.session_id) == []
    assert leftovers(workdir) == []
